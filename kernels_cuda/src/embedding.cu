// Embedding: token rows scaled plus the position sinusoid, and its backward (atomic scatter-add).
#include <cmath>

#include "device_utils.cuh"
#include "xf/kernels/embedding.h"

namespace xf::cuda {
namespace {

// The sinusoid of PositionEncoding `encoding` at column c (config.h gives the formulas), as the
// CPU kernel computes it: in double, except Marian's layout, which Marian computes in float.
__device__ float sinusoid_at(int encoding, int64_t position, int64_t c, int64_t dim) {
  const double log_base = 9.210340371976184;  // ln(10000)
  if (encoding == static_cast<int>(PositionEncoding::interleaved)) {
    const int64_t even = c - (c % 2);
    const double angle = static_cast<double>(position) * exp(-log_base * static_cast<double>(even) / dim);
    return static_cast<float>(c % 2 == 0 ? sin(angle) : cos(angle));
  }
  const int64_t half = dim / 2;
  const int64_t i = c < half ? c : c - half;
  if (encoding == static_cast<int>(PositionEncoding::sin_then_cos)) {
    const double angle = static_cast<double>(position) / pow(10000.0, 2.0 * static_cast<double>(i) / dim);
    return static_cast<float>(c < half ? sin(angle) : cos(angle));
  }
  const float increment = logf(10000.0f) / (static_cast<float>(half) - 1.0f);
  const float angle = static_cast<float>(position) * expf(static_cast<float>(i) * -increment);
  return c < half ? sinf(angle) : cosf(angle);
}

template <typename TableT, typename OutT>
__global__ void embed_kernel(const TableT* table, int64_t vocab, int64_t dim, const int32_t* ids,
                             const int32_t* positions, float scale, int encoding, OutT* out) {
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  const bool valid_id = id >= 0 && id < vocab;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    const float sinusoid = sinusoid_at(encoding, positions[i], c, dim);
    const float value = valid_id ? scale * to_float(table[id * dim + c]) : 0.0f;
    out[i * dim + c] = from_float<OutT>(value + sinusoid);
  }
}

template <typename TableT, typename OutT>
void embed_impl(const TableT* table, int64_t vocab, int64_t dim, const int32_t* ids,
                const int32_t* positions, int64_t count, float scale, OutT* out,
                cudaStream_t stream, PositionEncoding encoding) {
  require(vocab > 0 && dim > 0 && count >= 0, "embed", "vocab and dim must be positive");
  if (count == 0) return;
  embed_kernel<<<grid_dim(count, "embed"), row_threads(dim), 0, stream>>>(
      table, vocab, dim, ids, positions, scale, static_cast<int>(encoding), out);
  XF_CUDA_CHECK_LAUNCH("embed_kernel");
}

// One block per token: its row of the table gets scale * dout added, atomically (tokens repeat).
__global__ void embedding_backward_kernel(const float* dout, const int32_t* ids, int64_t dim,
                                          int64_t vocab, float scale, float* dtable) {
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  if (id < 0 || id >= vocab) return;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
    atomicAdd(&dtable[static_cast<int64_t>(id) * dim + c], scale * dout[i * dim + c]);
}

}  // namespace

void embed(const float* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, float* out, cudaStream_t stream,
           PositionEncoding encoding) {
  embed_impl(table, vocab, dim, ids, positions, count, scale, out, stream, encoding);
}
void embed(const half* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, float* out, cudaStream_t stream,
           PositionEncoding encoding) {
  embed_impl(table, vocab, dim, ids, positions, count, scale, out, stream, encoding);
}
void embed(const half* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, half* out, cudaStream_t stream,
           PositionEncoding encoding) {
  embed_impl(table, vocab, dim, ids, positions, count, scale, out, stream, encoding);
}
void embed(const float* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, half* out, cudaStream_t stream,
           PositionEncoding encoding) {
  embed_impl(table, vocab, dim, ids, positions, count, scale, out, stream, encoding);
}

void embedding_backward(const float* dout, const int32_t* ids, int64_t count, int64_t dim,
                        int64_t vocab, float scale, float* dtable, cudaStream_t stream) {
  const char* name = "embedding_backward";
  require(count >= 0 && dim > 0 && vocab > 0, name, "count >= 0, dim > 0 and vocab > 0 needed");
  if (count == 0) return;
  embedding_backward_kernel<<<grid_dim(count, name), row_threads(dim), 0, stream>>>(
      dout, ids, dim, vocab, scale, dtable);
  XF_CUDA_CHECK_LAUNCH("embedding_backward_kernel");
}

}  // namespace xf::cuda
