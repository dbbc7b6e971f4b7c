// The CPU backend: the Transformer of transformer_backend.h over CpuOps, i.e. oneDNN matrix
// products (static shapes made at plan time, for the row counts RowBuckets plans) and xf's CPU
// kernels over one mmap'ed arena.
//
// Weights: int8 matrices and the embedding tables are used in place from the mapped file; f32
// matrices through oneDNN's packed copies, after which the file's pages of them are released
// (ModelFile::release_pages: resident once, not twice); f16 and bf16 tensors are widened to f32
// once, here, at load (the CPU kernels compute in f32). 1-D parameters are copied, so that
// decoding reads no mapped page but the embedding tables'. A table tied to an output layer that
// reads xf's own f32 copy (the AVX2 panels) is read from that copy and released too.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend.h"
#include "memory_plan.h"
#include "transformer_backend.h"
#include "weight_store.h"
#include "xf/error.h"
#include "xf/format/model_file.h"
#include "xf/format/parameters.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/gather.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels/recurrent.h"
#include "xf/kernels/softmax.h"
#include "xf/model.h"

namespace xf::runtime {
namespace {

using cpu::HeadStrides;
using cpu::WeightMatrix;

// The row counts oneDNN products are planned for: a product over `rows` rows runs as chunks of
// `chunk` rows, and the remainder is padded up to the next planned count (at most 15 extra rows,
// computed on whatever the buffer holds there and never read): all counts 1..16, then multiples
// of 16 up to the chunk, but no more than any product of the plan needs.
class RowBuckets {
 public:
  explicit RowBuckets(const MemoryPlan& plan) {
    constexpr int64_t kChunk = 128;     // rows per product call on long inputs
    constexpr int64_t kSmallCounts = 16;  // every count 1..16 is planned exactly
    constexpr int64_t kStep = 16;       // above that, multiples of 16
    const int64_t largest = std::max(plan.max_rows, plan.encoder_group_rows);
    const int64_t chunk = std::min(kChunk, largest);
    for (int64_t m = 1; m <= std::min(kSmallCounts, chunk); ++m) counts_.push_back(m);
    for (int64_t m = 2 * kStep; m < chunk + kStep; m += kStep) counts_.push_back(std::min(m, chunk));
    counts_.erase(std::unique(counts_.begin(), counts_.end()), counts_.end());
  }
  // Ascending; the last is the chunk.
  const std::vector<int64_t>& counts() const { return counts_; }
  int64_t chunk() const { return counts_.back(); }
  // The planned row count that a remainder of `rows` (1..chunk) runs as.
  int64_t padded_remainder(int64_t rows) const {
    auto it = std::lower_bound(counts_.begin(), counts_.end(), rows);
    if (it == counts_.end()) throw Error("internal: no planned matmul for " + std::to_string(rows) + " rows");
    return *it;
  }
  // The index of a planned count.
  size_t index(int64_t count) const {
    return static_cast<size_t>(std::lower_bound(counts_.begin(), counts_.end(), count) - counts_.begin());
  }
  // Rows a buffer needs to hold a product over `rows` rows, padding included.
  int64_t padded_rows(int64_t rows) const {
    const int64_t full = rows / chunk() * chunk();
    const int64_t rest = rows - full;
    return full + (rest > 0 ? padded_remainder(rest) : 0);
  }

