// The CPU backend: oneDNN matrix products (static shapes made at plan time) and xf's CPU kernels
// over one arena.
//
// Weights: int8 matrices and the embedding tables are used in place from the mapped file; f32
// matrices through oneDNN's packed copies, after which the file's pages of them are released
// (ModelFile::release_pages: resident once, not twice); f16 and bf16 tensors are widened to f32
// once, here, at load (the CPU kernels compute in f32). 1-D parameters are copied, so that
// decoding reads no mapped page but the embedding tables'.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend.h"
#include "memory_plan.h"
#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/format/model_file.h"
#include "xf/format/parameters.h"
#include "xf/kernels_cpu/kernels.h"
#include "xf/kernels_cpu/matmul.h"
#include "xf/model.h"

namespace xf::runtime {
namespace {

using cpu::HeadStrides;
using cpu::WeightMatrix;

// f32 views of the model's tensors; f16/bf16 (and 1-D int8) tensors widened once, by name.
class WeightStore {
 public:
  // matrix_dtype: f32 or int8 to convert every matrix to at load; unset: as stored (f16 and
  // bf16 widened to f32).
  WeightStore(const ModelFile& file, std::optional<DType> matrix_dtype)
      : file_(file), matrix_dtype_(matrix_dtype) {}

  // A 1-D parameter (bias, LayerNorm gain) as f32 values: a copy (small), since a read of the
  // mapping would fault back the released pages of a neighbouring matrix (the kernel maps a
  // faulting page's cached neighbours with it).
  const float* vector(const std::string& name) { return widened(file_.tensor(name)); }

  // A [rows, cols] matrix as f32 or int8 (the two dtypes StaticMatmul takes).
  WeightMatrix matrix(const std::string& name) {
    const TensorView& t = file_.tensor(name);
    WeightMatrix m;
    m.rows = static_cast<int64_t>(t.rows());
    m.cols = static_cast<int64_t>(t.cols());
    if (matrix_dtype_ == DType::int8 && t.dtype != DType::int8) {
      m.dtype = DType::int8;
      Quantized& q = quantized(t);
      m.data = q.values.data();
      m.row_scales = q.scales.data();
    } else if (t.dtype == DType::f32 || (t.dtype == DType::int8 && matrix_dtype_ != DType::f32)) {
      m.dtype = t.dtype;
      m.data = t.data;
      m.row_scales = t.row_scales;
    } else {
      m.dtype = DType::f32;
      m.data = widened(t);
    }
    return m;
  }

  const TensorView& stored(const std::string& name) const { return file_.tensor(name); }
  // Lets the file drop its mapped pages of a matrix that nothing reads any more.
  void release_stored(const TensorView& t) { file_.release_pages(t); }

  // An embedding table for embed(), which reads every dtype: converted like the matrices when
  // a conversion was asked for, else as stored or as its widened copy when one exists (so that
  // a tied output projection and the embedding share one f32 table).
  WeightMatrix table(const std::string& name) {
    if (matrix_dtype_) return matrix(name);
    const TensorView& t = file_.tensor(name);
    if (widened_.count(std::string(t.name)) != 0) return matrix(name);
    WeightMatrix m;
    m.dtype = t.dtype;
    m.data = t.data;
    m.row_scales = t.row_scales;
    m.rows = static_cast<int64_t>(t.rows());
    m.cols = static_cast<int64_t>(t.cols());
    return m;
  }

 private:
  struct Quantized {
    std::vector<int8_t> values;
    std::vector<float> scales;
  };

  // Per-row symmetric int8, as the converter writes it (quantize_rows_int8).
  Quantized& quantized(const TensorView& t) {
    const std::string key(t.name);
    auto it = quantized_.find(key);
    if (it != quantized_.end()) return it->second;
    std::vector<float> temporary;
    const float* values = static_cast<const float*>(t.data);
    if (t.dtype != DType::f32) {
      temporary.resize(t.elements());
      widen_to_f32(t, temporary.data());
      values = temporary.data();
    }
    Quantized& q = quantized_[key];
    q.values.resize(t.elements());
    q.scales.resize(t.rows());
    quantize_rows_int8(values, t.rows(), t.cols(), q.values.data(), q.scales.data());
    return q;
  }

