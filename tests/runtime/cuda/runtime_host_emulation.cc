// A host emulation of the CUDA runtime calls and xf::cuda kernels that the runtime's CUDA
// backend (runtime/src/cuda_backend.cc) uses, so that the backend's own logic (buffer plan,
// offsets, strides, the split of Q/K/V into the cache, the beam reorder, staging) is tested on
// machines without a GPU: the xf_cuda_runtime_emulated_tests executable links this file instead
// ahead of libcudart, cuBLAS and xf_kernels_cuda (the linker takes a symbol from an object file
// before any library, and pulls an archive's object only for a symbol still undefined: every
// kernel the backend calls is defined here, so no family object of xf_kernels_cuda (one per
// kernels_cuda/src/<family>.cu, forward and backward together) is pulled; a kernel missing here
// would pull its family's object and fail the link with duplicate definitions of the others),
// and runs the same tests as xf_cuda_runtime_tests on the same compiled xf_runtime.
//
// Each emulated kernel follows its contract in xf/kernels/<family>.h (mostly by calling the
// CPU kernel it mirrors), reads and writes f16 buffers through f32 exactly as the CUDA kernels
// do (f32 arithmetic, one rounding at the store), and checks that every span it touches lies
// inside one emulated device allocation. Each runs marked as a library call (xf/library_call.h):
// it stands for work on the device, so the host allocations it makes are not xf's (the
// allocation test asserts none by xf's own code on the decoding thread). Work runs at once, in call order: what this cannot
// show is anything about asynchrony (stream order, pinned buffer reuse) or the real kernels'
// numerics, which the GPU run of xf_cuda_runtime_tests covers.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/gather.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels/recurrent.h"
#include "xf/kernels/softmax.h"
#include "xf/library_call.h"

namespace {

// ---- emulated allocations and their bounds ----------------------------------------------------

std::mutex g_mutex;
std::map<const char*, size_t> g_allocations;  // base -> bytes, device and pinned alike

void* emulated_alloc(size_t bytes) {
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (p == nullptr) return nullptr;
  std::memset(p, 0xFF, bytes);  // NaN-ish garbage, as fresh device memory may hold anything
  std::lock_guard<std::mutex> lock(g_mutex);
  g_allocations[static_cast<const char*>(p)] = bytes;
  return p;
}

bool emulated_free(void* p) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_allocations.find(static_cast<const char*>(p));
  if (it == g_allocations.end()) return false;
  g_allocations.erase(it);
  std::free(p);
  return true;
}

// Throws unless [p, p + bytes) lies inside one emulated allocation.
void check_span(const void* p, size_t bytes, const char* what) {
  if (bytes == 0) return;
  const char* begin = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_allocations.upper_bound(begin);
  if (it == g_allocations.begin() || begin < std::prev(it)->first ||
      begin + bytes > std::prev(it)->first + std::prev(it)->second)
    throw xf::Error(std::string("emulated GPU: ") + what + " touches " + std::to_string(bytes) +
                    " bytes outside any device allocation");
}

// Bytes spanned by a [batch, heads, len, head_dim] view of T with these strides.
template <typename T>
size_t view_bytes(const xf::cuda::HeadStrides& s, int64_t batch, int64_t heads, int64_t len,
                  int64_t head_dim) {
  if (batch == 0 || heads == 0 || len == 0) return 0;
  return sizeof(T) * static_cast<size_t>((batch - 1) * s.batch + (heads - 1) * s.head +
                                         (len - 1) * s.position + head_dim);
}

float to_float(float v) { return v; }
float to_float(__half v) { return xf::half_to_float(static_cast<__half_raw>(v).x); }
template <typename T>
T from_float(float v);
template <>
float from_float<float>(float v) {
  return v;
}
template <>
__half from_float<__half>(float v) {
  __half_raw raw;
  raw.x = xf::float_to_half(v);
  return __half(raw);
}

template <typename T>
std::vector<float> widen(const T* p, int64_t count) {
  std::vector<float> out(static_cast<size_t>(std::max<int64_t>(count, 0)));
  if (p == nullptr) return out;
  for (int64_t i = 0; i < count; ++i) out[i] = to_float(p[i]);
  return out;
}
template <typename T>
void narrow(const std::vector<float>& values, T* out) {
  for (size_t i = 0; i < values.size(); ++i) out[i] = from_float<T>(values[i]);
}

int g_dummy_object;  // streams, events and handles point here

}  // namespace

// ---- the CUDA runtime and cuBLAS calls the backend makes -------------------------------------

