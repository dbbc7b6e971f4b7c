// The CUDA backend: the Transformer of transformer_backend.h over CudaOps, i.e. cuBLAS matrix
// products and xf's CUDA kernels (kernels_cuda/) over one device arena, on one stream. Host C++
// only (g++): every GPU function lives in xf_kernels_cuda.
//
// Memory: everything is taken when the backend is built, from the MemoryPlan: one device
// allocation for the weights, one DeviceArena for the working memory (activations, K/V caches,
// the cuBLAS workspace, the cached attention's split-key workspace, device copies of the
// inputs) and one pinned host block for what crosses the bus (source ids, lengths, tokens,
// positions, parents, row offsets, the top-k output). Translating makes no cudaMalloc, cudaFree
// or cudaMallocHost call (tests/runtime/cuda/runtime_allocation_test.cc counts them).
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
#include <vector>

#include "backend.h"
#include "memory_plan.h"
#include "transformer_backend.h"
#include "weight_store.h"
#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/format/model_file.h"
#include "xf/format/parameters.h"
#include "xf/kernels_cuda/check.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/gather.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels/recurrent.h"
#include "xf/kernels/softmax.h"
#include "xf/kernels_cuda/memory.h"
#include "xf/model.h"

namespace xf::runtime {
namespace {

using cuda::half;
using cuda::HeadStrides;

// ---- host-side conversions --------------------------------------------------------------------

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

// ---- the CUDA part of the Transformer (transformer_backend.h lists what an Ops provides) -------

template <typename T>
class CudaOps {
 public:
  using Value = T;
  using HeadStrides = cuda::HeadStrides;
  using AttentionShape = cuda::AttentionShape;
  // y[rows, out] = x[rows, in] W^T; the bias is added by a kernel after the product.
  struct Linear {
    const T* weight = nullptr;  // [out, in] as in the model file
    const T* bias = nullptr;    // [out]
    int64_t out = 0, in = 0;
    bool bias_in_product = false;
  };
  struct Norm {
    const T* gamma = nullptr;
    const T* beta = nullptr;
  };
  struct Table {
    const T* data = nullptr;  // [vocab, d]
    int64_t vocab = 0;
  };
  struct Logits {
    const T* weight = nullptr;    // [target_vocab, d]
    const float* bias = nullptr;  // [target_vocab] f32 (the logits are f32), or null
  };
  using Input = size_t;  // an index into staged_
  static constexpr size_t kAlignment = cuda::kArenaAlignment;
  static constexpr bool kLogitsOnHost = false;
  static constexpr bool kReorderInPlace = false;  // two copies of the caches, one gather kernel
  static constexpr int64_t kMaxTopK = cuda::kMaxTopK;  // the top-k kernel's candidates a row

  CudaOps(const Model& model, const MemoryPlan& plan, int device)
      : config_(model.config()), plan_(plan), device_(device),
        weight_arena_(weight_bytes(model.file(), config_.output_bias ? param::kOutputBias : nullptr)),
        weights_(model.file(), [this](const void* bytes, size_t size) { return upload_weight(bytes, size); }),
        host_layout_(64) {}
  ~CudaOps() {
    // Work still queued reads the arena: let it finish before the members free anything.
    (void)cudaStreamSynchronize(stream());
  }
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  // ---- binding
  Linear linear(const std::string& prefix, int64_t, bool bias_in_product) {
    const WeightView w = weights_.get(prefix + schema::kWeight, kDType);
    return {static_cast<const T*>(w.data), tensor(prefix + schema::kBias), w.rows, w.cols, bias_in_product};
  }
  Norm norm(const std::string& prefix) { return {tensor(prefix + schema::kGamma), tensor(prefix + schema::kBeta)}; }
  Logits output_projection(int64_t) {
    return {tensor(param::output_projection(config_)),
            config_.output_bias ? static_cast<const float*>(weights_.get(param::kOutputBias, DType::f32).data)
                                : nullptr};
  }
  Table table(const std::string& name) {
    const WeightView w = weights_.get(name, kDType);
    return {static_cast<const T*>(w.data), w.rows};
  }
  // The weights went up with cudaMemcpy on the legacy stream, which a non-blocking stream does
  // not wait for.
  void weights_bound() { XF_CUDA_CHECK(cudaDeviceSynchronize()); }
  std::vector<const TensorView*> released_weights() const { return {}; }