  const float* widened(const TensorView& t) {
    const std::string key(t.name);
    auto it = widened_.find(key);
    if (it != widened_.end()) return it->second.data();
    std::vector<float>& values = widened_[key];
    values.resize(t.elements());
    widen_to_f32(t, values.data());
    return values.data();
  }

  const ModelFile& file_;
  std::optional<DType> matrix_dtype_;
  std::unordered_map<std::string, std::vector<float>> widened_;
  std::unordered_map<std::string, Quantized> quantized_;
};

// One weight's products, one static oneDNN primitive per row count the plan can give it.
class PlannedMatmul {
 public:
  PlannedMatmul(cpu::CpuEngine& engine, const MemoryPlan& plan, int64_t max_rows,
                const WeightMatrix& weights, const float* bias)
      : plan_(&plan), bias_(bias), in_(weights.cols), out_(weights.rows) {
    const int64_t largest = plan.padded_remainder(std::min(max_rows, plan.matmul_chunk));
    for (int64_t count : plan.matmul_row_counts) {
      if (count > largest) break;
      by_count_.emplace_back(engine, count, weights, bias != nullptr);
      workspace_bytes_ = std::max(workspace_bytes_, by_count_.back().workspace_bytes());
    }
  }

  size_t workspace_bytes() const { return workspace_bytes_; }
  // False when every product reads a packed copy of the weights it was given.
  bool reads_weights_in_place() const {
    for (const cpu::StaticMatmul& m : by_count_)
      if (m.reads_weights_in_place()) return true;
    return false;
  }

  // y[rows, out] = x[rows, in] W^T (+ bias). x and y hold plan.padded_rows(rows) rows.
  void run(int64_t rows, const float* x, float* y, void* workspace) const {
    const int64_t chunk = plan_->matmul_chunk;
    while (rows > 0) {
      const int64_t count = rows >= chunk ? chunk : plan_->padded_remainder(rows);
      const size_t index = static_cast<size_t>(
          std::lower_bound(plan_->matmul_row_counts.begin(), plan_->matmul_row_counts.end(), count) -
          plan_->matmul_row_counts.begin());
      if (index >= by_count_.size()) throw Error("internal: a product over more rows than planned");
      by_count_[index].run(x, bias_, y, workspace);
      x += count * in_;
      y += count * out_;
      rows -= std::min(rows, count);
    }
  }

 private:
  const MemoryPlan* plan_;
  const float* bias_;
  int64_t in_, out_;
  std::vector<cpu::StaticMatmul> by_count_;
  size_t workspace_bytes_ = 0;
};

struct Norm {
  const float* gamma = nullptr;
  const float* beta = nullptr;
};

struct EncoderLayer {
  std::unique_ptr<PlannedMatmul> qkv, self_output, ffn_inner, ffn_outer;
  const float* self_output_bias = nullptr;
  const float* ffn_inner_bias = nullptr;
  const float* ffn_outer_bias = nullptr;
  Norm self_norm, ffn_norm;
};

struct DecoderLayer {
  std::unique_ptr<PlannedMatmul> qkv, self_output, cross_query, cross_key_value, cross_output,
      ffn_inner, ffn_outer;
  const float* self_output_bias = nullptr;
  const float* cross_output_bias = nullptr;
  const float* ffn_inner_bias = nullptr;
  const float* ffn_outer_bias = nullptr;
  Norm self_norm, cross_norm, ffn_norm;
};

// oneDNN sizes a primitive's thread partition when the primitive is made, from OpenMP's
// current thread count: set it before making any, or primitives made for all cores would run
// teams that oversubscribe a caller that asked for fewer threads (measured: a 2-thread team per
// matmul at --threads 1 made decoding 9x slower on a busy 2-core machine).
int use_openmp_threads(int threads) {
  omp_set_num_threads(threads);
  return threads;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Model& model, const MemoryPlan& plan, int threads, std::optional<DType> matrix_dtype)
      : config_(model.config()), plan_(plan), threads_(use_openmp_threads(threads)), engine_(threads),
        weights_(model.file(), matrix_dtype) {
    d_ = config_.d_model;
    heads_ = config_.num_heads;
    head_dim_ = config_.head_dim();
    d_ff_ = config_.d_ff;
    vocab_ = config_.target_vocab_size;
    pre_norm_ = config_.norm_position == NormPosition::pre;
    prepare_weights();
    plan_arena();
  }