extern "C" {

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = emulated_alloc(bytes);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  return emulated_free(p) ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) check_span(dst, bytes, "a copy's destination");
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) check_span(src, bytes, "a copy's source");
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                              size_t height, cudaMemcpyKind kind, cudaStream_t) {
  if (width > dst_pitch || width > src_pitch) return cudaErrorInvalidPitchValue;
  for (size_t row = 0; row < height; ++row) {
    const cudaError_t status = cudaMemcpy(static_cast<char*>(dst) + row * dst_pitch,
                                          static_cast<const char*>(src) + row * src_pitch, width, kind);
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = size_t{1} << 30;  // an emulated device of 2 GiB, half in use
  *total_bytes = size_t{2} << 30;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "emulated error"; }
const char* cudaGetErrorName(cudaError_t) { return "cudaErrorEmulated"; }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = reinterpret_cast<cudaStream_t>(&g_dummy_object);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = reinterpret_cast<cudaEvent_t>(&g_dummy_object);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = reinterpret_cast<cublasHandle_t>(&g_dummy_object);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }

}  // extern "C"

// ---- xf::cuda ---------------------------------------------------------------------------------

namespace xf::cuda {

size_t recommended_cublas_workspace_bytes(int) { return size_t{4} << 20; }

void bind_cublas_handle(cublasHandle_t handle, cudaStream_t stream, void* workspace, size_t workspace_bytes) {
  if (handle == nullptr || stream == nullptr) throw Error("emulated bind_cublas_handle: null handle or stream");
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0) throw Error("emulated bind_cublas_handle: workspace not 256-byte aligned");
  check_span(workspace, workspace_bytes, "the cuBLAS workspace");
}

namespace {

// y[m, n] = x[m, k] w[n, k]^T, f32 accumulation as cuBLAS with CUBLAS_COMPUTE_32F.
template <typename In, typename Out>
void emulated_matmul(const In* x, const In* w, Out* y, int64_t m, int64_t n, int64_t k) {
  const LibraryCallScope device;  // the device's work: its host stand-in may allocate
  check_span(x, sizeof(In) * m * k, "matmul x");
  check_span(w, sizeof(In) * n * k, "matmul w");
  check_span(y, sizeof(Out) * m * n, "matmul y");
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int64_t l = 0; l < k; ++l) sum += to_float(x[i * k + l]) * to_float(w[j * k + l]);
      y[i * n + j] = from_float<Out>(sum);
    }
}

template <typename T>
void emulated_embed(const T* table, int64_t vocab, int64_t dim, const int32_t* ids, const int32_t* positions,
                    int64_t count, float scale, T* out, PositionEncoding encoding) {
  const LibraryCallScope device;  // the device's work: its host stand-in may allocate
  check_span(table, sizeof(T) * vocab * dim, "embed table");
  check_span(ids, sizeof(int32_t) * count, "embed ids");
  check_span(positions, sizeof(int32_t) * count, "embed positions");
  check_span(out, sizeof(T) * count * dim, "embed out");
  const std::vector<float> wide = widen(table, vocab * dim);
  cpu::WeightMatrix matrix;
  matrix.data = wide.data();
  matrix.rows = vocab;
  matrix.cols = dim;
  std::vector<float> result(count * dim);
  cpu::embed(matrix, ids, positions, count, scale, result.data(), 1, encoding);
  narrow(result, out);
}

template <typename T>
void emulated_layer_norm(const T* x, const T* bias, const T* residual, const T* gamma, const T* beta,
                         float epsilon, int64_t rows, int64_t dim, T* out, float* mean, float* rstd) {
  const LibraryCallScope device;  // the device's work: its host stand-in may allocate
  check_span(x, sizeof(T) * rows * dim, "layer_norm x");
  if (bias != nullptr) check_span(bias, sizeof(T) * dim, "layer_norm bias");
  if (residual != nullptr) check_span(residual, sizeof(T) * rows * dim, "layer_norm residual");
  check_span(gamma, sizeof(T) * dim, "layer_norm gamma");
  check_span(beta, sizeof(T) * dim, "layer_norm beta");
  check_span(out, sizeof(T) * rows * dim, "layer_norm out");
  if (mean != nullptr) check_span(mean, sizeof(float) * rows, "layer_norm mean");
  if (rstd != nullptr) check_span(rstd, sizeof(float) * rows, "layer_norm rstd");
  const std::vector<float> wx = widen(x, rows * dim), wb = widen(bias, dim), wr = widen(residual, rows * dim),
                           wg = widen(gamma, dim), wbeta = widen(beta, dim);
  std::vector<float> result(rows * dim);
  cpu::add_bias_residual_layer_norm(wx.data(), bias ? wb.data() : nullptr, residual ? wr.data() : nullptr,
                                    wg.data(), wbeta.data(), epsilon, rows, dim, result.data(), mean,
                                    rstd, 1);
  narrow(result, out);
}

