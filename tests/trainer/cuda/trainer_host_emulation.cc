// A host emulation of what the CUDA trainer (trainer/cuda/src/cuda_model.cc) calls, so that its
// own logic (the activation plan, offsets and strides, which buffers accumulate, dropout sites,
// the loss-scale bookkeeping, Adam's constants, host/device copies) runs against the CPU model on
// machines without a GPU: xf_cuda_trainer_emulated_tests links this file ahead of libcudart,
// cuBLAS and xf_kernels_cuda and runs trainer_model_test.cc on the same compiled
// xf_trainer_cuda. Test names start with host_emulated.
//
// It extends the runtime's emulation (tests/runtime/cuda/runtime_host_emulation.cc, compiled into
// this translation unit for its allocation table, span checks and forward kernels) with the
// trainer's calls:
// each emulated kernel follows its contract in xf/kernels/<family>.h, mostly by calling the
// CPU trainer's float kernel it mirrors, checks the spans it touches, and runs at once. What this
// cannot show is anything about the real kernels' numerics or asynchrony, which the GPU run of
// xf_cuda_trainer_tests covers.
#include "runtime_host_emulation.cc"  // NOLINT: one translation unit, shared allocation table

#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/dropout.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels/optimizer.h"
#include "xf/kernels/recurrent.h"
#include "xf/kernels/softmax.h"

extern "C" {

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) {
  check_span(p, bytes, "a memset");
  std::memset(p, value, bytes);
  return cudaSuccess;
}

// cuda_runtime_api.h may rename this one (cudaGetDeviceProperties_v2): defined through its name.
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  *properties = cudaDeviceProp{};
  std::strcpy(properties->name, "emulated GPU");
  return cudaSuccess;
}

}  // extern "C"

namespace xf::cuda {
namespace {

bool kept(const DropoutRule& rule, int64_t index) {
  return dropout_hash::keeps(rule.stream, rule.threshold, index);
}

// The rows x dim span a row-major buffer covers.
void check_rows(const void* p, int64_t rows, int64_t dim, size_t element, const char* what) {
  check_span(p, element * static_cast<size_t>(rows * dim), what);
}

// Bytes of a row-major operand with `rows` rows of `cols` used columns and row stride ld.
size_t operand_bytes(int64_t rows, int64_t cols, int64_t ld, size_t element) {
  if (rows == 0 || cols == 0) return 0;
  return element * static_cast<size_t>((rows - 1) * ld + cols);
}

template <typename In>
void emulated_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const In* a,
                   int64_t lda, const In* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  check_span(a, operand_bytes(ta ? k : m, ta ? m : k, lda, sizeof(In)), "gemm A");
  check_span(b, operand_bytes(tb ? n : k, tb ? k : n, ldb, sizeof(In)), "gemm B");
  check_span(c, operand_bytes(m, n, ldc, sizeof(float)), "gemm C");
  const std::vector<float> a32 = widen(a, static_cast<int64_t>(operand_bytes(ta ? k : m, ta ? m : k, lda, 1)));
  const std::vector<float> b32 = widen(b, static_cast<int64_t>(operand_bytes(tb ? n : k, tb ? k : n, ldb, 1)));
  cpu::gemm(ta, tb, m, n, k, alpha, a32.data(), lda, b32.data(), ldb, beta, c, ldc);
}

}  // namespace

DropoutRule make_dropout_rule(uint64_t seed, uint64_t site, float p) {
  if (!(p >= 0.0f && p < 1.0f)) throw Error("emulated make_dropout_rule: p outside [0, 1)");
  DropoutRule rule;
  rule.stream = dropout_hash::site_stream(seed, site);
  rule.threshold = dropout_hash::threshold(p);
  rule.scale = static_cast<float>(1.0 / (1.0 - static_cast<double>(p)));
  return rule;
}

void dropout(float* x, int64_t count, const DropoutRule& rule, cudaStream_t) {
  if (rule.threshold == 0) return;
  check_span(x, sizeof(float) * count, "dropout x");
  for (int64_t i = 0; i < count; ++i) x[i] = kept(rule, i) ? x[i] * rule.scale : 0.0f;
}