  void encode(const int32_t* source_ids, const int32_t* source_lengths, int64_t sentences,
              int64_t source_len) override;
  void decode_step(const int32_t* tokens, int64_t beam, int64_t step) override;
  void top_k(const float* row_offsets, int64_t k, float* values, int32_t* ids) override;
  float* host_logits() override { return logits_; }
  void reorder_cache(const int32_t* parents, int64_t step) override;
  bool can_drop_sentences() const override { return true; }
  void keep_sentences(const int32_t* kept, int64_t count) override;
  void copy_encoder_output(float* out) const override {
    std::memcpy(out, memory_, sizeof(float) * sentences_ * source_len_ * d_);
  }
  void copy_logits(float* out) const override {
    std::memcpy(out, logits_, sizeof(float) * rows_ * vocab_);
  }
  size_t arena_bytes() const override { return arena_.bytes(); }
  std::vector<const TensorView*> released_weights() const override { return released_; }

 private:
  void prepare_weights();
  void plan_arena();
  std::unique_ptr<PlannedMatmul> linear(const std::string& prefix, int64_t max_rows, bool fuse_bias,
                                        const float** separate_bias);
  std::unique_ptr<PlannedMatmul> planned_matmul(const std::string& weight_name, int64_t max_rows,
                                                const float* bias);
  Norm norm(const std::string& prefix) {
    return {weights_.vector(prefix + schema::kGamma), weights_.vector(prefix + schema::kBeta)};
  }
  // out = LayerNorm(x + bias + residual); bias and residual may be null.
  void layer_norm(const float* x, const float* bias, const float* residual, const Norm& n,
                  int64_t rows, float* out) {
    cpu::add_bias_residual_layer_norm(x, bias, residual, n.gamma, n.beta, config_.layer_norm_epsilon,
                                      rows, d_, out, nullptr, nullptr, threads_);
  }
  // The sub-layer's input: x itself (post-norm) or LayerNorm(x) into `normed` (pre-norm).
  const float* sublayer_input(const float* x, const Norm& n, int64_t rows, float* normed) {
    if (!pre_norm_) return x;
    layer_norm(x, nullptr, nullptr, n, rows, normed);
    return normed;
  }
  // x = LayerNorm(x + sublayer + bias) (post-norm) or x += sublayer + bias (pre-norm).
  void residual(float* x, const float* sublayer, const float* bias, const Norm& n, int64_t rows) {
    if (pre_norm_)
      cpu::add_bias_residual(x, bias, sublayer, rows, d_, threads_);
    else
      layer_norm(sublayer, bias, x, n, rows, x);
  }
  void encode_group(const int32_t* source_ids, const int32_t* source_lengths, int64_t sentences,
                    int64_t source_len, float* x);

  ModelConfig config_;
  const MemoryPlan& plan_;
  int threads_;
  cpu::CpuEngine engine_;
  WeightStore weights_;
  int64_t d_ = 0, heads_ = 0, head_dim_ = 0, d_ff_ = 0, vocab_ = 0;
  bool pre_norm_ = false;

  WeightMatrix source_table_, target_table_;
  // Stored matrices whose mapped pages were released. Views, not names: looking a name up reads
  // the file's header, whose pages would be mapped back, neighbours with them.
  std::vector<const TensorView*> released_;
  std::vector<EncoderLayer> encoder_;
  std::vector<DecoderLayer> decoder_;
  Norm encoder_final_norm_, decoder_final_norm_;
  std::unique_ptr<PlannedMatmul> output_projection_;
  size_t workspace_bytes_ = 0;

