// The CUDA backend: cuBLAS matrix products and xf's CUDA kernels (kernels_cuda/) over one device
// arena, on one stream. Host C++ only (g++): every GPU function lives in xf_kernels_cuda.
//
// Memory: everything is taken when the backend is built, from the MemoryPlan: one device
// allocation for the weights, one DeviceArena for the working memory (activations, K/V caches,
// the cuBLAS workspace, the cached attention's split-key workspace, device copies of the
// inputs) and one pinned host block for what crosses the bus (source ids, lengths, tokens,
// positions, parents, row offsets, the top-k output). Translating makes no cudaMalloc, cudaFree
// or cudaMallocHost call (tests/cuda/runtime_allocation_test.cc counts them).
//
// Compute type: TranslatorOptions::weight_dtype, f32 or f16 (f16 storage, f32 accumulation in
// every product and reduction); unset: f16 when every matrix of the model file is f16 or bf16,
// f32 otherwise (f32 and int8 files: int8 weights are dequantized to f32 at upload). The logits are f32 either way (the output projection writes f32),
// so the search sees the same kind of numbers on every device.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "backend.h"
#include "memory_plan.h"
#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/format/model_file.h"
#include "xf/format/parameters.h"
#include "xf/kernels_cuda/check.h"
#include "xf/kernels_cuda/kernels.h"
#include "xf/kernels_cuda/matmul.h"
#include "xf/kernels_cuda/memory.h"
#include "xf/model.h"