template <typename T>
void emulated_add_bias_residual(T* x, const T* bias, const T* residual, int64_t rows, int64_t dim) {
  const LibraryCallScope device;  // the device's work: its host stand-in may allocate
  check_span(x, sizeof(T) * rows * dim, "add_bias_residual x");
  if (bias != nullptr) check_span(bias, sizeof(T) * dim, "add_bias_residual bias");
  if (residual != nullptr) check_span(residual, sizeof(T) * rows * dim, "add_bias_residual residual");
  for (int64_t i = 0; i < rows * dim; ++i) {
    float value = to_float(x[i]);
    if (bias != nullptr) value += to_float(bias[i % dim]);
    if (residual != nullptr) value += to_float(residual[i]);
    x[i] = from_float<T>(value);
  }
}

template <typename T>
void emulated_bias_relu(T* x, const T* bias, int64_t rows, int64_t dim) {
  const LibraryCallScope device;  // the device's work: its host stand-in may allocate
  check_span(x, sizeof(T) * rows * dim, "bias_relu x");
  if (bias != nullptr) check_span(bias, sizeof(T) * dim, "bias_relu bias");
  for (int64_t i = 0; i < rows * dim; ++i) {
    float value = to_float(x[i]);
    if (bias != nullptr) value += to_float(bias[i % dim]);
    x[i] = from_float<T>(std::max(value, 0.0f));
  }
}

template <typename T>
void emulated_bias_activation(T* x, const T* bias, int64_t rows, int64_t dim, Activation activation) {
  const LibraryCallScope device;  // the device's work: its host stand-in may allocate
  check_span(x, sizeof(T) * rows * dim, "bias_activation x");
  if (bias != nullptr) check_span(bias, sizeof(T) * dim, "bias_activation bias");
  std::vector<float> wide = widen(x, rows * dim);
  const std::vector<float> wide_bias = widen(bias, dim);
  cpu::bias_activation(wide.data(), bias ? wide_bias.data() : nullptr, rows, dim, activation, 1);
  narrow(wide, x);
}

template <typename T>
void emulated_ssru_step(const T* in, T* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
                        T* out) {
  const LibraryCallScope device;  // the device's work: its host stand-in may allocate
  if (rows == 0) return;
  check_span(in, sizeof(T) * rows * 2 * dim, "ssru_step in");
  check_span(out, sizeof(T) * rows * dim, "ssru_step out");
  if (state_rows != nullptr) check_span(state_rows, sizeof(int32_t) * rows, "ssru_step state_rows");
  for (int64_t r = 0; r < rows; ++r) {
    T* c = cell + (state_rows != nullptr ? state_rows[r] : r) * dim;
    check_span(c, sizeof(T) * dim, "ssru_step cell row");
    std::vector<float> wide_cell = first ? std::vector<float>(dim, 0.0f) : widen(c, dim);
    const std::vector<float> wide_in = widen(in + r * 2 * dim, 2 * dim);
    std::vector<float> wide_out(dim);
    cpu::ssru_step(wide_in.data(), wide_cell.data(), nullptr, false, 1, dim, wide_out.data(), 1);
    narrow(wide_cell, c);
    narrow(wide_out, out + r * dim);
  }
}

template <typename T>
void emulated_split_heads(const T* packed, int64_t packed_stride, const T* bias, int parts, int64_t batch,
                          int64_t len, int64_t heads, int64_t head_dim, const SplitHeadsOutputs<T>& outputs,
                          int64_t position_offset) {
  const LibraryCallScope device;  // the device's work: its host stand-in may allocate
  const int64_t d_model = heads * head_dim;
  if (parts < 1 || parts > 3 || packed_stride < parts * d_model) throw Error("emulated add_bias_split_heads: bad shape");
  check_span(packed, sizeof(T) * ((batch * len - 1) * packed_stride + parts * d_model), "split_heads packed");
  if (bias != nullptr) check_span(bias, sizeof(T) * parts * d_model, "split_heads bias");
  for (int p = 0; p < parts; ++p) {
    const HeadStrides& s = outputs.strides[p];
    // The view's extent at positions position_offset .. position_offset + len - 1.
    const int64_t last = (batch - 1) * s.batch + (heads - 1) * s.head + (position_offset + len - 1) * s.position +
                         head_dim;
    check_span(outputs.data[p], sizeof(T) * last, "split_heads output");
  }
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < len; ++i)
      for (int p = 0; p < parts; ++p)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t d = 0; d < head_dim; ++d) {
            const int64_t column = p * d_model + h * head_dim + d;
            float value = to_float(packed[(b * len + i) * packed_stride + column]);
            if (bias != nullptr) value += to_float(bias[column]);
            const HeadStrides& s = outputs.strides[p];
            outputs.data[p][b * s.batch + h * s.head + (position_offset + i) * s.position + d] = from_float<T>(value);
          }
}

