// The "cuda_f32" and "cuda_f16" devices: xf::cuda's kernels on device buffers of f32 or f16
// (inputs uploaded, outputs downloaded after the device finished). Without a usable GPU they
// report why and every test over them skips.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <memory>
#include <utility>
#include <type_traits>

#include "cuda_test_support.h"
#include "kernel_device.h"
#include "xf/format/dtype_convert.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/dropout.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/gather.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels/optimizer.h"
#include "xf/kernels/softmax.h"
#include "xf/kernels/types.h"
#include "xf/kernels_cuda/check.h"
#include "xf/kernels_cuda/memory.h"

namespace xf::test {
namespace {

using cuda::half;

// Device memory through the counted wrapper; download() waits for all queued work first, so a
// kernel's failure surfaces there.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count)
      : count_(count), data_(static_cast<T*>(cuda::device_malloc(std::max<size_t>(count, 1) * sizeof(T)))) {}
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    XF_CUDA_CHECK(cudaMemcpy(data_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept : count_(other.count_), data_(std::exchange(other.data_, nullptr)) {}
  ~DeviceBuffer() { cuda::device_free(data_); }
  T* get() const { return data_; }
  std::vector<T> download() const {
    XF_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(count_);
    XF_CUDA_CHECK(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t count_;
  T* data_;
};
using Device = DeviceBuffer<float>;

// f32 <-> the device's element type, rounding as the format does (float_to_half).
float to_f32(float v) { return v; }
float to_f32(half h) { return half_to_float(static_cast<__half_raw>(h).x); }
template <typename T>
T from_f32(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  __half_raw raw;
  raw.x = float_to_half(v);
  return half(raw);
}
template <typename T>
std::vector<T> narrow(const Floats& values) {
  std::vector<T> out;
  for (float v : values) out.push_back(from_f32<T>(v));
  return out;
}
template <typename T>
Floats widen(const std::vector<T>& values) {
  Floats out;
  for (const T& v : values) out.push_back(to_f32(v));
  return out;
}

cuda::HeadStrides on_device(HeadStrides s) { return {s.batch, s.head, s.position}; }
cuda::AttentionShape on_device(const AttentionShape& s) {
  return {s.batch, s.heads, s.query_len, s.key_len, s.head_dim};
}

// A cuBLAS handle on the default stream for one call: with a bound workspace as a Translator
// holds one (matmul), or without as the trainer makes it (gemm).
class CublasHandle {
 public:
  explicit CublasHandle(bool bind_workspace) {
    XF_CUBLAS_CHECK(cublasCreate(&handle_));
    if (!bind_workspace) return;
    const size_t bytes = cuda::recommended_cublas_workspace_bytes(0);
    workspace_ = cuda::device_malloc(bytes);
    cuda::bind_cublas_handle(handle_, nullptr, workspace_, bytes);
  }
  ~CublasHandle() {
    (void)cublasDestroy(handle_);
    cuda::device_free(workspace_);
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
};

template <typename T>
class CudaDevice final : public KernelDevice {
  static constexpr bool kF16 = std::is_same_v<T, half>;
  using Buffer = DeviceBuffer<T>;  // of the device's precision
  static Buffer put(const Floats& values) { return Buffer(narrow<T>(values)); }
  static std::unique_ptr<Buffer> put(const Floats* values) {  // null when not given
    return values ? std::make_unique<Buffer>(narrow<T>(*values)) : nullptr;
  }
  static T* get(const std::unique_ptr<Buffer>& buffer) { return buffer ? buffer->get() : nullptr; }
  static Floats host(const Buffer& buffer) { return widen(buffer.download()); }

 public:
  std::string name() const override { return kF16 ? "cuda_f16" : "cuda_f32"; }
  DeviceKind kind() const override { return DeviceKind::cuda; }
  Precision precision() const override { return kF16 ? Precision::f16 : Precision::f32; }
  // f16 buffers: the inference kernels, and of the CUDA-only ones the head split.
  bool has(Feature feature) const override { return feature == Feature::split_heads || !kF16; }
  std::string unavailable_reason() const override { return gpu_unavailable_reason(); }

  Floats embed(const Floats& table, int64_t vocab, int64_t dim, const Ints& ids,
               const Ints& positions, float scale, PositionEncoding encoding,
               Precision out) override {
    const Buffer table_d = put(table);
    const DeviceBuffer<int32_t> ids_d(ids), positions_d(positions);
    const int64_t count = static_cast<int64_t>(ids.size());
    if (out == Precision::f16) {
      DeviceBuffer<half> out_d(count * dim);
      cuda::embed(table_d.get(), vocab, dim, ids_d.get(), positions_d.get(), count, scale,
                  out_d.get(), nullptr, encoding);
      return widen(out_d.download());
    }
    Device out_d(count * dim);
    cuda::embed(table_d.get(), vocab, dim, ids_d.get(), positions_d.get(), count, scale,
                out_d.get(), nullptr, encoding);
    return out_d.download();
  }
  std::vector<Precision> embed_outputs() const override { return {Precision::f32, Precision::f16}; }

  Floats layer_norm(const Floats& x, const Floats* bias, const Floats* residual,
                    const Floats& gamma, const Floats& beta, float epsilon, int64_t rows,
                    int64_t dim, Alias alias, Floats* mean, Floats* rstd) override {
    const Buffer x_d = put(x), gamma_d = put(gamma), beta_d = put(beta), separate(rows * dim);
    const auto bias_d = put(bias), residual_d = put(residual);
    const Device mean_d(rows), rstd_d(rows);
    const Buffer& out = alias == Alias::x ? x_d : alias == Alias::residual ? *residual_d : separate;
    cuda::add_bias_residual_layer_norm(x_d.get(), get(bias_d), get(residual_d), gamma_d.get(),
                                       beta_d.get(), epsilon, rows, dim, out.get(),
                                       mean ? mean_d.get() : nullptr, rstd ? rstd_d.get() : nullptr,
                                       nullptr);
    if (mean) *mean = mean_d.download();
    if (rstd) *rstd = rstd_d.download();
    return host(out);
  }
  Floats add_bias_residual(Floats x, const Floats* bias, const Floats* residual, int64_t rows,
                           int64_t dim) override {
    const Buffer x_d = put(x);
    cuda::add_bias_residual(x_d.get(), get(put(bias)), get(put(residual)), rows, dim, nullptr);
    return host(x_d);
  }
  Floats bias_relu(Floats x, const Floats* bias, int64_t rows, int64_t dim) override {
    const Buffer x_d = put(x);
    cuda::bias_relu(x_d.get(), get(put(bias)), rows, dim, nullptr);
    return host(x_d);
  }
  Floats bias_activation(Floats x, const Floats* bias, int64_t rows, int64_t dim,
                         Activation activation) override {
    const Buffer x_d = put(x);
    cuda::bias_activation(x_d.get(), get(put(bias)), rows, dim, activation, nullptr);
    return host(x_d);
  }

  AttentionResult attention(const AttentionCall& c) override {
    const Buffer input = put(c.input), out = put(Floats(c.out_size, std::nanf("")));
    const AttentionShape& s = c.shape;
    const Device probabilities(c.probabilities ? s.batch * s.heads * s.query_len * s.key_len : 0);
    const DeviceBuffer<int32_t> key_lengths(c.key_lengths);
    cuda::attention(input.get() + c.q_at, on_device(c.q), input.get() + c.k_at, on_device(c.k),
                    input.get() + c.v_at, on_device(c.v),
                    c.out_over_q ? input.get() + c.q_at : out.get(), on_device(c.out),
                    on_device(s), c.key_lengths.empty() ? nullptr : key_lengths.get(),
                    c.causal_offset, c.probabilities ? probabilities.get() : nullptr, nullptr);
    AttentionResult result{host(c.out_over_q ? input : out), {}};
    if (c.out_over_q) result.out.erase(result.out.begin(), result.out.begin() + c.q_at);
    if (c.probabilities) result.probabilities = probabilities.download();
    return result;
  }
  Floats cached_attention(const Floats& q, int64_t q_row_stride, const Floats& k_cache,
                          const Floats& v_cache, HeadStrides cache, int64_t rows, int64_t heads,
                          int64_t head_dim, int64_t max_len, int64_t step) override {
    const Buffer q_d = put(q), k_d = put(k_cache), v_d = put(v_cache), out(rows * heads * head_dim);
    const DeviceBuffer<char> workspace(cuda::cached_attention_workspace_bytes(rows, heads, head_dim, max_len));
    cuda::cached_attention(q_d.get(), q_row_stride, k_d.get(), v_d.get(), on_device(cache), rows,
                           heads, head_dim, max_len, step, out.get(), heads * head_dim,
                           workspace.get(), nullptr);
    return host(out);
  }

  Floats log_softmax(Floats logits, int64_t rows, int64_t vocab) override {
    const Device logits_d(logits);
    cuda::log_softmax(logits_d.get(), rows, vocab, nullptr);
    return logits_d.download();
  }
  void log_softmax_top_k(const Floats& logits, const Floats& offsets, int64_t rows, int64_t vocab,
                         int64_t k, Floats& values, Ints& indices) override {
    const Buffer logits_d = put(logits);
    const Device offsets_d(offsets), values_d(rows * k);
    const DeviceBuffer<int32_t> indices_d(rows * k);
    cuda::log_softmax_top_k(logits_d.get(), offsets.empty() ? nullptr : offsets_d.get(), rows,
                            vocab, k, values_d.get(), indices_d.get(), nullptr);
    values = values_d.download(), indices = indices_d.download();
  }
  Floats ssru_step(const Floats& in, Floats& cell, const Ints& state_rows, bool first, int64_t rows,
                   int64_t dim) override {
    const Buffer in_d = put(in), cell_d = put(cell), out_d = put(Floats(rows * dim, std::nanf("")));
    const DeviceBuffer<int32_t> state_rows_d(state_rows);
    cuda::ssru_step(in_d.get(), cell_d.get(), state_rows.empty() ? nullptr : state_rows_d.get(), first, rows, dim,
                    out_d.get(), nullptr);
    cell = host(cell_d);
    return host(out_d);
  }
  Floats gather_rows(const Floats& src, int64_t src_stride, const Ints& indices, int64_t row_len,
                     Floats dst, int64_t dst_stride) override {
    const Buffer src_d = put(src), dst_d = put(dst);
    cuda::gather_rows(src_d.get(), src_stride, DeviceBuffer<int32_t>(indices).get(),
                      static_cast<int64_t>(indices.size()), row_len, dst_d.get(), dst_stride, nullptr);
    return host(dst_d);
  }
  Ints gather_rows_int32(const Ints& src, int64_t src_stride, const Ints& indices, int64_t row_len,
                         Ints dst, int64_t dst_stride) override {
    const DeviceBuffer<int32_t> src_d(src), dst_d(dst), indices_d(indices);
    cuda::gather_rows(src_d.get(), src_stride, indices_d.get(), static_cast<int64_t>(indices.size()),
                      row_len, dst_d.get(), dst_stride, nullptr);
    return dst_d.download();
  }
  void convert(const Floats& in, std::vector<uint16_t>& half_bits, Floats& back) override {
    const int64_t count = static_cast<int64_t>(in.size());
    const Device in_d(in), back_d(in.size());
    const DeviceBuffer<half> out_d(in.size());
    cuda::convert(in_d.get(), count, out_d.get(), nullptr);
    cuda::convert(out_d.get(), count, back_d.get(), nullptr);
    half_bits.clear();
    for (const half& h : out_d.download()) half_bits.push_back(static_cast<__half_raw>(h).x);
    back = back_d.download();
  }
  void add_bias_split_heads(const Floats& packed, int64_t packed_at, int64_t packed_stride,
                            const Floats& bias, int64_t bias_at, int parts, int64_t batch,
                            int64_t len, int64_t heads, int64_t head_dim, Floats* outputs,
                            const HeadStrides* strides, int64_t position_offset) override {
    const Buffer packed_d = put(packed), bias_d = put(bias);
    std::vector<Buffer> out_d;
    cuda::SplitHeadsOutputs<T> targets;
    for (int p = 0; p < parts; ++p) {
      out_d.push_back(put(outputs[p]));
      targets.strides[p] = on_device(strides[p]);
    }
    for (int p = 0; p < parts; ++p) targets.data[p] = out_d[p].get();
    cuda::add_bias_split_heads(packed_d.get() + packed_at, packed_stride, bias_d.get() + bias_at,
                               parts, batch, len, heads, head_dim, targets, position_offset, nullptr);
    for (int p = 0; p < parts; ++p) outputs[p] = host(out_d[p]);
  }

  Floats matmul(const Floats& x, const Floats& w, int64_t m, int64_t n, int64_t k,
                Precision out) override {
    const CublasHandle cublas(true);
    const Buffer x_d = put(x), w_d = put(w);
    if constexpr (kF16) {
      if (out == Precision::f16) {
        const DeviceBuffer<half> y(m * n);
        cuda::matmul(cublas.get(), x_d.get(), w_d.get(), y.get(), m, n, k);
        return widen(y.download());
      }
    }
    const Device y(m * n);
    cuda::matmul(cublas.get(), x_d.get(), w_d.get(), y.get(), m, n, k);
    return y.download();
  }
  std::vector<Precision> matmul_outputs() const override {
    if (kF16) return {Precision::f16, Precision::f32};
    return {Precision::f32};
  }
  Floats gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const Floats& a,
              int64_t lda, const Floats& b, int64_t ldb, float beta, Floats c, int64_t ldc) override {
    const CublasHandle handle(false);
    const Buffer a_d = put(a), b_d = put(b);
    const Device c_d(c);
    cuda::gemm(handle.get(), ta, tb, m, n, k, alpha, a_d.get(), lda, b_d.get(), ldb, beta, c_d.get(), ldc);
    return c_d.download();
  }

  void layer_norm_backward(const Floats& dout, const Floats& x, const Floats& mean,
                           const Floats& rstd, const Floats& gamma, int64_t rows, int64_t dim,
                           Floats& dx, Floats& dgamma, Floats& dbeta) override {
    const Device x_d(x), gamma_d(gamma), dout_d(dout), mean_d(mean), rstd_d(rstd), dx_d(dx),
        dgamma_d(dgamma), dbeta_d(dbeta), workspace(cuda::column_reduction_workspace_floats(rows, dim));
    cuda::layer_norm_backward(dout_d.get(), x_d.get(), mean_d.get(), rstd_d.get(), gamma_d.get(),
                              rows, dim, dx_d.get(), dgamma_d.get(), dbeta_d.get(),
                              workspace.get(), nullptr);
    dx = dx_d.download(), dgamma = dgamma_d.download(), dbeta = dbeta_d.download();
  }
  void bias_backward(const Floats& dy, int64_t rows, int64_t dim, Floats& dbias) override {
    const Device dy_d(dy), dbias_d(dbias), workspace(cuda::column_reduction_workspace_floats(rows, dim));
    cuda::bias_backward(dy_d.get(), rows, dim, dbias_d.get(), workspace.get(), nullptr);
    dbias = dbias_d.download();
  }
  void bias_relu_backward(Floats& dy, const Floats& y, int64_t rows, int64_t dim,
                          Floats& dbias) override {
    const Device dy_d(dy), y_d(y), dbias_d(dbias), workspace(cuda::column_reduction_workspace_floats(rows, dim));
    cuda::bias_relu_backward(dy_d.get(), y_d.get(), rows, dim, dbias_d.get(), workspace.get(), nullptr);
    dy = dy_d.download(), dbias = dbias_d.download();
  }
  void embedding_backward(const Floats& dout, const Ints& ids, int64_t dim, int64_t vocab,
                          float scale, Floats& dtable) override {
    const Device dout_d(dout), table_d(dtable);
    cuda::embedding_backward(dout_d.get(), DeviceBuffer<int32_t>(ids).get(),
                             static_cast<int64_t>(ids.size()), dim, vocab, scale, table_d.get(), nullptr);
    dtable = table_d.download();
  }
  AttentionGradients attention_backward(const AttentionBackwardCall& c) override {
    const cuda::HeadStrides qs = on_device(c.q_strides), ks = on_device(c.k_strides);
    const cuda::AttentionShape shape = on_device(c.shape);
    const cuda::DropoutRule rule = cuda::make_dropout_rule(c.seed, c.site, c.dropout);
    const Device q(c.q), k(c.k), v(c.v), dout(c.dout), p(c.probabilities), dq(c.q.size()),
        dk(c.k.size()), dv(c.v.size()), workspace(cuda::attention_backward_workspace_floats(shape));
    cuda::attention_backward(dout.get(), qs, q.get(), qs, k.get(), ks, v.get(), ks, p.get(),
                             c.dropout > 0 ? &rule : nullptr, dq.get(), qs, dk.get(), ks, dv.get(),
                             ks, shape, workspace.get(), nullptr);
    return {dq.download(), dk.download(), dv.download()};
  }
  Floats attention_dropout_values(const AttentionBackwardCall& c) override {
    const Device p(c.probabilities), v(c.v), out(c.q.size());
    cuda::attention_dropout_values(p.get(), cuda::make_dropout_rule(c.seed, c.site, c.dropout),
                                   v.get(), on_device(c.k_strides), out.get(),
                                   on_device(c.q_strides), on_device(c.shape), nullptr);
    return out.download();
  }
  void cross_entropy(Floats& logits, const Ints& targets, int64_t rows, int64_t vocab,
                     float smoothing, int32_t ignore_id, bool write_gradient, float gradient_scale,
                     std::vector<double>& loss, std::vector<double>& nll) override {
    const Device logits_d(logits);
    const DeviceBuffer<double> loss_d(rows), nll_d(rows);
    cuda::label_smoothed_cross_entropy(logits_d.get(), DeviceBuffer<int32_t>(targets).get(), rows,
                                       vocab, smoothing, ignore_id, write_gradient, gradient_scale,
                                       loss_d.get(), nll_d.get(), nullptr);
    logits = logits_d.download(), loss = loss_d.download(), nll = nll_d.download();
  }
  Floats dropout(Floats x, uint64_t seed, uint64_t site, float p) override {
    const Device x_d(x);
    cuda::dropout(x_d.get(), static_cast<int64_t>(x.size()), cuda::make_dropout_rule(seed, site, p), nullptr);
    return x_d.download();
  }
  // Also writes the f16 copy of the parameters, which must equal them rounded.
  void adam_step(Floats& parameters, const Floats& gradients, Floats& m, Floats& v,
                 const AdamConstants& constants) override {
    const Device p_d(parameters), g_d(gradients), m_d(m), v_d(v);
    const DeviceBuffer<half> half_d(parameters.size());
    cuda::adam_step(p_d.get(), g_d.get(), m_d.get(), v_d.get(),
                    static_cast<int64_t>(parameters.size()), constants, half_d.get(), nullptr);
    parameters = p_d.download(), m = m_d.download(), v = v_d.download();
    EXPECT_EQ(widen(half_d.download()), widen(narrow<half>(parameters)))
        << "adam_step's f16 parameters are not the f32 ones rounded";
  }
  double sum_of_squares(const Floats& x) override {
    const Device x_d(x);
    const DeviceBuffer<double> workspace(cuda::kSumOfSquaresPartials), result(1);
    cuda::sum_of_squares(x_d.get(), static_cast<int64_t>(x.size()), workspace.get(), result.get(), nullptr);
    return result.download()[0];
  }
};

}  // namespace

const KernelDevice& cuda_device(Precision precision) {
  static const CudaDevice<float> f32;
  static const CudaDevice<half> f16;
  if (precision == Precision::f16) return f16;
  return f32;
}

}  // namespace xf::test