  // ---- memory: the device arena, and a pinned host block for what crosses the bus
  int64_t padded_rows(int64_t rows) const { return rows; }
  void reserve(ArenaLayout& layout) {
    // A spare candidate a row where the kernel allows one (Backend::top_k_has_spare).
    const int64_t top = plan_.max_rows * std::min<int64_t>(plan_.max_beam + 1, kMaxTopK);
    cublas_workspace_bytes_ = cuda::recommended_cublas_workspace_bytes(device_);
    cublas_workspace_ = layout.reserve(cublas_workspace_bytes_);
    attention_workspace_ = layout.reserve(cuda::cached_attention_workspace_bytes(
        plan_.max_rows, config_.num_heads, config_.head_dim(), plan_.max_target_len));
    row_offsets_input_ = input(layout, sizeof(float) * plan_.max_rows);
    top_values_ = layout.reserve_array<float>(top);
    top_ids_ = layout.reserve_array<int32_t>(top);
    top_values_host_ = host_layout_.reserve_array<float>(top);
    top_ids_host_ = host_layout_.reserve_array<int32_t>(top);
  }
  Input input(ArenaLayout& layout, size_t bytes) {
    Staged s;
    s.device_offset = layout.reserve(bytes);
    s.host_offset = host_layout_.reserve(bytes);
    staged_.push_back(std::move(s));
    return staged_.size() - 1;
  }
  void* allocate(const ArenaLayout& layout) {
    arena_ = std::make_unique<cuda::DeviceArena>(layout.bytes());
    pinned_ = std::make_unique<PinnedBlock>(host_layout_.bytes());
    for (Staged& s : staged_) {
      s.device = device_at(s.device_offset);
      s.host = host_at(s.host_offset);
      s.copied = std::make_unique<Event>();
    }
    cuda::bind_cublas_handle(cublas_.handle, stream(), device_at(cublas_workspace_), cublas_workspace_bytes_);
    return arena_->base();
  }
  size_t arena_bytes() const { return arena_->capacity(); }
  std::optional<DeviceUsage> device_usage() const {
    size_t free_bytes = 0, total_bytes = 0;
    XF_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const cuda::AllocationCounts counts = cuda::allocation_counts();
    return DeviceUsage{total_bytes - free_bytes, counts.device_mallocs + counts.pinned_host_mallocs};
  }
  // Writes values into the input's pinned slot (once its previous copy has left), then copies
  // them to the device on the stream.
  template <typename U>
  const U* upload(Input input, const U* values, int64_t count) {
    Staged& s = staged_[input];
    XF_CUDA_CHECK(cudaEventSynchronize(s.copied->handle));
    std::copy(values, values + count, static_cast<U*>(s.host));
    XF_CUDA_CHECK(cudaMemcpyAsync(s.device, s.host, sizeof(U) * count, cudaMemcpyHostToDevice, stream()));
    XF_CUDA_CHECK(cudaEventRecord(s.copied->handle, stream()));
    return static_cast<const U*>(s.device);
  }