 private:
  std::vector<int64_t> counts_;
};

// The intgemm kernel whose sums a model's Marian arithmetic asks for; none for xf's own.
std::optional<cpu::IntgemmKernel> intgemm_kernel(Int8Arithmetic arithmetic) {
  switch (arithmetic) {
    case Int8Arithmetic::xf: return std::nullopt;
    case Int8Arithmetic::marian_intgemm_avx2: return cpu::IntgemmKernel::avx2;
    case Int8Arithmetic::marian_intgemm_avx512bw: return cpu::IntgemmKernel::avx512bw;
    case Int8Arithmetic::marian_intgemm_avx512vnni: return cpu::IntgemmKernel::avx512vnni;
  }
  return std::nullopt;
}

// One weight's products, one static oneDNN primitive per row count the buckets can give it; or,
// for int8 weights under Marian's arithmetic (Int8Arithmetic), one cpu::marian_int8_product
// over all the rows of a call, whose one activation scale spans them.
class PlannedMatmul {
 public:
  // intgemm: the kernel whose sums Marian's arithmetic asks for (int8 weights in rows), or none.
  PlannedMatmul(cpu::CpuEngine& engine, const RowBuckets& buckets, int64_t max_rows,
                const WeightMatrix& weights, const float* bias, std::optional<cpu::IntgemmKernel> intgemm)
      : buckets_(&buckets), bias_(bias), in_(weights.cols), out_(weights.rows), threads_(engine.threads()),
        intgemm_kernel_(intgemm) {
    if (intgemm_kernel_) {
      marian_weights_ = weights;
      workspace_bytes_ = cpu::marian_int8_workspace_bytes(buckets.padded_rows(max_rows), in_);
      return;
    }
    const int64_t largest = buckets.padded_remainder(std::min(max_rows, buckets.chunk()));
    // The largest count first: a copy it makes (int8 panels at AVX-512) then serves the smaller
    // counts too (StaticMatmul), instead of their reading the stored rows beside it.
    std::vector<int64_t> counts;
    for (int64_t count : buckets.counts())
      if (count <= largest) counts.push_back(count);
    for (auto it = counts.rbegin(); it != counts.rend(); ++it) {
      by_count_.emplace_back(engine, *it, weights, bias != nullptr);
      workspace_bytes_ = std::max(workspace_bytes_, by_count_.back().workspace_bytes());
    }
    std::reverse(by_count_.begin(), by_count_.end());  // ascending, as buckets.index() counts
  }

  // The products over a ReLU's output (the FFN's second product), one kernel for every row
  // count: cpu::SparseInputMatmul, where it takes the weights (SparseInputMatmul::available()).
  PlannedMatmul(cpu::CpuEngine& engine, const WeightMatrix& weights)
      : bias_(nullptr), in_(weights.cols), out_(weights.rows), threads_(engine.threads()),
        sparse_(std::make_unique<cpu::SparseInputMatmul>(weights, engine.threads())),
        workspace_bytes_(sparse_->workspace_bytes()) {}

  size_t workspace_bytes() const { return workspace_bytes_; }
  // The product whose f32 copy of the weights a tied table can read (holds_f32_weight_rows), or
  // null.
  const cpu::StaticMatmul* f32_rows_copy() const {
    return !by_count_.empty() && by_count_.front().holds_f32_weight_rows() ? &by_count_.front() : nullptr;
  }
  // False when every product reads a packed copy of the weights it was given.
  bool reads_weights_in_place() const {
    if (intgemm_kernel_) return true;
    if (sparse_) return false;  // its transposed copy
    for (const cpu::StaticMatmul& m : by_count_)
      if (m.reads_weights_in_place()) return true;
    return false;
  }

  // y[rows, out] = x[rows, in] W^T (+ bias). x and y hold buckets.padded_rows(rows) rows.
  void run(int64_t rows, const float* x, float* y, void* workspace) const {
    if (sparse_) {
      sparse_->run(x, y, rows, workspace);
      return;
    }
    if (intgemm_kernel_) {
      cpu::marian_int8_product(marian_weights_, x, rows, bias_, y, workspace, threads_, *intgemm_kernel_);
      return;
    }
    const int64_t chunk = buckets_->chunk();
    while (rows > 0) {
      const int64_t count = rows >= chunk ? chunk : buckets_->padded_remainder(rows);
      const size_t index = buckets_->index(count);
      if (index >= by_count_.size()) throw Error("internal: a product over more rows than planned");
      by_count_[index].run(x, bias_, y, workspace, std::min(rows, count));  // not the padding
      x += count * in_;
      y += count * out_;
      rows -= std::min(rows, count);
    }
  }