// Through f32 copies of the spans (out's span too, so what attention leaves alone stays).
template <typename T>
void emulated_attention(const T* q, HeadStrides q_strides, const T* k, HeadStrides k_strides, const T* v,
                        HeadStrides v_strides, T* out, HeadStrides out_strides, const AttentionShape& shape,
                        const int32_t* key_lengths, int64_t causal_offset, float* probabilities = nullptr) {
  const LibraryCallScope device;  // the device's work: its host stand-in may allocate
  if (shape.key_len > max_attention_key_len()) throw Error("emulated attention: key_len beyond the limit");
  const size_t q_bytes = view_bytes<T>(q_strides, shape.batch, shape.heads, shape.query_len, shape.head_dim);
  const size_t k_bytes = view_bytes<T>(k_strides, shape.batch, shape.heads, shape.key_len, shape.head_dim);
  const size_t v_bytes = view_bytes<T>(v_strides, shape.batch, shape.heads, shape.key_len, shape.head_dim);
  const size_t out_bytes = view_bytes<T>(out_strides, shape.batch, shape.heads, shape.query_len, shape.head_dim);
  check_span(q, q_bytes, "attention q");
  check_span(k, k_bytes, "attention k");
  check_span(v, v_bytes, "attention v");
  check_span(out, out_bytes, "attention out");
  if (key_lengths != nullptr) check_span(key_lengths, sizeof(int32_t) * shape.batch, "attention key_lengths");
  if (probabilities != nullptr)  // the trainer keeps them for its backward pass
    check_span(probabilities,
               sizeof(float) * shape.batch * shape.heads * shape.query_len * shape.key_len,
               "attention probabilities");
  const std::vector<float> wq = widen(q, q_bytes / sizeof(T)), wk = widen(k, k_bytes / sizeof(T)),
                           wv = widen(v, v_bytes / sizeof(T));
  std::vector<float> result = widen(out, out_bytes / sizeof(T));
  std::vector<float> scratch(std::max<int64_t>(shape.key_len, 1));
  cpu::attention(wq.data(), q_strides, wk.data(), k_strides, wv.data(), v_strides, result.data(), out_strides,
                 shape, key_lengths, causal_offset, probabilities, scratch.data(), 1);
  narrow(result, out);
}

constexpr int64_t kCachedChunk = 256;  // as attention.cu: longer caches need the workspace

template <typename T>
void emulated_cached_attention(const T* q, int64_t q_row_stride, const T* k_cache, const T* v_cache,
                               HeadStrides cache_strides, int64_t rows, int64_t heads, int64_t head_dim,
                               int64_t max_len, int64_t step, T* out, int64_t out_row_stride, void* workspace) {
  const LibraryCallScope device;  // the device's work: its host stand-in may allocate
  if (step < 0 || step >= max_len) throw Error("emulated cached_attention: step outside the cache");
  if (q_row_stride < heads * head_dim || out_row_stride < heads * head_dim)
    throw Error("emulated cached_attention: row stride below heads * head_dim");
  if (step + 1 > kCachedChunk) {
    if (workspace == nullptr) throw Error("emulated cached_attention: a cache this long needs the workspace");
    const int64_t chunks = (step + kCachedChunk) / kCachedChunk;
    check_span(workspace, sizeof(float) * rows * heads * chunks * (head_dim + 2), "cached_attention workspace");
  }
  // Positions past `step` hold nothing yet: the whole cache's extent must still be in bounds.
  check_span(k_cache, view_bytes<T>(cache_strides, rows, heads, max_len, head_dim), "cached_attention k_cache");
  check_span(v_cache, view_bytes<T>(cache_strides, rows, heads, max_len, head_dim), "cached_attention v_cache");
  const AttentionShape shape{rows, heads, 1, step + 1, head_dim};
  emulated_attention(q, HeadStrides{q_row_stride, head_dim, 0}, k_cache, cache_strides, v_cache, cache_strides,
                     out, HeadStrides{out_row_stride, head_dim, 0}, shape, nullptr, -1);
}