void gemm(cublasHandle_t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  emulated_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(cublasHandle_t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
          const __half* a, int64_t lda, const __half* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  emulated_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// As layer_norm.cu plans it: [chunks, 2 * dim].
size_t column_reduction_workspace_floats(int64_t rows, int64_t dim) {
  const int64_t chunks = std::min<int64_t>(128, std::max<int64_t>(1, (rows + 15) / 16));
  return static_cast<size_t>(chunks * 2 * dim);
}

void layer_norm_backward(const float* dout, const float* x, const float* mean, const float* rstd,
                         const float* gamma, int64_t rows, int64_t dim, float* dx, float* dgamma,
                         float* dbeta, float* workspace, cudaStream_t) {
  for (const float* p : {dout, x, static_cast<const float*>(dx)})
    check_rows(p, rows, dim, sizeof(float), "layer_norm_backward row buffer");
  for (const float* p : {mean, rstd}) check_rows(p, rows, 1, sizeof(float), "layer_norm_backward statistics");
  for (const float* p : {gamma, static_cast<const float*>(dgamma), static_cast<const float*>(dbeta)})
    check_rows(p, 1, dim, sizeof(float), "layer_norm_backward parameter");
  check_span(workspace, sizeof(float) * column_reduction_workspace_floats(rows, dim), "workspace");
  cpu::layer_norm_backward<float>(dout, x, mean, rstd, gamma, rows, dim, dx, dgamma, dbeta, 1);
}

void bias_backward(const float* dy, int64_t rows, int64_t dim, float* dbias, float* workspace,
                   cudaStream_t) {
  check_rows(dy, rows, dim, sizeof(float), "bias_backward dy");
  check_rows(dbias, 1, dim, sizeof(float), "bias_backward dbias");
  check_span(workspace, sizeof(float) * column_reduction_workspace_floats(rows, dim), "workspace");
  cpu::bias_backward<float>(dy, rows, dim, dbias, 1);
}

void bias_relu_backward(float* dy, const float* y, int64_t rows, int64_t dim, float* dbias,
                        float* workspace, cudaStream_t stream) {
  check_rows(dy, rows, dim, sizeof(float), "bias_relu_backward dy");
  check_rows(y, rows, dim, sizeof(float), "bias_relu_backward y");
  cpu::bias_relu_backward<float>(dy, y, rows, dim, nullptr, 1);
  if (dbias != nullptr) bias_backward(dy, rows, dim, dbias, workspace, stream);
}

void ssru_scan_forward(const float* x, const float* f, int64_t in_stride, int64_t batch, int64_t len, int64_t dim,
                       float* cell, float* out, cudaStream_t) {
  for (const float* p : {x, f})
    check_span(p, operand_bytes(batch * len, dim, in_stride, sizeof(float)), "ssru_scan_forward x, f");
  check_rows(cell, batch * len, dim, sizeof(float), "ssru_scan_forward cell");
  check_rows(out, batch * len, dim, sizeof(float), "ssru_scan_forward out");
  cpu::ssru_scan_forward<float>(x, f, in_stride, batch, len, dim, cell, out, 1);
}

void ssru_scan_backward(const float* dout, const float* x, const float* f, int64_t in_stride, const float* cell,
                        int64_t batch, int64_t len, int64_t dim, float* dx, float* df, int64_t d_stride,
                        cudaStream_t) {
  check_rows(dout, batch * len, dim, sizeof(float), "ssru_scan_backward dout");
  check_rows(cell, batch * len, dim, sizeof(float), "ssru_scan_backward cell");
  for (const float* p : {x, f})
    check_span(p, operand_bytes(batch * len, dim, in_stride, sizeof(float)), "ssru_scan_backward x, f");
  for (const float* p : {dx, df})
    check_span(p, operand_bytes(batch * len, dim, d_stride, sizeof(float)), "ssru_scan_backward dx, df");
  cpu::ssru_scan_backward<float>(dout, x, f, in_stride, cell, batch, len, dim, dx, df, d_stride, 1);
}

void embedding_backward(const float* dout, const int32_t* ids, int64_t count, int64_t dim,
                        int64_t vocab, float scale, float* dtable, cudaStream_t) {
  check_rows(dout, count, dim, sizeof(float), "embedding_backward dout");
  check_rows(ids, count, 1, sizeof(int32_t), "embedding_backward ids");
  check_rows(dtable, vocab, dim, sizeof(float), "embedding_backward table");
  cpu::embedding_backward<float>(dout, ids, count, dim, scale, dtable, 1);
}

size_t attention_backward_workspace_floats(const AttentionShape& shape) {
  return static_cast<size_t>(shape.batch * shape.heads * shape.query_len * shape.key_len);
}

void attention_backward(const float* dout, HeadStrides dout_strides, const float* q,
                        HeadStrides q_strides, const float* k, HeadStrides k_strides,
                        const float* v, HeadStrides v_strides, const float* probabilities,
                        const DropoutRule* dropout, float* dq, HeadStrides dq_strides, float* dk,
                        HeadStrides dk_strides, float* dv, HeadStrides dv_strides,
                        const AttentionShape& shape, float* workspace, cudaStream_t) {
  const int64_t b = shape.batch, h = shape.heads, tq = shape.query_len, tk = shape.key_len,
                dh = shape.head_dim;
  check_span(dout, view_bytes<float>(dout_strides, b, h, tq, dh), "attention_backward dout");
  check_span(q, view_bytes<float>(q_strides, b, h, tq, dh), "attention_backward q");
  check_span(dq, view_bytes<float>(dq_strides, b, h, tq, dh), "attention_backward dq");
  check_span(k, view_bytes<float>(k_strides, b, h, tk, dh), "attention_backward k");
  check_span(v, view_bytes<float>(v_strides, b, h, tk, dh), "attention_backward v");
  check_span(dk, view_bytes<float>(dk_strides, b, h, tk, dh), "attention_backward dk");
  check_span(dv, view_bytes<float>(dv_strides, b, h, tk, dh), "attention_backward dv");
  const size_t scores = attention_backward_workspace_floats(shape);
  check_span(probabilities, sizeof(float) * scores, "attention_backward probabilities");
  check_span(workspace, sizeof(float) * scores, "attention_backward workspace");
  const bool has_dropout = dropout != nullptr && dropout->threshold != 0;
  std::vector<uint8_t> mask(has_dropout ? scores : 0);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = kept(*dropout, static_cast<int64_t>(i));
  std::vector<float> scratch(static_cast<size_t>(2 * tk));
  cpu::attention_backward<float>(dout, dout_strides, q, q_strides, k, k_strides, v, v_strides,
                                 probabilities, has_dropout ? mask.data() : nullptr,
                                 has_dropout ? dropout->scale : 1.0f, dq, dq_strides, dk,
                                 dk_strides, dv, dv_strides, shape, scratch.data(), 1);
}

void attention_dropout_values(const float* probabilities, const DropoutRule& dropout,
                              const float* v, HeadStrides v_strides, float* out,
                              HeadStrides out_strides, const AttentionShape& shape,
                              cudaStream_t) {
  const int64_t tq = shape.query_len, tk = shape.key_len, dh = shape.head_dim;
  check_span(probabilities, sizeof(float) * attention_backward_workspace_floats(shape), "P");
  check_span(v, view_bytes<float>(v_strides, shape.batch, shape.heads, tk, dh), "values");
  check_span(out, view_bytes<float>(out_strides, shape.batch, shape.heads, tq, dh), "output");
  for (int64_t b = 0; b < shape.batch; ++b)
    for (int64_t h = 0; h < shape.heads; ++h)
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t row = (b * shape.heads + h) * tq + i;
        float* o = out + b * out_strides.batch + h * out_strides.head + i * out_strides.position;
        std::fill(o, o + dh, 0.0f);
        for (int64_t j = 0; j < tk; ++j) {
          const float w = probabilities[row * tk + j] *
                          (kept(dropout, row * tk + j) ? dropout.scale : 0.0f);
          const float* vj = v + b * v_strides.batch + h * v_strides.head + j * v_strides.position;
          for (int64_t c = 0; c < dh; ++c) o[c] += w * vj[c];
        }
      }
}

void label_smoothed_cross_entropy(float* logits, const int32_t* targets, int64_t rows,
                                  int64_t vocab, float smoothing, int32_t ignore_id,
                                  bool write_gradient, float gradient_scale, double* row_loss,
                                  double* row_nll, cudaStream_t) {
  check_rows(logits, rows, vocab, sizeof(float), "cross-entropy logits");
  check_rows(targets, rows, 1, sizeof(int32_t), "cross-entropy targets");
  check_rows(row_loss, rows, 1, sizeof(double), "cross-entropy row_loss");
  check_rows(row_nll, rows, 1, sizeof(double), "cross-entropy row_nll");
  cpu::label_smoothed_cross_entropy<float>(logits, targets, rows, vocab, smoothing, ignore_id,
                                           write_gradient, row_loss, row_nll, 1);
  if (write_gradient)
    for (int64_t i = 0; i < rows * vocab; ++i) logits[i] *= gradient_scale;
}

void adam_step(float* parameters, const float* gradients, float* m, float* v, int64_t count,
               const AdamConstants& c, __half* half_parameters, cudaStream_t) {
  for (const float* p : {static_cast<const float*>(parameters), gradients,
                         static_cast<const float*>(m), static_cast<const float*>(v)})
    check_rows(p, count, 1, sizeof(float), "adam buffer");
  if (half_parameters != nullptr) check_rows(half_parameters, count, 1, sizeof(__half), "adam f16 copy");
  // The CPU kernel of the same rule, then the f16 copy.
  cpu::adam_step(parameters, gradients, m, v, count, c, 1);
  if (half_parameters != nullptr)
    for (int64_t i = 0; i < count; ++i) half_parameters[i] = from_float<__half>(parameters[i]);
}

void sum_of_squares(const float* x, int64_t count, double* workspace, double* result,
                    cudaStream_t) {
  check_rows(x, count, 1, sizeof(float), "sum_of_squares x");
  check_rows(workspace, kSumOfSquaresPartials, 1, sizeof(double), "sum_of_squares workspace");
  check_rows(result, 1, 1, sizeof(double), "sum_of_squares result");
  *result = cpu::sum_of_squares(x, count, 1);
}

void convert(const float* in, int64_t count, half* out, cudaStream_t) {
  check_rows(in, count, 1, sizeof(float), "convert input");
  check_rows(out, count, 1, sizeof(half), "convert output");
  for (int64_t i = 0; i < count; ++i) out[i] = from_float<__half>(in[i]);
}
void convert(const half* in, int64_t count, float* out, cudaStream_t) {
  check_rows(in, count, 1, sizeof(half), "convert input");
  check_rows(out, count, 1, sizeof(float), "convert output");
  for (int64_t i = 0; i < count; ++i) out[i] = to_float(in[i]);
}

}  // namespace xf::cuda