  // ---- kernels
  void project(const Linear& l, const T* x, T* y, int64_t rows) {
    cuda::matmul(cublas_.handle, x, l.weight, y, rows, l.out, l.in);
    if (l.bias_in_product) cuda::add_bias_residual(y, l.bias, nullptr, rows, l.out, stream());
  }
  // f32 logits in both compute types (f16 inputs, f32 output and accumulation).
  void logits(const Logits& l, const T* x, float* y, int64_t rows) {
    cuda::matmul(cublas_.handle, x, l.weight, y, rows, config_.target_vocab_size, config_.d_model);
    if (l.bias != nullptr)
      cuda::add_bias_residual(y, l.bias, nullptr, rows, config_.target_vocab_size, stream());
  }
  void embed(const Table& table, const int32_t* ids, const int32_t* positions, int64_t rows, float scale, T* out) {
    cuda::embed(table.data, table.vocab, config_.d_model, ids, positions, rows, scale, out, stream(),
                config_.position_encoding);
  }
  void layer_norm(const T* x, const T* bias, const T* residual, const Norm& n, float epsilon, int64_t rows,
                  int64_t dim, T* out) {
    cuda::add_bias_residual_layer_norm(x, bias, residual, n.gamma, n.beta, epsilon, rows, dim, out, nullptr,
                                       nullptr, stream());
  }
  void add_bias_residual(T* x, const T* bias, const T* residual, int64_t rows, int64_t dim) {
    cuda::add_bias_residual(x, bias, residual, rows, dim, stream());
  }
  void bias_activation(T* x, const T* bias, int64_t rows, int64_t dim) {
    cuda::bias_activation(x, bias, rows, dim, config_.activation, stream());
  }
  void ssru_step(const T* in, T* cell, const int32_t* state_rows, bool first, int64_t rows, T* out) {
    cuda::ssru_step(in, cell, state_rows, first, rows, config_.d_model, out, stream());
  }
  void attention(const T* q, HeadStrides qs, const T* k, HeadStrides ks, const T* v, HeadStrides vs, T* out,
                 HeadStrides os, const AttentionShape& shape, const int32_t* key_lengths) {
    cuda::attention(q, qs, k, ks, v, vs, out, os, shape, key_lengths, -1, nullptr, stream());
  }
  // The product without its bias, then one kernel adds it and splits Q to [rows, heads, 1,
  // head_dim] (position stride 0) and K, V into the caches at `step`; the cached attention
  // splits long caches over several blocks.
  void self_attention_step(const Linear& qkv_linear, const T* in, int64_t rows, int64_t step, T* k_cache,
                           T* v_cache, HeadStrides cache_strides, T* qkv, T* query, T* context) {
    const int64_t d = config_.d_model, heads = config_.num_heads, head_dim = config_.head_dim();
    cuda::matmul(cublas_.handle, in, qkv_linear.weight, qkv, rows, qkv_linear.out, qkv_linear.in);
    cuda::SplitHeadsOutputs<T> split;
    split.data[0] = query;
    split.data[1] = k_cache;
    split.data[2] = v_cache;
    split.strides[0] = HeadStrides{d, head_dim, 0};
    split.strides[1] = cache_strides;
    split.strides[2] = cache_strides;
    cuda::add_bias_split_heads(qkv, 3 * d, qkv_linear.bias, 3, rows, 1, heads, head_dim, split, step, stream());
    cuda::cached_attention(query, d, k_cache, v_cache, cache_strides, rows, heads, head_dim, plan_.max_target_len,
                           step, context, d, device_at(attention_workspace_), stream());
  }
  // Only [rows, k] crosses the bus.
  void top_k(const float* logits, const float* row_offsets, int64_t rows, int64_t vocab, int64_t k,
             float* values, int32_t* ids) {
    const float* offsets = row_offsets != nullptr ? upload(row_offsets_input_, row_offsets, rows) : nullptr;
    float* top_values = static_cast<float*>(device_at(top_values_));
    int32_t* top_ids = static_cast<int32_t*>(device_at(top_ids_));
    cuda::log_softmax_top_k(logits, offsets, rows, vocab, k, top_values, top_ids, stream());
    const int64_t count = rows * k;
    float* values_host = static_cast<float*>(host_at(top_values_host_));
    int32_t* ids_host = static_cast<int32_t*>(host_at(top_ids_host_));
    XF_CUDA_CHECK(cudaMemcpyAsync(values_host, top_values, sizeof(float) * count, cudaMemcpyDeviceToHost, stream()));
    XF_CUDA_CHECK(cudaMemcpyAsync(ids_host, top_ids, sizeof(int32_t) * count, cudaMemcpyDeviceToHost, stream()));
    XF_CUDA_CHECK(cudaStreamSynchronize(stream()));
    std::copy(values_host, values_host + count, values);
    std::copy(ids_host, ids_host + count, ids);
  }
  void gather_rows(const T* src, int64_t src_stride, const int32_t* indices, int64_t count, int64_t len, T* dst,
                   int64_t dst_stride) {
    cuda::gather_rows(src, src_stride, indices, count, len, dst, dst_stride, stream());
  }
  // count blocks of `block` elements, `pitch` apart, from src to dst, in stream order.
  void copy_blocks(const T* src, T* dst, int64_t block, int64_t count, int64_t pitch) {
    XF_CUDA_CHECK(cudaMemcpy2DAsync(dst, sizeof(T) * pitch, src, sizeof(T) * pitch, sizeof(T) * block, count,
                                    cudaMemcpyDeviceToDevice, stream()));
  }
  template <typename U>
  void download(const U* values, int64_t count, float* out) const {
    std::vector<U> host(count);  // for tests: allocating here is fine
    XF_CUDA_CHECK(cudaMemcpyAsync(host.data(), values, sizeof(U) * count, cudaMemcpyDeviceToHost, stream()));
    XF_CUDA_CHECK(cudaStreamSynchronize(stream()));
    for (int64_t i = 0; i < count; ++i) out[i] = to_f32(host[i]);
  }