 private:
  const RowBuckets* buckets_ = nullptr;
  const float* bias_;
  int64_t in_, out_;
  int threads_;
  std::optional<cpu::IntgemmKernel> intgemm_kernel_;  // set: Marian's arithmetic (by_count_ empty)
  WeightMatrix marian_weights_{};
  std::vector<cpu::StaticMatmul> by_count_;
  std::unique_ptr<cpu::SparseInputMatmul> sparse_;  // set: a ReLU's output in (by_count_ empty)
  size_t workspace_bytes_ = 0;
};

// The kernels run on xf's worker pool (xf/kernels_cpu/worker_pool.h), oneDNN inside it on one
// OpenMP thread per slice of a product: OpenMP itself gets one thread, so that no primitive is
// made for a team (oneDNN sizes a primitive's thread partition from OpenMP's count when it is
// made) and libgomp never starts spinning workers of its own.
int use_openmp_threads(int threads) {
  omp_set_num_threads(1);
  return threads;
}

// The CPU's part of the Transformer (transformer_backend.h lists what an Ops provides).
class CpuOps {
 public:
  using Value = float;
  struct Linear {
    std::unique_ptr<PlannedMatmul> product;  // adds the bias when bound with bias_in_product
    const float* bias = nullptr;
  };
  // The output layer: its products, and its weights as stored or converted (a shortlist's rows
  // are gathered from them).
  struct Logits : Linear {
    WeightMatrix weights{};
  };
  // An embedding table: its rows as stored (or converted), or, for a table tied to an output
  // layer that reads xf's own f32 copy of it, that copy (the stored rows are then released).
  struct Table {
    WeightMatrix stored{};
    const cpu::StaticMatmul* copy = nullptr;
  };
  struct Norm {
    const float* gamma = nullptr;
    const float* beta = nullptr;
  };
  using HeadStrides = cpu::HeadStrides;
  using AttentionShape = cpu::AttentionShape;
  struct Input {};  // host memory is the device's: an input is used where it lies
  static constexpr size_t kAlignment = 64;
  static constexpr bool kLogitsOnHost = true;
  static constexpr bool kReorderInPlace = true;
  static constexpr int64_t kMaxTopK = std::numeric_limits<int64_t>::max();  // any k

  CpuOps(const Model& model, const MemoryPlan& plan, int threads, std::optional<DType> matrix_dtype)
      : config_(model.config()), buckets_(plan), threads_(use_openmp_threads(threads)), engine_(threads),
        weights_(model.file()), matrix_dtype_(matrix_dtype), longest_key_(std::max(plan.max_source_len, plan.max_target_len)),
        max_beam_(plan.max_beam), max_target_len_(plan.max_target_len), arithmetic_(model.int8_arithmetic()) {}

  // ---- binding
  Linear linear(const std::string& prefix, int64_t max_rows, bool bias_in_product) {
    Linear l;
    l.bias = vector(prefix + schema::kBias);
    // The FFN's second product reads the ReLU's output, mostly zeros.
    const std::string_view ffn_outer = schema::kFfnOuter.name;
    const bool relu_input = config_.activation == Activation::relu && prefix.size() >= ffn_outer.size() &&
                            std::string_view(prefix).substr(prefix.size() - ffn_outer.size()) == ffn_outer;
    l.product = planned_matmul(prefix + schema::kWeight, max_rows, bias_in_product ? l.bias : nullptr, relu_input);
    return l;
  }
  Norm norm(const std::string& prefix) {
    return {vector(prefix + schema::kGamma), vector(prefix + schema::kBeta)};
  }
  Logits output_projection(int64_t max_rows) {
    Logits l;
    l.bias = config_.output_bias ? vector(param::kOutputBias) : nullptr;
    l.weights = matrix(param::output_projection(config_));
    // Under Marian's arithmetic a shortlist's gathered int8 rows would be multiplied by xf's.
    if (arithmetic_ != Int8Arithmetic::xf && l.weights.dtype == DType::int8)
      throw Error("int8.arithmetic marian-intgemm-* needs an f32 output layer (Marian's students keep "
                  "their tied table f32): this model's is int8");
    l.product = planned_matmul(param::output_projection(config_), max_rows, l.bias);
    tied_copy_ = l.product->f32_rows_copy();
    workspace_bytes_ = std::max(workspace_bytes_, cpu::gathered_product_workspace_bytes(l.weights, buckets_.chunk()));
    return l;
  }
  // embed() reads every dtype: a table is converted like the matrices when a conversion was
  // asked for, else read as stored, or as its widened copy when one exists (so that a tied
  // output projection and the embedding share one f32 table).
  Table table(const std::string& name) {
    if (tied_copy_ != nullptr && name == param::output_projection(config_)) return {{}, tied_copy_};
    if (matrix_dtype_ || weights_.has_copy(name, DType::f32)) return {matrix(name)};
    return {as_matrix(weights_.get(name, weights_.stored(name).dtype))};
  }
  // Again, now that nothing more is read at load: reading the next tensors mapped back the
  // cached pages next to them (the kernel's fault-around), tails of matrices released before.
  void weights_bound() {
    for (const TensorView* t : released_) weights_.release_stored(*t);
  }
  std::vector<const TensorView*> released_weights() const { return released_; }