  Arena arena_;
  // Persistent across a batch.
  float* memory_ = nullptr;        // encoder output  [sentences * source_len (padded), d]
  float* cross_kv_ = nullptr;      // per decoder layer [sentences * source_len (padded), 2d]
  int64_t cross_kv_layer_stride_ = 0;
  // Self-attention K and V caches, current and next (the beam gather writes the other one):
  // [layers, max_rows, max_target_len, d]: a row's positions are contiguous, so a new position
  // is one copy per row and the beam gather one copy per row and layer.
  float* self_k_[2] = {nullptr, nullptr};
  float* self_v_[2] = {nullptr, nullptr};
  int current_cache_ = 0;
  int64_t cache_layer_stride_ = 0, cache_row_stride_ = 0;
  // Encoder working buffers (live during encode only), rows = encoder group (padded).
  float *enc_qkv_ = nullptr, *enc_context_ = nullptr, *enc_sublayer_ = nullptr,
        *enc_hidden_ = nullptr, *enc_normed_ = nullptr;
  // Decoder step buffers (live during a step), rows = decoder rows (padded).
  float *dec_x_ = nullptr, *dec_normed_ = nullptr, *dec_qkv_ = nullptr, *dec_query_ = nullptr,
        *dec_context_ = nullptr, *dec_sublayer_ = nullptr, *dec_hidden_ = nullptr;
  float* logits_ = nullptr;            // [rows (padded), vocab]
  float* attention_scratch_ = nullptr;  // [threads, longest key length]
  void* workspace_ = nullptr;           // the matrix products' scratchpad
  int32_t* source_lengths_ = nullptr;   // [max_sentences]
  int32_t* positions_ = nullptr;        // [max(encoder group rows, max_rows)]