namespace xf::runtime {
namespace {

using cuda::half;
using cuda::HeadStrides;

// ---- host-side conversions --------------------------------------------------------------------

template <typename T>
T from_f32(float value);
template <>
float from_f32<float>(float value) {
  return value;
}
template <>
half from_f32<half>(float value) {
  __half_raw raw;
  raw.x = float_to_half(value);
  return half(raw);
}

float to_f32(float value) { return value; }
float to_f32(half value) { return half_to_float(static_cast<__half_raw>(value).x); }

// ---- owners of CUDA objects -------------------------------------------------------------------

struct Stream {
  cudaStream_t handle = nullptr;
  Stream() { XF_CUDA_CHECK(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking)); }
  ~Stream() {
    if (handle != nullptr) (void)cudaStreamDestroy(handle);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

struct CublasHandle {
  cublasHandle_t handle = nullptr;
  CublasHandle() { XF_CUBLAS_CHECK(cublasCreate(&handle)); }
  ~CublasHandle() {
    if (handle != nullptr) (void)cublasDestroy(handle);
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
};

struct Event {
  cudaEvent_t handle = nullptr;
  Event() { XF_CUDA_CHECK(cudaEventCreateWithFlags(&handle, cudaEventDisableTiming)); }
  ~Event() {
    if (handle != nullptr) (void)cudaEventDestroy(handle);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

struct PinnedBlock {
  void* data = nullptr;
  explicit PinnedBlock(size_t bytes) : data(cuda::pinned_host_malloc(bytes)) {}
  ~PinnedBlock() { cuda::pinned_host_free(data); }
  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;
};

// Offsets of sub-buffers in one block, reserved in order. rewind(mark()) lets buffers whose
// lifetimes do not overlap (the encoder's and a decoder step's) share memory; the block's size
// is the high-water mark.
class BlockLayout {
 public:
  explicit BlockLayout(size_t alignment) : alignment_(alignment) {}
  template <typename T>
  size_t reserve_array(int64_t count) {
    return reserve(static_cast<size_t>(std::max<int64_t>(count, 0)) * sizeof(T));
  }
  size_t reserve(size_t bytes) {
    const size_t offset = cuda::align_up(size_, alignment_);
    size_ = offset + std::max<size_t>(bytes, 1);
    high_water_ = std::max(high_water_, size_);
    return offset;
  }
  size_t mark() const { return size_; }
  void rewind(size_t mark) { size_ = mark; }
  size_t bytes() const { return cuda::align_up(std::max<size_t>(high_water_, 1), alignment_); }

 private:
  size_t alignment_;
  size_t size_ = 0;
  size_t high_water_ = 0;
};

// A host input of the step (tokens, parents, ...) on its way to the device: written into pinned
// memory, then copied on the stream. The event guards the pinned slot: it is rewritten only once
// its previous copy has left.
template <typename U>
struct StagedInput {
  U* host = nullptr;    // pinned
  U* device = nullptr;  // in the arena
  std::unique_ptr<Event> copied;

  U* begin_write() {
    XF_CUDA_CHECK(cudaEventSynchronize(copied->handle));
    return host;
  }
  const U* upload(int64_t count, cudaStream_t stream) {
    XF_CUDA_CHECK(cudaMemcpyAsync(device, host, sizeof(U) * count, cudaMemcpyHostToDevice, stream));
    XF_CUDA_CHECK(cudaEventRecord(copied->handle, stream));
    return device;
  }
};

// ---- weights ----------------------------------------------------------------------------------

// y[rows, out] = x[rows, in] W^T; the bias is added by the kernel that follows the product.
template <typename T>
struct Linear {
  const T* weight = nullptr;  // [out, in] as in the model file
  const T* bias = nullptr;    // [out]
  int64_t out = 0, in = 0;
};

template <typename T>
struct Norm {
  const T* gamma = nullptr;
  const T* beta = nullptr;
};

template <typename T>
struct EncoderLayer {
  Linear<T> qkv, self_output, ffn_inner, ffn_outer;
  Norm<T> self_norm, ffn_norm;
};

template <typename T>
struct DecoderLayer {
  Linear<T> qkv, self_output, cross_query, cross_key_value, cross_output, ffn_inner, ffn_outer;
  Norm<T> self_norm, cross_norm, ffn_norm;
};

// The model's tensors on the device, converted to T (or f32 where asked), each uploaded once
// (a tied output projection and the embedding share one copy) into one allocation.
template <typename T>
class DeviceWeights {
 public:
  // f32_names: the tensors that tensor_f32() will be asked for.
  DeviceWeights(const ModelFile& file, const std::vector<std::string>& f32_names)
      : file_(file), arena_(capacity(file, f32_names)) {}

  const T* tensor(const std::string& name) { return upload<T>(name); }
  const float* tensor_f32(const std::string& name) { return upload<float>(name); }

 private:
  // Room for every tensor of the file in T, and for the f32 ones.
  static size_t capacity(const ModelFile& file, const std::vector<std::string>& f32_names) {
    size_t bytes = 0;
    for (const TensorView& t : file.tensors())
      bytes += cuda::align_up(t.elements() * sizeof(T), cuda::kArenaAlignment);
    for (const std::string& name : f32_names)
      bytes += cuda::align_up(file.tensor(name).elements() * sizeof(float), cuda::kArenaAlignment);
    return bytes;
  }

  template <typename U>
  const U* upload(const std::string& name) {
    const std::string key = name + (std::is_same_v<U, T> ? "" : "#f32");
    auto it = uploaded_.find(key);
    if (it != uploaded_.end()) return static_cast<const U*>(it->second);
    const TensorView& t = file_.tensor(name);
    std::vector<float> values(t.elements());
    widen_to_f32(t, values.data());
    std::vector<U> converted(values.size());
    for (size_t i = 0; i < values.size(); ++i) converted[i] = from_f32<U>(values[i]);
    void* device = arena_.allocate(sizeof(U) * converted.size());
    XF_CUDA_CHECK(cudaMemcpy(device, converted.data(), sizeof(U) * converted.size(), cudaMemcpyHostToDevice));
    uploaded_.emplace(key, device);
    return static_cast<const U*>(device);
  }

  const ModelFile& file_;
  cuda::DeviceArena arena_;
  std::unordered_map<std::string, const void*> uploaded_;
};

// ---- the backend ------------------------------------------------------------------------------

template <typename T>
class CudaBackend final : public Backend {
 public:
  CudaBackend(const Model& model, const MemoryPlan& plan, int device);
  ~CudaBackend() override {
    // Work still queued reads the arena: let it finish before the members free anything.
    (void)cudaStreamSynchronize(stream_.handle);
  }

  void encode(const int32_t* source_ids, const int32_t* source_lengths, int64_t sentences,
              int64_t source_len) override;
  void decode_step(const int32_t* tokens, int64_t beam, int64_t step) override;
  void top_k(const float* row_offsets, int64_t k, float* values, int32_t* ids) override;
  void reorder_cache(const int32_t* parents, int64_t step) override;
  bool can_drop_sentences() const override { return true; }
  void keep_sentences(const int32_t* kept, int64_t count) override;
  void copy_encoder_output(float* out) const override;
  void copy_logits(float* out) const override;
  size_t arena_bytes() const override { return arena_->capacity(); }

 private:
  void prepare_weights();
  void plan_arena();
  Linear<T> linear(const std::string& prefix) {
    const TensorView& w = model_file_.tensor(prefix + schema::kWeight);
    return {weights_.tensor(prefix + schema::kWeight), weights_.tensor(prefix + schema::kBias),
            static_cast<int64_t>(w.rows()), static_cast<int64_t>(w.cols())};
  }
  Norm<T> norm(const std::string& prefix) {
    return {weights_.tensor(prefix + schema::kGamma), weights_.tensor(prefix + schema::kBeta)};
  }
  void product(const Linear<T>& l, const T* x, T* y, int64_t rows) {
    cuda::matmul(cublas_.handle, x, l.weight, y, rows, l.out, l.in);
  }
  // out = LayerNorm(x + bias + residual); bias and residual may be null.
  void layer_norm(const T* x, const T* bias, const T* residual, const Norm<T>& n, int64_t rows, T* out) {
    cuda::add_bias_residual_layer_norm(x, bias, residual, n.gamma, n.beta, config_.layer_norm_epsilon,
                                       rows, d_, out, nullptr, nullptr, stream());
  }
  // The sub-layer's input: x itself (post-norm) or LayerNorm(x) into `normed` (pre-norm).
  const T* sublayer_input(const T* x, const Norm<T>& n, int64_t rows, T* normed) {
    if (!pre_norm_) return x;
    layer_norm(x, nullptr, nullptr, n, rows, normed);
    return normed;
  }
  // x = LayerNorm(x + sublayer + bias) (post-norm) or x += sublayer + bias (pre-norm).
  void residual(T* x, const T* sublayer, const T* bias, const Norm<T>& n, int64_t rows) {
    if (pre_norm_)
      cuda::add_bias_residual(x, bias, sublayer, rows, d_, stream());
    else
      layer_norm(sublayer, bias, x, n, rows, x);
  }
  // x = FFN(x) with its residual and norm; hidden: [rows, d_ff].
  template <typename Layer>
  void feed_forward(const Layer& layer, T* x, int64_t rows, T* normed, T* hidden, T* sublayer) {
    const T* in = sublayer_input(x, layer.ffn_norm, rows, normed);
    product(layer.ffn_inner, in, hidden, rows);
    cuda::bias_relu(hidden, layer.ffn_inner.bias, rows, d_ff_, stream());
    product(layer.ffn_outer, hidden, sublayer, rows);
    residual(x, sublayer, layer.ffn_outer.bias, layer.ffn_norm, rows);
  }
  void encode_group(const int32_t* source_ids, const int32_t* source_lengths, const int32_t* positions,
                    int64_t sentences, int64_t source_len, T* x);
  cudaStream_t stream() const { return stream_.handle; }

  ModelConfig config_;
  const MemoryPlan& plan_;
  const ModelFile& model_file_;
  int device_ = 0;
  int64_t d_ = 0, heads_ = 0, head_dim_ = 0, d_ff_ = 0, source_vocab_ = 0, vocab_ = 0;
  bool pre_norm_ = false;

  // Declared first, destroyed last: the arenas below are freed before the stream goes.
  Stream stream_;
  CublasHandle cublas_;
  DeviceWeights<T> weights_;
  std::unique_ptr<cuda::DeviceArena> arena_;
  std::unique_ptr<PinnedBlock> pinned_;

  const T* source_table_ = nullptr;  // [source_vocab, d]
  const T* target_table_ = nullptr;  // [target_vocab, d]
  std::vector<EncoderLayer<T>> encoder_;
  std::vector<DecoderLayer<T>> decoder_;
  Norm<T> encoder_final_norm_, decoder_final_norm_;
  const T* output_weight_ = nullptr;       // [target_vocab, d]
  const float* output_bias_ = nullptr;     // [target_vocab] f32 (the logits are f32), or null

  // Persistent across a batch.
  T* memory_ = nullptr;    // encoder output [sentences * source_len, d]
  T* cross_kv_ = nullptr;  // per decoder layer [sentences * source_len, 2d]: K | V, bias added
  int64_t cross_kv_layer_stride_ = 0;
  // Self-attention K and V caches, current and next (the beam gather writes the other one):
  // [layers, max_rows, max_target_len, d], as the CPU backend's: a row's positions are
  // contiguous, so the beam gather is one row copy per row and layer.
  T* self_k_[2] = {nullptr, nullptr};
  T* self_v_[2] = {nullptr, nullptr};
  int current_cache_ = 0;
  int64_t cache_layer_stride_ = 0, cache_row_stride_ = 0;
  void* cublas_workspace_ = nullptr;
  size_t cublas_workspace_bytes_ = 0;
  void* attention_workspace_ = nullptr;  // cached_attention's split-key partials
  StagedInput<int32_t> source_ids_;      // [max_sentences * max_source_len]
  StagedInput<int32_t> source_lengths_;  // [max_sentences]
  StagedInput<int32_t> positions_;       // [max(encoder group rows, max_rows)]
  StagedInput<int32_t> tokens_;          // [max_rows]
  StagedInput<int32_t> parents_;         // [max_rows]
  StagedInput<float> row_offsets_;       // [max_rows]
  float* top_values_ = nullptr;          // [max_rows, max_beam] device
  int32_t* top_ids_ = nullptr;           // [max_rows, max_beam] device
  float* top_values_host_ = nullptr;     // [max_rows, max_beam] pinned
  int32_t* top_ids_host_ = nullptr;      // [max_rows, max_beam] pinned
  // Encoder working buffers (live during encode only), rows = encoder group.
  T *enc_qkv_ = nullptr, *enc_context_ = nullptr, *enc_sublayer_ = nullptr, *enc_hidden_ = nullptr,
    *enc_normed_ = nullptr;
  // Decoder step buffers (live from a step to the next encode), rows = decoder rows.
  T *dec_x_ = nullptr, *dec_normed_ = nullptr, *dec_qkv_ = nullptr, *dec_query_ = nullptr,
    *dec_context_ = nullptr, *dec_sublayer_ = nullptr, *dec_hidden_ = nullptr;
  float* logits_ = nullptr;  // [rows, vocab] f32

  // The batch last encoded (sentences_ shrinks as keep_sentences() drops finished ones).
  int64_t sentences_ = 0, source_len_ = 0, rows_ = 0, beam_ = 1;
  std::vector<int32_t> batch_lengths_;  // [max_sentences] the batch's source lengths, on the host
};

template <typename T>
CudaBackend<T>::CudaBackend(const Model& model, const MemoryPlan& plan, int device)
    : config_(model.config()), plan_(plan), model_file_(model.file()), device_(device),
      weights_(model.file(), config_.output_bias ? std::vector<std::string>{param::kOutputBias}
                                                 : std::vector<std::string>{}) {
  d_ = config_.d_model;
  heads_ = config_.num_heads;
  head_dim_ = config_.head_dim();
  d_ff_ = config_.d_ff;
  source_vocab_ = config_.source_vocab_size;
  vocab_ = config_.target_vocab_size;
  pre_norm_ = config_.norm_position == NormPosition::pre;
  prepare_weights();
  plan_arena();
  batch_lengths_.resize(plan_.max_sentences);
  cuda::bind_cublas_handle(cublas_.handle, stream(), cublas_workspace_, cublas_workspace_bytes_);
  // The weights went up with cudaMemcpy on the legacy stream, which a non-blocking stream does
  // not wait for.
  XF_CUDA_CHECK(cudaDeviceSynchronize());
}

template <typename T>
void CudaBackend<T>::prepare_weights() {
  for (uint32_t i = 0; i < config_.encoder_layers; ++i) {
    const std::string p = param::encoder_layer(i);
    EncoderLayer<T> layer;
    layer.qkv = linear(p + schema::kSelfAttentionQkv.name);
    layer.self_output = linear(p + schema::kSelfAttentionOutput.name);
    layer.self_norm = norm(p + schema::kSelfAttentionNorm.name);
    layer.ffn_inner = linear(p + schema::kFfnInner.name);
    layer.ffn_outer = linear(p + schema::kFfnOuter.name);
    layer.ffn_norm = norm(p + schema::kFfnNorm.name);
    encoder_.push_back(layer);
  }
  for (uint32_t i = 0; i < config_.decoder_layers; ++i) {
    const std::string p = param::decoder_layer(i);
    DecoderLayer<T> layer;
    layer.qkv = linear(p + schema::kSelfAttentionQkv.name);
    layer.self_output = linear(p + schema::kSelfAttentionOutput.name);
    layer.self_norm = norm(p + schema::kSelfAttentionNorm.name);
    layer.cross_query = linear(p + schema::kCrossAttentionQuery.name);
    layer.cross_key_value = linear(p + schema::kCrossAttentionKeyValue.name);
    layer.cross_output = linear(p + schema::kCrossAttentionOutput.name);
    layer.cross_norm = norm(p + schema::kCrossAttentionNorm.name);
    layer.ffn_inner = linear(p + schema::kFfnInner.name);
    layer.ffn_outer = linear(p + schema::kFfnOuter.name);
    layer.ffn_norm = norm(p + schema::kFfnNorm.name);
    decoder_.push_back(layer);
  }
  if (pre_norm_) {
    encoder_final_norm_ = norm(schema::kEncoderFinalNorm.name);
    decoder_final_norm_ = norm(schema::kDecoderFinalNorm.name);
  }
  source_table_ = weights_.tensor(param::source_embedding(config_));
  target_table_ = weights_.tensor(param::target_embedding(config_));
  output_weight_ = weights_.tensor(param::output_projection(config_));
  output_bias_ = config_.output_bias ? weights_.tensor_f32(param::kOutputBias) : nullptr;
}

template <typename T>
void CudaBackend<T>::plan_arena() {
  const int64_t cross_rows = plan_.max_sentences * plan_.max_source_len;
  const int64_t enc_rows = plan_.encoder_group_rows;
  const int64_t dec_rows = plan_.max_rows;
  const int64_t layers = std::max<int64_t>(config_.decoder_layers, 1);
  const int64_t top = plan_.max_rows * plan_.max_beam;

  BlockLayout layout(cuda::kArenaAlignment);
  // Persistent buffers.
  const size_t memory = layout.reserve_array<T>(cross_rows * d_);
  cross_kv_layer_stride_ = cross_rows * 2 * d_;
  const size_t cross_kv = layout.reserve_array<T>(layers * cross_kv_layer_stride_);
  cache_row_stride_ = plan_.max_target_len * d_;
  cache_layer_stride_ = plan_.max_rows * cache_row_stride_;
  size_t caches[4];
  for (size_t& c : caches) c = layout.reserve_array<T>(layers * cache_layer_stride_);
  cublas_workspace_bytes_ = cuda::recommended_cublas_workspace_bytes(device_);
  const size_t cublas_workspace = layout.reserve(cublas_workspace_bytes_);
  const size_t attention_workspace = layout.reserve(
      cuda::cached_attention_workspace_bytes(plan_.max_rows, heads_, head_dim_, plan_.max_target_len));
  const size_t source_ids = layout.reserve_array<int32_t>(cross_rows);
  const size_t source_lengths = layout.reserve_array<int32_t>(plan_.max_sentences);
  const size_t positions = layout.reserve_array<int32_t>(std::max(enc_rows, dec_rows));
  const size_t tokens = layout.reserve_array<int32_t>(dec_rows);
  const size_t parents = layout.reserve_array<int32_t>(dec_rows);
  const size_t row_offsets = layout.reserve_array<float>(dec_rows);
  const size_t top_values = layout.reserve_array<float>(top);
  const size_t top_ids = layout.reserve_array<int32_t>(top);

  // Encoder and decoder-step buffers share memory: a batch's encoder is done before its first step.
  const size_t phase_start = layout.mark();
  const size_t enc_qkv = layout.reserve_array<T>(enc_rows * 3 * d_);
  const size_t enc_context = layout.reserve_array<T>(enc_rows * d_);
  const size_t enc_sublayer = layout.reserve_array<T>(enc_rows * d_);
  const size_t enc_hidden = layout.reserve_array<T>(enc_rows * d_ff_);
  const size_t enc_normed = layout.reserve_array<T>(pre_norm_ ? enc_rows * d_ : 0);
  layout.rewind(phase_start);
  const size_t dec_x = layout.reserve_array<T>(dec_rows * d_);
  const size_t dec_normed = layout.reserve_array<T>(pre_norm_ ? dec_rows * d_ : 0);
  const size_t dec_qkv = layout.reserve_array<T>(dec_rows * 3 * d_);
  const size_t dec_query = layout.reserve_array<T>(dec_rows * d_);
  const size_t dec_context = layout.reserve_array<T>(dec_rows * d_);
  const size_t dec_sublayer = layout.reserve_array<T>(dec_rows * d_);
  const size_t dec_hidden = layout.reserve_array<T>(dec_rows * d_ff_);
  const size_t logits = layout.reserve_array<float>(dec_rows * vocab_);

  arena_ = std::make_unique<cuda::DeviceArena>(layout.bytes());
  auto at = [&](size_t offset) { return arena_->at(offset, 0); };
  memory_ = static_cast<T*>(at(memory));
  cross_kv_ = static_cast<T*>(at(cross_kv));
  self_k_[0] = static_cast<T*>(at(caches[0]));
  self_k_[1] = static_cast<T*>(at(caches[1]));
  self_v_[0] = static_cast<T*>(at(caches[2]));
  self_v_[1] = static_cast<T*>(at(caches[3]));
  cublas_workspace_ = at(cublas_workspace);
  attention_workspace_ = at(attention_workspace);
  source_ids_.device = static_cast<int32_t*>(at(source_ids));
  source_lengths_.device = static_cast<int32_t*>(at(source_lengths));
  positions_.device = static_cast<int32_t*>(at(positions));
  tokens_.device = static_cast<int32_t*>(at(tokens));
  parents_.device = static_cast<int32_t*>(at(parents));
  row_offsets_.device = static_cast<float*>(at(row_offsets));
  top_values_ = static_cast<float*>(at(top_values));
  top_ids_ = static_cast<int32_t*>(at(top_ids));
  enc_qkv_ = static_cast<T*>(at(enc_qkv));
  enc_context_ = static_cast<T*>(at(enc_context));
  enc_sublayer_ = static_cast<T*>(at(enc_sublayer));
  enc_hidden_ = static_cast<T*>(at(enc_hidden));
  enc_normed_ = static_cast<T*>(at(enc_normed));
  dec_x_ = static_cast<T*>(at(dec_x));
  dec_normed_ = static_cast<T*>(at(dec_normed));
  dec_qkv_ = static_cast<T*>(at(dec_qkv));
  dec_query_ = static_cast<T*>(at(dec_query));
  dec_context_ = static_cast<T*>(at(dec_context));
  dec_sublayer_ = static_cast<T*>(at(dec_sublayer));
  dec_hidden_ = static_cast<T*>(at(dec_hidden));
  logits_ = static_cast<float*>(at(logits));

  // The pinned host side: inputs on their way in, the top-k on its way out.
  BlockLayout host(64);
  const size_t host_source_ids = host.reserve_array<int32_t>(cross_rows);
  const size_t host_source_lengths = host.reserve_array<int32_t>(plan_.max_sentences);
  const size_t host_positions = host.reserve_array<int32_t>(std::max(enc_rows, dec_rows));
  const size_t host_tokens = host.reserve_array<int32_t>(dec_rows);
  const size_t host_parents = host.reserve_array<int32_t>(dec_rows);
  const size_t host_row_offsets = host.reserve_array<float>(dec_rows);
  const size_t host_top_values = host.reserve_array<float>(top);
  const size_t host_top_ids = host.reserve_array<int32_t>(top);
  pinned_ = std::make_unique<PinnedBlock>(host.bytes());
  auto host_at = [&](size_t offset) { return static_cast<char*>(pinned_->data) + offset; };
  source_ids_.host = reinterpret_cast<int32_t*>(host_at(host_source_ids));
  source_lengths_.host = reinterpret_cast<int32_t*>(host_at(host_source_lengths));
  positions_.host = reinterpret_cast<int32_t*>(host_at(host_positions));
  tokens_.host = reinterpret_cast<int32_t*>(host_at(host_tokens));
  parents_.host = reinterpret_cast<int32_t*>(host_at(host_parents));
  row_offsets_.host = reinterpret_cast<float*>(host_at(host_row_offsets));
  top_values_host_ = reinterpret_cast<float*>(host_at(host_top_values));
  top_ids_host_ = reinterpret_cast<int32_t*>(host_at(host_top_ids));
  for (auto* copied : {&source_ids_.copied, &source_lengths_.copied, &positions_.copied, &tokens_.copied,
                       &parents_.copied, &row_offsets_.copied})
    *copied = std::make_unique<Event>();
}

template <typename T>
void CudaBackend<T>::encode(const int32_t* source_ids, const int32_t* source_lengths, int64_t sentences,
                            int64_t source_len) {
  if (sentences < 1 || sentences > plan_.max_sentences || source_len < 1 ||
      source_len > plan_.max_source_len)
    throw Error("internal: encode() outside the plan");
  sentences_ = sentences;
  source_len_ = source_len;
  const int64_t total_rows = sentences * source_len;
  std::copy(source_ids, source_ids + total_rows, source_ids_.begin_write());
  const int32_t* ids = source_ids_.upload(total_rows, stream());
  std::copy(source_lengths, source_lengths + sentences, batch_lengths_.begin());
  std::copy(source_lengths, source_lengths + sentences, source_lengths_.begin_write());
  const int32_t* lengths = source_lengths_.upload(sentences, stream());

  // Groups of whole sentences of at most encoder_group_rows rows; every group starts at
  // position 0, so one positions buffer serves them all.
  const int64_t group = std::max<int64_t>(1, plan_.encoder_group_rows / source_len);
  const int64_t group_rows = std::min(group, sentences) * source_len;
  int32_t* host_positions = positions_.begin_write();
  for (int64_t i = 0; i < group_rows; ++i) host_positions[i] = static_cast<int32_t>(i % source_len);
  const int32_t* positions = positions_.upload(group_rows, stream());

  for (int64_t first = 0; first < sentences; first += group) {
    const int64_t count = std::min(group, sentences - first);
    const int64_t rows = count * source_len;
    T* memory = memory_ + first * source_len * d_;
    encode_group(ids + first * source_len, lengths + first, positions, count, source_len, memory);
    // The group's cross-attention K|V for every decoder layer, bias included.
    for (size_t l = 0; l < decoder_.size(); ++l) {
      const Linear<T>& kv = decoder_[l].cross_key_value;
      T* out = cross_kv_ + l * cross_kv_layer_stride_ + first * source_len * 2 * d_;
      product(kv, memory, out, rows);
      cuda::add_bias_residual(out, kv.bias, nullptr, rows, 2 * d_, stream());
    }
  }
}

template <typename T>
void CudaBackend<T>::encode_group(const int32_t* source_ids, const int32_t* source_lengths,
                                  const int32_t* positions, int64_t sentences, int64_t source_len, T* x) {
  const int64_t rows = sentences * source_len;
  cuda::embed(source_table_, source_vocab_, d_, source_ids, positions, rows,
              std::sqrt(static_cast<float>(d_)), x, stream());
  // The fused QKV output [sentences, source_len, 3d] seen as [sentences, heads, source_len, head_dim].
  const HeadStrides qkv_strides{source_len * 3 * d_, head_dim_, 3 * d_};
  const HeadStrides context_strides{source_len * d_, head_dim_, d_};
  const cuda::AttentionShape shape{sentences, heads_, source_len, source_len, head_dim_};
  for (const EncoderLayer<T>& layer : encoder_) {
    const T* in = sublayer_input(x, layer.self_norm, rows, enc_normed_);
    product(layer.qkv, in, enc_qkv_, rows);
    cuda::add_bias_residual(enc_qkv_, layer.qkv.bias, nullptr, rows, 3 * d_, stream());
    cuda::attention(enc_qkv_, qkv_strides, enc_qkv_ + d_, qkv_strides, enc_qkv_ + 2 * d_, qkv_strides,
                    enc_context_, context_strides, shape, source_lengths, -1, nullptr, stream());
    product(layer.self_output, enc_context_, enc_sublayer_, rows);
    residual(x, enc_sublayer_, layer.self_output.bias, layer.self_norm, rows);
    feed_forward(layer, x, rows, enc_normed_, enc_hidden_, enc_sublayer_);
  }
  if (pre_norm_) layer_norm(x, nullptr, nullptr, encoder_final_norm_, rows, x);
}

template <typename T>
void CudaBackend<T>::decode_step(const int32_t* tokens, int64_t beam, int64_t step) {
  if (beam < 1 || beam > plan_.max_beam || step < 0 || step >= plan_.max_target_len || sentences_ < 1)
    throw Error("internal: decode_step() outside the plan");
  beam_ = beam;
  rows_ = sentences_ * beam;
  const int64_t rows = rows_;
  std::copy(tokens, tokens + rows, tokens_.begin_write());
  const int32_t* device_tokens = tokens_.upload(rows, stream());
  int32_t* host_positions = positions_.begin_write();
  std::fill(host_positions, host_positions + rows, static_cast<int32_t>(step));
  const int32_t* positions = positions_.upload(rows, stream());
  T* x = dec_x_;
  cuda::embed(target_table_, vocab_, d_, device_tokens, positions, rows, std::sqrt(static_cast<float>(d_)),
              x, stream());

  // Self-attention: Q to [rows, heads, 1, head_dim] (position stride 0: the split writes at
  // position `step`), K and V into the cache [rows, max_target_len, d] at position `step`.
  const HeadStrides query_strides{d_, head_dim_, 0};
  const HeadStrides cache_strides{cache_row_stride_, head_dim_, d_};
  // Cross-attention: a sentence's beam hypotheses are its queries, [sentences, heads, beam, head_dim],
  // over the sentence's keys [sentences, source_len, 2d]; no copy of K/V per hypothesis.
  const HeadStrides beam_query_strides{beam * d_, head_dim_, d_};
  const HeadStrides cross_strides{source_len_ * 2 * d_, head_dim_, 2 * d_};
  const cuda::AttentionShape cross_shape{sentences_, heads_, beam, source_len_, head_dim_};
  const int32_t* source_lengths = source_lengths_.device;

  for (size_t l = 0; l < decoder_.size(); ++l) {
    const DecoderLayer<T>& layer = decoder_[l];
    T* k_cache = self_k_[current_cache_] + l * cache_layer_stride_;
    T* v_cache = self_v_[current_cache_] + l * cache_layer_stride_;

    const T* in = sublayer_input(x, layer.self_norm, rows, dec_normed_);
    product(layer.qkv, in, dec_qkv_, rows);
    cuda::SplitHeadsOutputs<T> split;
    split.data[0] = dec_query_;
    split.data[1] = k_cache;
    split.data[2] = v_cache;
    split.strides[0] = query_strides;
    split.strides[1] = cache_strides;
    split.strides[2] = cache_strides;
    cuda::add_bias_split_heads(dec_qkv_, 3 * d_, layer.qkv.bias, 3, rows, 1, heads_, head_dim_, split, step,
                               stream());
    cuda::cached_attention(dec_query_, d_, k_cache, v_cache, cache_strides, rows, heads_, head_dim_,
                           plan_.max_target_len, step, dec_context_, d_, attention_workspace_, stream());
    product(layer.self_output, dec_context_, dec_sublayer_, rows);
    residual(x, dec_sublayer_, layer.self_output.bias, layer.self_norm, rows);

    in = sublayer_input(x, layer.cross_norm, rows, dec_normed_);
    product(layer.cross_query, in, dec_query_, rows);
    cuda::add_bias_residual(dec_query_, layer.cross_query.bias, nullptr, rows, d_,
                            stream());
    const T* cross_kv = cross_kv_ + l * cross_kv_layer_stride_;
    cuda::attention(dec_query_, beam_query_strides, cross_kv, cross_strides, cross_kv + d_, cross_strides,
                    dec_context_, beam_query_strides, cross_shape, source_lengths, -1, nullptr, stream());
    product(layer.cross_output, dec_context_, dec_sublayer_, rows);
    residual(x, dec_sublayer_, layer.cross_output.bias, layer.cross_norm, rows);

    feed_forward(layer, x, rows, dec_normed_, dec_hidden_, dec_sublayer_);
  }
  if (pre_norm_) layer_norm(x, nullptr, nullptr, decoder_final_norm_, rows, x);
  // f32 logits in both compute types (f16 inputs, f32 output and accumulation).
  cuda::matmul(cublas_.handle, x, output_weight_, logits_, rows, vocab_, d_);
  if (output_bias_ != nullptr)
    cuda::add_bias_residual(logits_, output_bias_, nullptr, rows, vocab_, stream());
}

template <typename T>
void CudaBackend<T>::top_k(const float* row_offsets, int64_t k, float* values, int32_t* ids) {
  if (k < 1 || k > plan_.max_beam || rows_ < 1) throw Error("internal: top_k() outside the plan");
  const float* offsets = nullptr;
  if (row_offsets != nullptr) {
    std::copy(row_offsets, row_offsets + rows_, row_offsets_.begin_write());
    offsets = row_offsets_.upload(rows_, stream());
  }
  cuda::log_softmax_top_k(logits_, offsets, rows_, vocab_, k, top_values_, top_ids_, stream());
  // Only [rows, k] crosses the bus.
  const int64_t count = rows_ * k;
  XF_CUDA_CHECK(cudaMemcpyAsync(top_values_host_, top_values_, sizeof(float) * count,
                                cudaMemcpyDeviceToHost, stream()));
  XF_CUDA_CHECK(cudaMemcpyAsync(top_ids_host_, top_ids_, sizeof(int32_t) * count, cudaMemcpyDeviceToHost,
                                stream()));
  XF_CUDA_CHECK(cudaStreamSynchronize(stream()));
  std::copy(top_values_host_, top_values_host_ + count, values);
  std::copy(top_ids_host_, top_ids_host_ + count, ids);
}

template <typename T>
void CudaBackend<T>::reorder_cache(const int32_t* parents, int64_t step) {
  if (step < 0 || step >= plan_.max_target_len || rows_ < 1) throw Error("internal: reorder_cache() outside the plan");
  std::copy(parents, parents + rows_, parents_.begin_write());
  const int32_t* device_parents = parents_.upload(rows_, stream());
  const int next = 1 - current_cache_;
  const int64_t prefix = (step + 1) * d_;
  for (size_t l = 0; l < decoder_.size(); ++l) {
    const int64_t offset = static_cast<int64_t>(l) * cache_layer_stride_;
    cuda::gather_rows(self_k_[current_cache_] + offset, cache_row_stride_, device_parents, rows_, prefix,
                      self_k_[next] + offset, cache_row_stride_, stream());
    cuda::gather_rows(self_v_[current_cache_] + offset, cache_row_stride_, device_parents, rows_, prefix,
                      self_v_[next] + offset, cache_row_stride_, stream());
  }
  current_cache_ = next;
}

template <typename T>
void CudaBackend<T>::keep_sentences(const int32_t* kept, int64_t count) {
  if (count < 1 || count > sentences_) throw Error("internal: keep_sentences() outside the batch");
  for (int64_t i = 0; i < count; ++i)
    if (kept[i] < i || kept[i] >= sentences_ || (i > 0 && kept[i] <= kept[i - 1]))
      throw Error("internal: keep_sentences() needs ascending sentences of the batch");
  // kept is ascending, so every sentence moves towards the front: copies in stream order, each
  // one sentence's cross K|V in every layer (one row of source_len * 2d per layer).
  const int64_t block = source_len_ * 2 * d_;
  const size_t pitch = sizeof(T) * cross_kv_layer_stride_;
  for (int64_t i = 0; i < count; ++i) {
    if (kept[i] == i || decoder_.empty()) continue;
    XF_CUDA_CHECK(cudaMemcpy2DAsync(cross_kv_ + i * block, pitch, cross_kv_ + kept[i] * block, pitch,
                                    sizeof(T) * block, decoder_.size(), cudaMemcpyDeviceToDevice, stream()));
  }
  for (int64_t i = 0; i < count; ++i) batch_lengths_[i] = batch_lengths_[kept[i]];
  std::copy(batch_lengths_.begin(), batch_lengths_.begin() + count, source_lengths_.begin_write());
  source_lengths_.upload(count, stream());
  sentences_ = count;
  rows_ = sentences_ * beam_;
}

template <typename T>
void CudaBackend<T>::copy_encoder_output(float* out) const {
  const int64_t count = sentences_ * source_len_ * d_;
  std::vector<T> values(count);  // for tests: allocating here is fine
  XF_CUDA_CHECK(cudaMemcpyAsync(values.data(), memory_, sizeof(T) * count, cudaMemcpyDeviceToHost, stream()));
  XF_CUDA_CHECK(cudaStreamSynchronize(stream()));
  for (int64_t i = 0; i < count; ++i) out[i] = to_f32(values[i]);
}

template <typename T>
void CudaBackend<T>::copy_logits(float* out) const {
  XF_CUDA_CHECK(cudaMemcpyAsync(out, logits_, sizeof(float) * rows_ * vocab_, cudaMemcpyDeviceToHost, stream()));
  XF_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

// The plan's limits that the CUDA kernels cannot serve, refused before anything touches a GPU.
void check_cuda_limits(const MemoryPlan& plan) {
  if (plan.max_beam > cuda::kMaxTopK)
    throw Error("device cuda: beam " + std::to_string(plan.max_beam) + " exceeds the CUDA top-k limit of " +
                std::to_string(cuda::kMaxTopK));
  if (plan.max_source_len > cuda::max_attention_key_len())
    throw Error("device cuda: max_source_len " + std::to_string(plan.max_source_len) +
                " exceeds the CUDA attention limit of " + std::to_string(cuda::max_attention_key_len()));
  if (plan.max_rows > 65535)  // grid dimensions of the attention and gather kernels
    throw Error("device cuda: max_batch x beam = " + std::to_string(plan.max_rows) + " exceeds 65535 rows");
}

// f16 compute when every matrix is stored in 16 bits.
bool stored_in_16_bits(const ModelFile& file) {
  bool any = false;
  for (const TensorView& t : file.tensors()) {
    if (t.rank != 2) continue;
    if (t.dtype != DType::f16 && t.dtype != DType::bf16) return false;
    any = true;
  }
  return any;
}

}  // namespace

namespace {

class CudaBackendFactory final : public BackendFactory {
 public:
  std::unique_ptr<Backend> make(const Model& model, const MemoryPlan& plan,
                                std::optional<DType> weight_dtype) const override {
    return make_cuda_backend(model, plan, weight_dtype);
  }
};

}  // namespace

const BackendFactory& cuda_backend_factory() {
  static const CudaBackendFactory factory;
  return factory;
}

std::unique_ptr<Backend> make_cuda_backend(const Model& model, const MemoryPlan& plan,
                                           std::optional<DType> compute_dtype) {
  if (compute_dtype && *compute_dtype != DType::f32 && *compute_dtype != DType::f16)
    throw Error(std::string("device cuda: weights cannot be converted to ") + dtype_name(*compute_dtype) +
                " on CUDA (f32 or f16)");
  check_cuda_limits(plan);
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(std::string("device cuda: no CUDA device is available (") + cudaGetErrorString(status) + ")");
  }
  if (count == 0) throw Error("device cuda: no CUDA device is available");
  int device = 0;
  XF_CUDA_CHECK(cudaGetDevice(&device));
  const bool f16 = compute_dtype ? *compute_dtype == DType::f16 : stored_in_16_bits(model.file());
  if (f16) return std::make_unique<CudaBackend<half>>(model, plan, device);
  return std::make_unique<CudaBackend<float>>(model, plan, device);
}

}  // namespace xf::runtime