template <typename T>
void emulated_gather_rows(const T* src, int64_t src_stride, const int32_t* indices, int64_t count, int64_t row_len,
                          T* dst, int64_t dst_stride) {
  const LibraryCallScope device;  // the device's work: its host stand-in may allocate
  if (count == 0 || row_len == 0) return;
  check_span(indices, sizeof(int32_t) * count, "gather_rows indices");
  check_span(dst, sizeof(T) * ((count - 1) * dst_stride + row_len), "gather_rows dst");
  for (int64_t i = 0; i < count; ++i) {
    check_span(src + indices[i] * src_stride, sizeof(T) * row_len, "gather_rows src row");
    std::copy_n(src + indices[i] * src_stride, row_len, dst + i * dst_stride);
  }
}

}  // namespace

void matmul(cublasHandle_t, const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k) {
  emulated_matmul(x, w, y, m, n, k);
}
void matmul(cublasHandle_t, const __half* x, const __half* w, __half* y, int64_t m, int64_t n, int64_t k) {
  emulated_matmul(x, w, y, m, n, k);
}
void matmul(cublasHandle_t, const __half* x, const __half* w, float* y, int64_t m, int64_t n, int64_t k) {
  emulated_matmul(x, w, y, m, n, k);
}

void embed(const float* table, int64_t vocab, int64_t dim, const int32_t* ids, const int32_t* positions,
           int64_t count, float scale, float* out, cudaStream_t, PositionEncoding encoding) {
  emulated_embed(table, vocab, dim, ids, positions, count, scale, out, encoding);
}
void embed(const half* table, int64_t vocab, int64_t dim, const int32_t* ids, const int32_t* positions,
           int64_t count, float scale, half* out, cudaStream_t, PositionEncoding encoding) {
  emulated_embed(table, vocab, dim, ids, positions, count, scale, out, encoding);
}

void add_bias_residual_layer_norm(const float* x, const float* bias, const float* residual, const float* gamma,
                                  const float* beta, float epsilon, int64_t rows, int64_t dim, float* out,
                                  float* mean, float* rstd, cudaStream_t) {
  emulated_layer_norm(x, bias, residual, gamma, beta, epsilon, rows, dim, out, mean, rstd);
}
void add_bias_residual_layer_norm(const half* x, const half* bias, const half* residual, const half* gamma,
                                  const half* beta, float epsilon, int64_t rows, int64_t dim, half* out, float* mean,
                                  float* rstd, cudaStream_t) {
  emulated_layer_norm(x, bias, residual, gamma, beta, epsilon, rows, dim, out, mean, rstd);
}

void add_bias_residual(float* x, const float* bias, const float* residual, int64_t rows, int64_t dim, cudaStream_t) {
  emulated_add_bias_residual(x, bias, residual, rows, dim);
}
void add_bias_residual(half* x, const half* bias, const half* residual, int64_t rows, int64_t dim, cudaStream_t) {
  emulated_add_bias_residual(x, bias, residual, rows, dim);
}

void bias_relu(float* x, const float* bias, int64_t rows, int64_t dim, cudaStream_t) {
  emulated_bias_relu(x, bias, rows, dim);
}
void bias_relu(half* x, const half* bias, int64_t rows, int64_t dim, cudaStream_t) {
  emulated_bias_relu(x, bias, rows, dim);
}
void bias_activation(float* x, const float* bias, int64_t rows, int64_t dim, Activation activation,
                     cudaStream_t) {
  emulated_bias_activation(x, bias, rows, dim, activation);
}
void bias_activation(half* x, const half* bias, int64_t rows, int64_t dim, Activation activation,
                     cudaStream_t) {
  emulated_bias_activation(x, bias, rows, dim, activation);
}

void add_bias_split_heads(const float* packed, int64_t packed_stride, const float* bias, int parts, int64_t batch,
                          int64_t len, int64_t heads, int64_t head_dim, const SplitHeadsOutputs<float>& outputs,
                          int64_t position_offset, cudaStream_t) {
  emulated_split_heads(packed, packed_stride, bias, parts, batch, len, heads, head_dim, outputs, position_offset);
}
void add_bias_split_heads(const half* packed, int64_t packed_stride, const half* bias, int parts, int64_t batch,
                          int64_t len, int64_t heads, int64_t head_dim, const SplitHeadsOutputs<half>& outputs,
                          int64_t position_offset, cudaStream_t) {
  emulated_split_heads(packed, packed_stride, bias, parts, batch, len, heads, head_dim, outputs, position_offset);
}