  // The batch last encoded.
  int64_t sentences_ = 0, source_len_ = 0, rows_ = 0, beam_ = 1;
};

std::unique_ptr<PlannedMatmul> CpuBackend::linear(const std::string& prefix, int64_t max_rows,
                                                  bool fuse_bias, const float** separate_bias) {
  const float* bias = weights_.vector(prefix + schema::kBias);
  if (separate_bias != nullptr) *separate_bias = bias;
  return planned_matmul(prefix + schema::kWeight, max_rows, fuse_bias ? bias : nullptr);
}

// The products of one weight matrix; the file's pages of the stored matrix are released when
// they read a packed or converted copy (peak memory: the stored f32 weights would otherwise stay
// resident beside their packed copies). Embedding tables stay: embed() reads them every step.
std::unique_ptr<PlannedMatmul> CpuBackend::planned_matmul(const std::string& weight_name,
                                                          int64_t max_rows, const float* bias) {
  const WeightMatrix weights = weights_.matrix(weight_name);
  auto m = std::make_unique<PlannedMatmul>(engine_, plan_, max_rows, weights, bias);
  workspace_bytes_ = std::max(workspace_bytes_, m->workspace_bytes());
  const bool is_table = weight_name == param::source_embedding(config_) ||
                        weight_name == param::target_embedding(config_);
  const TensorView& stored = weights_.stored(weight_name);
  // Not read when the products read a converted copy (int8, widened) or a packed one.
  if (!is_table && (weights.data != stored.data || !m->reads_weights_in_place())) {
    weights_.release_stored(stored);
    released_.push_back(&stored);
  }
  return m;
}

void CpuBackend::prepare_weights() {
  const int64_t encoder_rows = plan_.encoder_group_rows;
  const int64_t cross_rows = plan_.max_sentences * plan_.max_source_len;
  const int64_t decoder_rows = plan_.max_rows;
  for (uint32_t i = 0; i < config_.encoder_layers; ++i) {
    const std::string p = param::encoder_layer(i);
    EncoderLayer layer;
    layer.qkv = linear(p + schema::kSelfAttentionQkv.name, encoder_rows, true, nullptr);
    layer.self_output = linear(p + schema::kSelfAttentionOutput.name, encoder_rows, false, &layer.self_output_bias);
    layer.self_norm = norm(p + schema::kSelfAttentionNorm.name);
    layer.ffn_inner = linear(p + schema::kFfnInner.name, encoder_rows, false, &layer.ffn_inner_bias);
    layer.ffn_outer = linear(p + schema::kFfnOuter.name, encoder_rows, false, &layer.ffn_outer_bias);
    layer.ffn_norm = norm(p + schema::kFfnNorm.name);
    encoder_.push_back(std::move(layer));
  }
  for (uint32_t i = 0; i < config_.decoder_layers; ++i) {
    const std::string p = param::decoder_layer(i);
    DecoderLayer layer;
    layer.qkv = linear(p + schema::kSelfAttentionQkv.name, decoder_rows, true, nullptr);
    layer.self_output = linear(p + schema::kSelfAttentionOutput.name, decoder_rows, false, &layer.self_output_bias);
    layer.self_norm = norm(p + schema::kSelfAttentionNorm.name);
    layer.cross_query = linear(p + schema::kCrossAttentionQuery.name, decoder_rows, true, nullptr);
    layer.cross_key_value = linear(p + schema::kCrossAttentionKeyValue.name, cross_rows, true, nullptr);
    layer.cross_output = linear(p + schema::kCrossAttentionOutput.name, decoder_rows, false, &layer.cross_output_bias);
    layer.cross_norm = norm(p + schema::kCrossAttentionNorm.name);
    layer.ffn_inner = linear(p + schema::kFfnInner.name, decoder_rows, false, &layer.ffn_inner_bias);
    layer.ffn_outer = linear(p + schema::kFfnOuter.name, decoder_rows, false, &layer.ffn_outer_bias);
    layer.ffn_norm = norm(p + schema::kFfnNorm.name);
    decoder_.push_back(std::move(layer));
  }
  if (pre_norm_) {
    encoder_final_norm_ = norm(schema::kEncoderFinalNorm.name);
    decoder_final_norm_ = norm(schema::kDecoderFinalNorm.name);
  }
  // The output projection first: when tied and stored as f16/bf16, it widens the target table,
  // which the embedding lookup then shares.
  const float* output_bias = config_.output_bias ? weights_.vector(param::kOutputBias) : nullptr;
  output_projection_ =
      planned_matmul(param::output_projection(config_), decoder_rows, output_bias);
  source_table_ = weights_.table(param::source_embedding(config_));
  target_table_ = weights_.table(param::target_embedding(config_));
  // Again, now that nothing more is read at load: reading the next tensors mapped back the
  // cached pages next to them (the kernel's fault-around), tails of matrices released before.
  for (const TensorView* t : released_) weights_.release_stored(*t);
}

void CpuBackend::plan_arena() {
  const int64_t cross_rows = plan_.padded_rows(plan_.max_sentences * plan_.max_source_len);
  const int64_t enc_rows = plan_.padded_rows(plan_.encoder_group_rows);
  const int64_t dec_rows = plan_.padded_rows(plan_.max_rows);
  const int64_t layers = config_.decoder_layers;
  const int64_t longest_key = std::max(plan_.max_source_len, plan_.max_target_len);

  // Persistent buffers.
  const size_t memory = arena_.reserve_array<float>(cross_rows * d_);
  cross_kv_layer_stride_ = cross_rows * 2 * d_;
  const size_t cross_kv = arena_.reserve_array<float>(layers * cross_kv_layer_stride_);
  cache_row_stride_ = plan_.max_target_len * d_;
  cache_layer_stride_ = plan_.max_rows * cache_row_stride_;
  size_t caches[4];
  for (size_t& c : caches) c = arena_.reserve_array<float>(std::max<int64_t>(layers, 1) * cache_layer_stride_);
  const size_t scratch = arena_.reserve_array<float>(threads_ * longest_key);
  const size_t workspace = arena_.reserve(workspace_bytes_);
  const size_t lengths = arena_.reserve_array<int32_t>(plan_.max_sentences);
  const size_t positions = arena_.reserve_array<int32_t>(std::max(enc_rows, dec_rows));

  // Encoder and decoder-step buffers share memory: a batch's encoder is done before its first step.
  const size_t phase_start = arena_.mark();
  const size_t enc_qkv = arena_.reserve_array<float>(enc_rows * 3 * d_);
  const size_t enc_context = arena_.reserve_array<float>(enc_rows * d_);
  const size_t enc_sublayer = arena_.reserve_array<float>(enc_rows * d_);
  const size_t enc_hidden = arena_.reserve_array<float>(enc_rows * d_ff_);
  const size_t enc_normed = arena_.reserve_array<float>(pre_norm_ ? enc_rows * d_ : 0);
  arena_.rewind(phase_start);
  const size_t dec_x = arena_.reserve_array<float>(dec_rows * d_);
  const size_t dec_normed = arena_.reserve_array<float>(pre_norm_ ? dec_rows * d_ : 0);
  const size_t dec_qkv = arena_.reserve_array<float>(dec_rows * 3 * d_);
  const size_t dec_query = arena_.reserve_array<float>(dec_rows * d_);
  const size_t dec_context = arena_.reserve_array<float>(dec_rows * d_);
  const size_t dec_sublayer = arena_.reserve_array<float>(dec_rows * d_);
  const size_t dec_hidden = arena_.reserve_array<float>(dec_rows * d_ff_);
  const size_t logits = arena_.reserve_array<float>(dec_rows * vocab_);
  arena_.allocate();

  memory_ = arena_.at<float>(memory);
  cross_kv_ = arena_.at<float>(cross_kv);
  self_k_[0] = arena_.at<float>(caches[0]);
  self_k_[1] = arena_.at<float>(caches[1]);
  self_v_[0] = arena_.at<float>(caches[2]);
  self_v_[1] = arena_.at<float>(caches[3]);
  attention_scratch_ = arena_.at<float>(scratch);
  workspace_ = arena_.at<void>(workspace);
  source_lengths_ = arena_.at<int32_t>(lengths);
  positions_ = arena_.at<int32_t>(positions);
  enc_qkv_ = arena_.at<float>(enc_qkv);
  enc_context_ = arena_.at<float>(enc_context);
  enc_sublayer_ = arena_.at<float>(enc_sublayer);
  enc_hidden_ = arena_.at<float>(enc_hidden);
  enc_normed_ = arena_.at<float>(enc_normed);
  dec_x_ = arena_.at<float>(dec_x);
  dec_normed_ = arena_.at<float>(dec_normed);
  dec_qkv_ = arena_.at<float>(dec_qkv);
  dec_query_ = arena_.at<float>(dec_query);
  dec_context_ = arena_.at<float>(dec_context);
  dec_sublayer_ = arena_.at<float>(dec_sublayer);
  dec_hidden_ = arena_.at<float>(dec_hidden);
  logits_ = arena_.at<float>(logits);
}

void CpuBackend::encode(const int32_t* source_ids, const int32_t* source_lengths, int64_t sentences,
                        int64_t source_len) {
  if (sentences < 1 || sentences > plan_.max_sentences || source_len < 1 ||
      source_len > plan_.max_source_len)
    throw Error("internal: encode() outside the plan");
  sentences_ = sentences;
  source_len_ = source_len;
  std::copy(source_lengths, source_lengths + sentences, source_lengths_);
  // Groups of whole sentences of at most encoder_group_rows rows.
  const int64_t group = std::max<int64_t>(1, plan_.encoder_group_rows / source_len);
  for (int64_t first = 0; first < sentences; first += group) {
    const int64_t count = std::min(group, sentences - first);
    encode_group(source_ids + first * source_len, source_lengths_ + first, count, source_len,
                 memory_ + first * source_len * d_);
  }
  const int64_t rows = sentences * source_len;
  for (size_t l = 0; l < decoder_.size(); ++l)
    decoder_[l].cross_key_value->run(rows, memory_, cross_kv_ + l * cross_kv_layer_stride_, workspace_);
}

void CpuBackend::encode_group(const int32_t* source_ids, const int32_t* source_lengths,
                              int64_t sentences, int64_t source_len, float* x) {
  const int64_t rows = sentences * source_len;
  for (int64_t i = 0; i < rows; ++i) positions_[i] = static_cast<int32_t>(i % source_len);
  cpu::embed(source_table_, source_ids, positions_, rows, std::sqrt(static_cast<float>(d_)), x, threads_);
  // The fused QKV output [sentences, source_len, 3d] seen as [sentences, heads, source_len, head_dim].
  const HeadStrides qkv_strides{source_len * 3 * d_, head_dim_, 3 * d_};
  const HeadStrides context_strides{source_len * d_, head_dim_, d_};
  const cpu::AttentionShape shape{sentences, heads_, source_len, source_len, head_dim_};
  for (EncoderLayer& layer : encoder_) {
    const float* in = sublayer_input(x, layer.self_norm, rows, enc_normed_);
    layer.qkv->run(rows, in, enc_qkv_, workspace_);
    cpu::attention(enc_qkv_, qkv_strides, enc_qkv_ + d_, qkv_strides, enc_qkv_ + 2 * d_, qkv_strides,
                   enc_context_, context_strides, shape, source_lengths, -1, nullptr,
                   attention_scratch_, threads_);
    layer.self_output->run(rows, enc_context_, enc_sublayer_, workspace_);
    residual(x, enc_sublayer_, layer.self_output_bias, layer.self_norm, rows);

    in = sublayer_input(x, layer.ffn_norm, rows, enc_normed_);
    layer.ffn_inner->run(rows, in, enc_hidden_, workspace_);
    cpu::bias_relu(enc_hidden_, layer.ffn_inner_bias, rows, d_ff_, threads_);
    layer.ffn_outer->run(rows, enc_hidden_, enc_sublayer_, workspace_);
    residual(x, enc_sublayer_, layer.ffn_outer_bias, layer.ffn_norm, rows);
  }
  if (pre_norm_) layer_norm(x, nullptr, nullptr, encoder_final_norm_, rows, x);
}

void CpuBackend::decode_step(const int32_t* tokens, int64_t beam, int64_t step) {
  if (beam < 1 || beam > plan_.max_beam || step < 0 || step >= plan_.max_target_len || sentences_ < 1)
    throw Error("internal: decode_step() outside the plan");
  beam_ = beam;
  rows_ = sentences_ * beam;
  const int64_t rows = rows_;
  std::fill(positions_, positions_ + rows, static_cast<int32_t>(step));
  float* x = dec_x_;
  cpu::embed(target_table_, tokens, positions_, rows, std::sqrt(static_cast<float>(d_)), x, threads_);

  // Self-attention over the cache [rows, max_target_len, d] seen as [rows, heads, positions, head_dim].
  const HeadStrides step_qkv_strides{3 * d_, head_dim_, 3 * d_};
  const HeadStrides cache_strides{cache_row_stride_, head_dim_, d_};
  const HeadStrides row_strides{d_, head_dim_, d_};
  const cpu::AttentionShape self_shape{rows, heads_, 1, step + 1, head_dim_};
  // Cross-attention: a sentence's beam hypotheses are its queries, [sentences, heads, beam, head_dim],
  // over the sentence's keys [sentences, source_len, 2d]; no copy of K/V per hypothesis.
  const HeadStrides beam_query_strides{beam * d_, head_dim_, d_};
  const HeadStrides cross_strides{source_len_ * 2 * d_, head_dim_, 2 * d_};
  const cpu::AttentionShape cross_shape{sentences_, heads_, beam, source_len_, head_dim_};

  for (size_t l = 0; l < decoder_.size(); ++l) {
    DecoderLayer& layer = decoder_[l];
    float* k_cache = self_k_[current_cache_] + l * cache_layer_stride_;
    float* v_cache = self_v_[current_cache_] + l * cache_layer_stride_;

    const float* in = sublayer_input(x, layer.self_norm, rows, dec_normed_);
    layer.qkv->run(rows, in, dec_qkv_, workspace_);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(k_cache + r * cache_row_stride_ + step * d_, dec_qkv_ + r * 3 * d_ + d_, sizeof(float) * d_);
      std::memcpy(v_cache + r * cache_row_stride_ + step * d_, dec_qkv_ + r * 3 * d_ + 2 * d_, sizeof(float) * d_);
    }
    cpu::attention(dec_qkv_, step_qkv_strides, k_cache, cache_strides, v_cache, cache_strides,
                   dec_context_, row_strides, self_shape, nullptr, -1, nullptr, attention_scratch_,
                   threads_);
    layer.self_output->run(rows, dec_context_, dec_sublayer_, workspace_);
    residual(x, dec_sublayer_, layer.self_output_bias, layer.self_norm, rows);

    in = sublayer_input(x, layer.cross_norm, rows, dec_normed_);
    layer.cross_query->run(rows, in, dec_query_, workspace_);
    const float* cross_kv = cross_kv_ + l * cross_kv_layer_stride_;
    cpu::attention(dec_query_, beam_query_strides, cross_kv, cross_strides, cross_kv + d_, cross_strides,
                   dec_context_, beam_query_strides, cross_shape, source_lengths_, -1, nullptr,
                   attention_scratch_, threads_);
    layer.cross_output->run(rows, dec_context_, dec_sublayer_, workspace_);
    residual(x, dec_sublayer_, layer.cross_output_bias, layer.cross_norm, rows);

    in = sublayer_input(x, layer.ffn_norm, rows, dec_normed_);
    layer.ffn_inner->run(rows, in, dec_hidden_, workspace_);
    cpu::bias_relu(dec_hidden_, layer.ffn_inner_bias, rows, d_ff_, threads_);
    layer.ffn_outer->run(rows, dec_hidden_, dec_sublayer_, workspace_);
    residual(x, dec_sublayer_, layer.ffn_outer_bias, layer.ffn_norm, rows);
  }
  if (pre_norm_) layer_norm(x, nullptr, nullptr, decoder_final_norm_, rows, x);
  output_projection_->run(rows, x, logits_, workspace_);
}