  // ---- memory
  int64_t padded_rows(int64_t rows) const { return buckets_.padded_rows(rows); }
  void reserve(ArenaLayout& layout) {
    scratch_offset_ = layout.reserve_array<float>(threads_ * longest_key_);
    sinusoids_offset_ = layout.reserve_array<float>(tabled_positions() * config_.d_model);
    reorder_scratch_offset_ = layout.reserve_array<float>(threads_ * max_beam_ * max_target_len_ * config_.d_model);
    workspace_offset_ = layout.reserve(workspace_bytes_);
  }
  Input input(ArenaLayout&, size_t) { return {}; }
  template <typename U>
  const U* upload(Input, const U* values, int64_t) { return values; }
  void* allocate(const ArenaLayout& layout) {
    arena_ = std::make_unique<HostArena>(layout.bytes());
    char* base = static_cast<char*>(arena_->base());
    attention_scratch_ = reinterpret_cast<float*>(base + scratch_offset_);
    float* sinusoids = reinterpret_cast<float*>(base + sinusoids_offset_);
    cpu::write_sinusoids(config_.position_encoding, tabled_positions(), config_.d_model, sinusoids);
    sinusoids_ = {sinusoids, tabled_positions()};
    workspace_ = base + workspace_offset_;
    reorder_scratch_ = reinterpret_cast<float*>(base + reorder_scratch_offset_);
    return base;
  }
  size_t arena_bytes() const { return arena_->bytes(); }
  // The positions whose sinusoids are written once (sinusoids_): sentences' usual lengths, not
  // every position a plan allows (1,024 x d floats would add 1 MB to a small model's memory).
  int64_t tabled_positions() const { return std::min<int64_t>(longest_key_, 256); }
  std::optional<DeviceUsage> device_usage() const { return std::nullopt; }