 private:
  static constexpr DType kDType = std::is_same_v<T, half> ? DType::f16 : DType::f32;

  const T* tensor(const std::string& name) { return static_cast<const T*>(weights_.get(name, kDType).data); }
  // Room for every tensor of the file in T (each is uploaded at most once in T) and for the
  // f32 copy of `f32_name` (or null).
  static size_t weight_bytes(const ModelFile& file, const char* f32_name) {
    size_t bytes = 0;
    for (const TensorView& t : file.tensors())
      bytes += cuda::align_up(t.elements() * sizeof(T), cuda::kArenaAlignment);
    if (f32_name != nullptr)
      bytes += cuda::align_up(file.tensor(f32_name).elements() * sizeof(float), cuda::kArenaAlignment);
    return bytes;
  }
  const void* upload_weight(const void* bytes, size_t size) {
    void* device = weight_arena_.allocate(size);
    XF_CUDA_CHECK(cudaMemcpy(device, bytes, size, cudaMemcpyHostToDevice));
    return device;
  }

  // A host input's pinned slot and device buffer. The event guards the pinned slot: it is
  // rewritten only once its previous copy has left.
  struct Staged {
    size_t device_offset = 0, host_offset = 0;
    void* device = nullptr;
    void* host = nullptr;
    std::unique_ptr<Event> copied;
  };

  cudaStream_t stream() const { return stream_.handle; }
  void* device_at(size_t offset) const { return static_cast<char*>(arena_->base()) + offset; }
  void* host_at(size_t offset) const { return static_cast<char*>(pinned_->data) + offset; }

  ModelConfig config_;
  const MemoryPlan& plan_;
  int device_;
  // Declared first, destroyed last: the arenas below are freed before the stream goes.
  Stream stream_;
  CublasHandle cublas_;
  cuda::DeviceArena weight_arena_;  // the weights, one allocation
  WeightStore weights_;
  ArenaLayout host_layout_;
  std::unique_ptr<cuda::DeviceArena> arena_;
  std::unique_ptr<PinnedBlock> pinned_;
  std::vector<Staged> staged_;
  size_t cublas_workspace_bytes_ = 0;
  // Offsets in the device arena and the pinned block.
  size_t cublas_workspace_ = 0, attention_workspace_ = 0, top_values_ = 0, top_ids_ = 0;
  size_t top_values_host_ = 0, top_ids_host_ = 0;
  Input row_offsets_input_ = 0;
};

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
  if (f16) return std::make_unique<TransformerBackend<CudaOps<half>>>(model, plan, device);
  return std::make_unique<TransformerBackend<CudaOps<float>>>(model, plan, device);
}

}  // namespace xf::runtime