void attention(const float* q, HeadStrides q_strides, const float* k, HeadStrides k_strides, const float* v,
               HeadStrides v_strides, float* out, HeadStrides out_strides, const AttentionShape& shape,
               const int32_t* key_lengths, int64_t causal_offset, float* probabilities, cudaStream_t) {
  emulated_attention(q, q_strides, k, k_strides, v, v_strides, out, out_strides, shape, key_lengths, causal_offset,
                     probabilities);
}
void attention(const half* q, HeadStrides q_strides, const half* k, HeadStrides k_strides, const half* v,
               HeadStrides v_strides, half* out, HeadStrides out_strides, const AttentionShape& shape,
               const int32_t* key_lengths, int64_t causal_offset, float* probabilities, cudaStream_t) {
  emulated_attention(q, q_strides, k, k_strides, v, v_strides, out, out_strides, shape, key_lengths, causal_offset,
                     probabilities);
}
int64_t max_attention_key_len() { return 12 * 1024 - 1024; }  // as attention.cu

void cached_attention(const float* q, int64_t q_row_stride, const float* k_cache, const float* v_cache,
                      HeadStrides cache_strides, int64_t rows, int64_t heads, int64_t head_dim, int64_t max_len,
                      int64_t step, float* out, int64_t out_row_stride, void* workspace, cudaStream_t) {
  emulated_cached_attention(q, q_row_stride, k_cache, v_cache, cache_strides, rows, heads, head_dim, max_len, step,
                            out, out_row_stride, workspace);
}
void cached_attention(const half* q, int64_t q_row_stride, const half* k_cache, const half* v_cache,
                      HeadStrides cache_strides, int64_t rows, int64_t heads, int64_t head_dim, int64_t max_len,
                      int64_t step, half* out, int64_t out_row_stride, void* workspace, cudaStream_t) {
  emulated_cached_attention(q, q_row_stride, k_cache, v_cache, cache_strides, rows, heads, head_dim, max_len, step,
                            out, out_row_stride, workspace);
}
size_t cached_attention_workspace_bytes(int64_t rows, int64_t heads, int64_t head_dim, int64_t max_len) {
  const int64_t chunks = (max_len + kCachedChunk - 1) / kCachedChunk;
  return chunks <= 1 ? 0 : static_cast<size_t>(rows * heads * chunks * (head_dim + 2)) * sizeof(float);
}

void log_softmax_top_k(const float* logits, const float* row_offsets, int64_t rows, int64_t vocab, int64_t k,
                       float* top_values, int32_t* top_indices, cudaStream_t) {
  const LibraryCallScope device;  // the device's work: its host stand-in may allocate
  if (k < 1 || k > kMaxTopK || k > vocab) throw Error("emulated log_softmax_top_k: k outside 1..16");
  check_span(logits, sizeof(float) * rows * vocab, "log_softmax_top_k logits");
  if (row_offsets != nullptr) check_span(row_offsets, sizeof(float) * rows, "log_softmax_top_k row_offsets");
  check_span(top_values, sizeof(float) * rows * k, "log_softmax_top_k values");
  check_span(top_indices, sizeof(int32_t) * rows * k, "log_softmax_top_k indices");
  cpu::log_softmax_top_k(logits, row_offsets, rows, vocab, k, top_values, top_indices, 1);
}

void ssru_step(const float* in, float* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               float* out, cudaStream_t) {
  emulated_ssru_step(in, cell, state_rows, first, rows, dim, out);
}
void ssru_step(const half* in, half* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               half* out, cudaStream_t) {
  emulated_ssru_step(in, cell, state_rows, first, rows, dim, out);
}

void gather_rows(const float* src, int64_t src_stride, const int32_t* indices, int64_t count, int64_t row_len,
                 float* dst, int64_t dst_stride, cudaStream_t) {
  emulated_gather_rows(src, src_stride, indices, count, row_len, dst, dst_stride);
}
void gather_rows(const half* src, int64_t src_stride, const int32_t* indices, int64_t count, int64_t row_len,
                 half* dst, int64_t dst_stride, cudaStream_t) {
  emulated_gather_rows(src, src_stride, indices, count, row_len, dst, dst_stride);
}

}  // namespace xf::cuda