  // ---- kernels
  void project(const Linear& l, const float* x, float* y, int64_t rows) { l.product->run(rows, x, y, workspace_); }
  void logits(const Logits& l, const float* x, float* y, int64_t rows) { project(l, x, y, rows); }
  // A shortlist's rows of the output layer (once a batch: int8 as the product reads them, or
  // f32), and the step's product over them, in chunks of the planned rows (the workspace's); with
  // row_lists, each row over its list's column runs only (cpu::GatheredColumnRuns).
  size_t shortlist_rows_bytes(const Logits& l, int64_t count) const { return cpu::gathered_rows_bytes(l.weights, count); }
  void gather_output_rows(const Logits& l, const int32_t* ids, int64_t count, void* rows, float* bias) {
    cpu::gather_weight_rows(l.weights, ids, count, rows, threads_);
    for (int64_t i = 0; i < count; ++i) bias[i] = l.bias != nullptr ? l.bias[ids[i]] : 0.0f;
  }
  void rows_product(const Logits& l, const float* x, const void* gathered, const float* bias, int64_t rows,
                    int64_t count, float* y, const int32_t* row_lists, const int32_t* run_offsets, const int32_t* runs) {
    for (int64_t done = 0; done < rows; done += buckets_.chunk()) {
      const int64_t chunk = std::min(buckets_.chunk(), rows - done);
      const cpu::GatheredColumnRuns chunk_runs{row_lists != nullptr ? row_lists + done : nullptr, run_offsets, runs};
      cpu::gathered_rows_product(l.weights, x + done * config_.d_model, gathered, bias, chunk, count, y + done * count,
                                 workspace_, threads_, row_lists != nullptr ? &chunk_runs : nullptr);
    }
  }
  void embed(const Table& table, const int32_t* ids, const int32_t* positions, int64_t rows, float scale,
             float* out) {
    if (table.copy != nullptr) {
      cpu::embed(*table.copy, ids, positions, rows, scale, out, threads_, config_.position_encoding, sinusoids_);
    } else {
      cpu::embed(table.stored, ids, positions, rows, scale, out, threads_, config_.position_encoding, sinusoids_);
    }
  }
  void layer_norm(const float* x, const float* bias, const float* residual, const Norm& n, float epsilon,
                  int64_t rows, int64_t dim, float* out) {
    cpu::add_bias_residual_layer_norm(x, bias, residual, n.gamma, n.beta, epsilon, rows, dim, out, nullptr,
                                      nullptr, threads_);
  }
  void add_bias_residual(float* x, const float* bias, const float* residual, int64_t rows, int64_t dim) {
    cpu::add_bias_residual(x, bias, residual, rows, dim, threads_);
  }
  void bias_activation(float* x, const float* bias, int64_t rows, int64_t dim) {
    cpu::bias_activation(x, bias, rows, dim, config_.activation, threads_);
  }
  void attention(const float* q, HeadStrides qs, const float* k, HeadStrides ks, const float* v,
                 HeadStrides vs, float* out, HeadStrides os, const AttentionShape& shape,
                 const int32_t* key_lengths) {
    cpu::attention(q, qs, k, ks, v, vs, out, os, shape, key_lengths, -1, nullptr, attention_scratch_, threads_);
  }
  // Q|K|V of the step into qkv, its K and V copied into the caches at `step`, then the query
  // attends to positions 0..step.
  void self_attention_step(const Linear& qkv_linear, const float* in, int64_t rows, int64_t step,
                           float* k_cache, float* v_cache, HeadStrides cache_strides, float* qkv, float*,
                           float* context) {
    const int64_t d = config_.d_model;
    project(qkv_linear, in, qkv, rows);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(k_cache + r * cache_strides.batch + step * d, qkv + r * 3 * d + d, sizeof(float) * d);
      std::memcpy(v_cache + r * cache_strides.batch + step * d, qkv + r * 3 * d + 2 * d, sizeof(float) * d);
    }
    const HeadStrides step_qkv_strides{3 * d, cache_strides.head, 3 * d};
    const HeadStrides row_strides{d, cache_strides.head, d};
    const AttentionShape shape{rows, config_.num_heads, 1, step + 1, config_.head_dim()};
    cpu::attention(qkv, step_qkv_strides, k_cache, cache_strides, v_cache, cache_strides, context, row_strides,
                   shape, nullptr, -1, nullptr, attention_scratch_, threads_);
  }
  void ssru_step(const float* in, float* cell, const int32_t* state_rows, bool first, int64_t rows, float* out) {
    cpu::ssru_step(in, cell, state_rows, first, rows, config_.d_model, out, threads_);
  }
  void top_k(const float* logits, const float* row_offsets, int64_t rows, int64_t vocab, int64_t k, float* values,
             int32_t* ids) {
    cpu::log_softmax_top_k(logits, row_offsets, rows, vocab, k, values, ids, threads_);
  }
  // top_k of each row over its list of columns (cpu::log_softmax_top_k_columns); scratch:
  // [threads(), list_stride].
  void top_k_columns(const float* logits, int64_t vocab, const int32_t* row_lists, const int32_t* columns,
                     const int32_t* list_sizes, int64_t list_stride, const float* row_offsets, int64_t rows, int64_t k,
                     float* values, int32_t* ids, float* scratch) {
    cpu::log_softmax_top_k_columns(logits, vocab, row_lists, columns, list_sizes, list_stride, row_offsets, rows, k,
                                   values, ids, scratch, threads_);
  }
  int threads() const { return threads_; }
  void reorder_in_place(float* rows, int64_t slabs, int64_t slab_stride, int64_t stride, const int32_t* parents,
                        int64_t count, int64_t group, int64_t len) {
    cpu::reorder_rows_in_place(rows, slabs, slab_stride, stride, parents, count, group, len, reorder_scratch_,
                               threads_);
  }
  void gather_rows(const float* src, int64_t src_stride, const int32_t* indices, int64_t count, int64_t len,
                   float* dst, int64_t dst_stride) {
    cpu::gather_rows(src, src_stride, indices, count, len, dst, dst_stride, threads_);
  }
  // count blocks of `block` elements, `pitch` apart, from src to dst (which may overlap).
  void copy_blocks(const float* src, float* dst, int64_t block, int64_t count, int64_t pitch) {
    for (int64_t i = 0; i < count; ++i) std::memmove(dst + i * pitch, src + i * pitch, sizeof(float) * block);
  }
  void download(const float* values, int64_t count, float* out) const {
    std::memcpy(out, values, sizeof(float) * count);
  }

 private:
  // A 1-D parameter (bias, LayerNorm gain) as f32 values, always a copy (see WeightStore::get).
  const float* vector(const std::string& name) {
    return static_cast<const float*>(weights_.get(name, DType::f32, /*copy=*/true).data);
  }
  // What a matrix is computed in: as asked at load, else int8 as stored, else f32 (f16 and bf16
  // widened).
  DType computed_dtype(const std::string& name) const {
    return matrix_dtype_.value_or(weights_.stored(name).dtype == DType::int8 ? DType::int8 : DType::f32);
  }
  // A matrix in a dtype the CPU products take (computed_dtype()).
  // in_place_layout: the file's panels where the products read them in place (the layers' own
  // matrices; a table and the output layer, which other kernels read too, always in rows).
  WeightMatrix matrix(const std::string& name, bool in_place_layout = false) {
    const DType dtype = computed_dtype(name);
    if (!in_place_layout) return as_matrix(weights_.get(name, dtype));
    return as_matrix(weights_.get_in_layout(name, dtype, [&](WeightLayout layout) {
      return cpu::reads_layout_in_place(dtype, layout);
    }));
  }
  static WeightMatrix as_matrix(const WeightView& w) { return {w.dtype, w.data, w.row_scales, w.rows, w.cols, w.layout}; }