void CpuBackend::top_k(const float* row_offsets, int64_t k, float* values, int32_t* ids) {
  cpu::log_softmax_top_k(logits_, row_offsets, rows_, vocab_, k, values, ids, threads_);
}

void CpuBackend::reorder_cache(const int32_t* parents, int64_t step) {
  const int next = 1 - current_cache_;
  const int64_t prefix = (step + 1) * d_;
  for (size_t l = 0; l < decoder_.size(); ++l) {
    const int64_t offset = static_cast<int64_t>(l) * cache_layer_stride_;
    cpu::gather_rows(self_k_[current_cache_] + offset, cache_row_stride_, parents, rows_, prefix,
                     self_k_[next] + offset, cache_row_stride_, threads_);
    cpu::gather_rows(self_v_[current_cache_] + offset, cache_row_stride_, parents, rows_, prefix,
                     self_v_[next] + offset, cache_row_stride_, threads_);
  }
  current_cache_ = next;
}

void CpuBackend::keep_sentences(const int32_t* kept, int64_t count) {
  if (count < 1 || count > sentences_) throw Error("internal: keep_sentences() outside the batch");
  // kept is ascending, so every block moves towards the front: in place, in order.
  const int64_t block = source_len_ * 2 * d_;  // one sentence's cross K/V in one layer
  for (size_t l = 0; l < decoder_.size(); ++l) {
    float* layer = cross_kv_ + l * cross_kv_layer_stride_;
    for (int64_t i = 0; i < count; ++i)
      if (kept[i] != i) std::memmove(layer + i * block, layer + kept[i] * block, sizeof(float) * block);
  }
  for (int64_t i = 0; i < count; ++i) source_lengths_[i] = source_lengths_[kept[i]];
  sentences_ = count;
  rows_ = sentences_ * beam_;
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Model& model, const MemoryPlan& plan, int threads,
                                          std::optional<DType> matrix_dtype) {
  if (matrix_dtype && *matrix_dtype != DType::f32 && *matrix_dtype != DType::int8)
    throw Error(std::string("weights cannot be converted to ") + dtype_name(*matrix_dtype) +
                " on the CPU (f32 or int8)");
  return std::make_unique<CpuBackend>(model, plan, threads, matrix_dtype);
}

}  // namespace xf::runtime