  // The products of one weight matrix; the file's pages of the stored matrix are released when
  // they read a packed or converted copy (peak memory: the stored f32 weights would otherwise
  // stay resident beside their packed copies). Embedding tables stay, embed() reading them every
  // step, unless a tied one reads the output layer's own f32 copy (table()).
  // relu_input: x is a ReLU's output; f32 weights stored in rows then go to cpu::SparseInputMatmul
  // where it takes them.
  std::unique_ptr<PlannedMatmul> planned_matmul(const std::string& weight_name, int64_t max_rows,
                                                const float* bias, bool relu_input = false) {
    const bool is_output = weight_name == param::output_projection(config_);
    const DType dtype = computed_dtype(weight_name);
    // Marian's arithmetic, for int8 matrices, reads rows (a panels file's are unpacked into a copy).
    const std::optional<cpu::IntgemmKernel> intgemm =
        dtype == DType::int8 ? intgemm_kernel(arithmetic_) : std::nullopt;
    const bool sparse = relu_input && bias == nullptr && dtype == DType::f32 &&
                        weights_.stored(weight_name).layout == WeightLayout::rows;
    const WeightMatrix weights = matrix(weight_name, /*in_place_layout=*/!is_output && !intgemm && !sparse);
    auto m = sparse && cpu::SparseInputMatmul::available(weights)
                 ? std::make_unique<PlannedMatmul>(engine_, weights)
                 : std::make_unique<PlannedMatmul>(engine_, buckets_, max_rows, weights, bias, intgemm);
    workspace_bytes_ = std::max(workspace_bytes_, m->workspace_bytes());
    // A table is read by embed() too, unless it reads the products' own f32 copy (table()).
    const bool is_table = weight_name == param::source_embedding(config_) ||
                          weight_name == param::target_embedding(config_);
    const bool table_reads_copy = m->f32_rows_copy() != nullptr;
    const TensorView& stored = weights_.stored(weight_name);
    // Not read when the products read a converted copy (int8, widened) or a packed one.
    if ((!is_table || table_reads_copy) && (weights.data != stored.data || !m->reads_weights_in_place())) {
      weights_.release_stored(stored);
      released_.push_back(&stored);
    }
    return m;
  }

  ModelConfig config_;
  RowBuckets buckets_;
  int threads_;
  cpu::CpuEngine engine_;
  WeightStore weights_;
  std::optional<DType> matrix_dtype_;  // what every matrix is converted to at load; unset: as stored
  // The output layer's own f32 copy of its weights, where it has one: a table tied to it reads it.
  const cpu::StaticMatmul* tied_copy_ = nullptr;
  // Stored matrices whose mapped pages were released. Views, not names: looking a name up reads
  // the file's header, whose pages would be mapped back, neighbours with them.
  std::vector<const TensorView*> released_;
  size_t workspace_bytes_ = 0;
  int64_t longest_key_;  // the attention scratch's row
  int64_t max_beam_, max_target_len_;
  Int8Arithmetic arithmetic_;  // the model's: how int8 products are computed
  size_t scratch_offset_ = 0, workspace_offset_ = 0, reorder_scratch_offset_ = 0, sinusoids_offset_ = 0;
  std::unique_ptr<HostArena> arena_;
  float* attention_scratch_ = nullptr;  // [threads, longest key length]
  cpu::Sinusoids sinusoids_;            // [tabled_positions(), d]
  void* workspace_ = nullptr;           // the matrix products' scratchpad
  float* reorder_scratch_ = nullptr;    // [threads, max_beam, max_target_len * d]
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Model& model, const MemoryPlan& plan, int threads,
                                          std::optional<DType> matrix_dtype) {
  if (matrix_dtype && *matrix_dtype != DType::f32 && *matrix_dtype != DType::int8)
    throw Error(std::string("weights cannot be converted to ") + dtype_name(*matrix_dtype) +
                " on the CPU (f32 or int8)");
  return std::make_unique<TransformerBackend<CpuOps>>(model, plan, threads, matrix_dtype);
}

}  // namespace xf::runtime
