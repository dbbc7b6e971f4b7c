// The "cuda_f32" and "cuda_f16" devices: xf::cuda's kernels on device buffers of f32 or f16
// (inputs uploaded, outputs downloaded after the device finished). Without a usable GPU they
// report why and every test over them skips.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <memory>
#include <type_traits>

#include "cuda_test_support.h"
#include "kernel_device.h"
#include "xf/format/dtype_convert.h"
#include "xf/kernels_cuda/backward.h"
#include "xf/kernels_cuda/check.h"
#include "xf/kernels_cuda/kernels.h"
#include "xf/kernels_cuda/matmul.h"
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
  ~DeviceBuffer() { cuda::device_free(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
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

template <typename T>
std::vector<T> narrow(const std::vector<float>& values) {
  if constexpr (std::is_same_v<T, float>) {
    return values;
  } else {
    std::vector<half> out(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      __half_raw raw;
      raw.x = float_to_half(values[i]);
      out[i] = half(raw);
    }
    return out;
  }
}

template <typename T>
std::vector<float> widen(const std::vector<T>& values) {
  if constexpr (std::is_same_v<T, float>) {
    return values;
  } else {
    std::vector<float> out(values.size());
    for (size_t i = 0; i < values.size(); ++i)
      out[i] = half_to_float(static_cast<__half_raw>(values[i]).x);
    return out;
  }
}

// A device buffer of T holding `values` (null when absent).
template <typename T>
std::unique_ptr<DeviceBuffer<T>> upload(const std::vector<float>* values) {
  return values ? std::make_unique<DeviceBuffer<T>>(narrow<T>(*values)) : nullptr;
}
template <typename T>
T* get(const std::unique_ptr<DeviceBuffer<T>>& buffer) {
  return buffer ? buffer->get() : nullptr;
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

 public:
  std::string name() const override { return kF16 ? "cuda_f16" : "cuda_f32"; }
  DeviceKind kind() const override { return DeviceKind::cuda; }
  Precision precision() const override { return kF16 ? Precision::f16 : Precision::f32; }
  // f16 buffers: the inference kernels, and of the CUDA-only ones the head split.
  bool has(Feature feature) const override { return feature == Feature::split_heads || !kF16; }
  std::string unavailable_reason() const override { return gpu_unavailable_reason(); }

  std::vector<float> embed(const std::vector<float>& table, int64_t vocab, int64_t dim,
                           const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                           float scale, PositionEncoding encoding, Precision out) override {
    DeviceBuffer<T> table_d(narrow<T>(table));
    DeviceBuffer<int32_t> ids_d(ids), positions_d(positions);
    const int64_t count = static_cast<int64_t>(ids.size());
    if (out == Precision::f16) {
      DeviceBuffer<half> out_d(count * dim);
      cuda::embed(table_d.get(), vocab, dim, ids_d.get(), positions_d.get(), count, scale,
                  out_d.get(), nullptr, encoding);
      return widen(out_d.download());
    }
    DeviceBuffer<float> out_d(count * dim);
    cuda::embed(table_d.get(), vocab, dim, ids_d.get(), positions_d.get(), count, scale,
                out_d.get(), nullptr, encoding);
    return out_d.download();
  }
  std::vector<Precision> embed_outputs() const override { return {Precision::f32, Precision::f16}; }

  std::vector<float> layer_norm(const std::vector<float>& x, const std::vector<float>* bias,
                                const std::vector<float>* residual, const std::vector<float>& gamma,
                                const std::vector<float>& beta, float epsilon, int64_t rows,
                                int64_t dim, Alias alias, std::vector<float>* mean,
                                std::vector<float>* rstd) override {
    DeviceBuffer<T> x_d(narrow<T>(x)), gamma_d(narrow<T>(gamma)), beta_d(narrow<T>(beta)),
        separate(rows * dim);
    auto bias_d = upload<T>(bias), residual_d = upload<T>(residual);
    DeviceBuffer<float> mean_d(rows), rstd_d(rows);
    DeviceBuffer<T>& out = alias == Alias::x ? x_d : alias == Alias::residual ? *residual_d : separate;
    cuda::add_bias_residual_layer_norm(x_d.get(), get(bias_d), get(residual_d), gamma_d.get(),
                                       beta_d.get(), epsilon, rows, dim, out.get(),
                                       mean ? mean_d.get() : nullptr, rstd ? rstd_d.get() : nullptr,
                                       nullptr);
    if (mean) *mean = mean_d.download();
    if (rstd) *rstd = rstd_d.download();
    return widen(out.download());
  }
  std::vector<float> add_bias_residual(std::vector<float> x, const std::vector<float>* bias,
                                       const std::vector<float>* residual, int64_t rows,
                                       int64_t dim) override {
    DeviceBuffer<T> x_d(narrow<T>(x));
    auto bias_d = upload<T>(bias), residual_d = upload<T>(residual);
    cuda::add_bias_residual(x_d.get(), get(bias_d), get(residual_d), rows, dim, nullptr);
    return widen(x_d.download());
  }
  std::vector<float> bias_relu(std::vector<float> x, const std::vector<float>* bias, int64_t rows,
                               int64_t dim) override {
    DeviceBuffer<T> x_d(narrow<T>(x));
    auto bias_d = upload<T>(bias);
    cuda::bias_relu(x_d.get(), get(bias_d), rows, dim, nullptr);
    return widen(x_d.download());
  }
  std::vector<float> bias_activation(std::vector<float> x, const std::vector<float>* bias,
                                     int64_t rows, int64_t dim, Activation activation) override {
    DeviceBuffer<T> x_d(narrow<T>(x));
    auto bias_d = upload<T>(bias);
    cuda::bias_activation(x_d.get(), get(bias_d), rows, dim, activation, nullptr);
    return widen(x_d.download());
  }

  AttentionResult attention(const AttentionCall& c) override {
    DeviceBuffer<T> input(narrow<T>(c.input));
    DeviceBuffer<T> out(narrow<T>(std::vector<float>(c.out_size, std::nanf(""))));
    const int64_t score_count = c.shape.batch * c.shape.heads * c.shape.query_len * c.shape.key_len;
    DeviceBuffer<float> probabilities(c.probabilities ? score_count : 0);
    DeviceBuffer<int32_t> key_lengths(c.key_lengths);
    cuda::attention(input.get() + c.q_at, on_device(c.q), input.get() + c.k_at, on_device(c.k),
                    input.get() + c.v_at, on_device(c.v),
                    c.out_over_q ? input.get() + c.q_at : out.get(), on_device(c.out),
                    on_device(c.shape), c.key_lengths.empty() ? nullptr : key_lengths.get(),
                    c.causal_offset, c.probabilities ? probabilities.get() : nullptr, nullptr);
    AttentionResult result;
    if (c.out_over_q) {
      const std::vector<float> all = widen(input.download());
      result.out.assign(all.begin() + c.q_at, all.end());
    } else {
      result.out = widen(out.download());
    }
    if (c.probabilities) result.probabilities = probabilities.download();
    return result;
  }
  std::vector<float> cached_attention(const std::vector<float>& q, int64_t q_row_stride,
                                      const std::vector<float>& k_cache,
                                      const std::vector<float>& v_cache, HeadStrides cache,
                                      int64_t rows, int64_t heads, int64_t head_dim,
                                      int64_t max_len, int64_t step) override {
    const int64_t d_model = heads * head_dim;
    DeviceBuffer<T> q_d(narrow<T>(q)), k_d(narrow<T>(k_cache)), v_d(narrow<T>(v_cache)),
        out(rows * d_model);
    DeviceBuffer<char> workspace(cuda::cached_attention_workspace_bytes(rows, heads, head_dim, max_len));
    cuda::cached_attention(q_d.get(), q_row_stride, k_d.get(), v_d.get(), on_device(cache), rows,
                           heads, head_dim, max_len, step, out.get(), d_model, workspace.get(),
                           nullptr);
    return widen(out.download());
  }

  std::vector<float> log_softmax(std::vector<float> logits, int64_t rows, int64_t vocab) override {
    DeviceBuffer<float> logits_d(logits);
    cuda::log_softmax(logits_d.get(), rows, vocab, nullptr);
    return logits_d.download();
  }
  void log_softmax_top_k(const std::vector<float>& logits, const std::vector<float>& offsets,
                         int64_t rows, int64_t vocab, int64_t k, std::vector<float>& values,
                         std::vector<int32_t>& indices) override {
    DeviceBuffer<T> logits_d(narrow<T>(logits));
    DeviceBuffer<float> offsets_d(offsets), values_d(rows * k);
    DeviceBuffer<int32_t> indices_d(rows * k);
    cuda::log_softmax_top_k(logits_d.get(), offsets.empty() ? nullptr : offsets_d.get(), rows,
                            vocab, k, values_d.get(), indices_d.get(), nullptr);
    values = values_d.download();
    indices = indices_d.download();
  }
  std::vector<float> gather_rows(const std::vector<float>& src, int64_t src_stride,
                                 const std::vector<int32_t>& indices, int64_t row_len,
                                 std::vector<float> dst, int64_t dst_stride) override {
    DeviceBuffer<T> src_d(narrow<T>(src)), dst_d(narrow<T>(dst));
    DeviceBuffer<int32_t> indices_d(indices);
    cuda::gather_rows(src_d.get(), src_stride, indices_d.get(), static_cast<int64_t>(indices.size()),
                      row_len, dst_d.get(), dst_stride, nullptr);
    return widen(dst_d.download());
  }
  std::vector<int32_t> gather_rows_int32(const std::vector<int32_t>& src, int64_t src_stride,
                                         const std::vector<int32_t>& indices, int64_t row_len,
                                         std::vector<int32_t> dst, int64_t dst_stride) override {
    DeviceBuffer<int32_t> src_d(src), dst_d(dst), indices_d(indices);
    cuda::gather_rows(src_d.get(), src_stride, indices_d.get(), static_cast<int64_t>(indices.size()),
                      row_len, dst_d.get(), dst_stride, nullptr);
    return dst_d.download();
  }
  void convert(const std::vector<float>& in, std::vector<uint16_t>& half_bits,
               std::vector<float>& back) override {
    const int64_t count = static_cast<int64_t>(in.size());
    DeviceBuffer<float> in_d(in), back_d(in.size());
    DeviceBuffer<half> out_d(in.size());
    cuda::convert(in_d.get(), count, out_d.get(), nullptr);
    cuda::convert(out_d.get(), count, back_d.get(), nullptr);
    half_bits.clear();
    for (const half& h : out_d.download()) half_bits.push_back(static_cast<__half_raw>(h).x);
    back = back_d.download();
  }
  void add_bias_split_heads(const std::vector<float>& packed, int64_t packed_at,
                            int64_t packed_stride, const std::vector<float>& bias, int64_t bias_at,
                            int parts, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                            std::vector<float>* outputs, const HeadStrides* strides,
                            int64_t position_offset) override {
    DeviceBuffer<T> packed_d(narrow<T>(packed)), bias_d(narrow<T>(bias));
    std::vector<std::unique_ptr<DeviceBuffer<T>>> out_d;
    cuda::SplitHeadsOutputs<T> targets;
    for (int p = 0; p < parts; ++p) {
      out_d.push_back(upload<T>(&outputs[p]));
      targets.data[p] = out_d.back()->get();
      targets.strides[p] = on_device(strides[p]);
    }
    cuda::add_bias_split_heads(packed_d.get() + packed_at, packed_stride, bias_d.get() + bias_at,
                               parts, batch, len, heads, head_dim, targets, position_offset, nullptr);
    for (int p = 0; p < parts; ++p) outputs[p] = widen(out_d[p]->download());
  }

  std::vector<float> matmul(const std::vector<float>& x, const std::vector<float>& w, int64_t m,
                            int64_t n, int64_t k, Precision out) override {
    const CublasHandle cublas(true);
    DeviceBuffer<T> x_d(narrow<T>(x)), w_d(narrow<T>(w));
    if constexpr (kF16) {
      if (out == Precision::f16) {
        DeviceBuffer<half> y(m * n);
        cuda::matmul(cublas.get(), x_d.get(), w_d.get(), y.get(), m, n, k);
        return widen(y.download());
      }
    }
    DeviceBuffer<float> y(m * n);
    cuda::matmul(cublas.get(), x_d.get(), w_d.get(), y.get(), m, n, k);
    return y.download();
  }
  std::vector<Precision> matmul_outputs() const override {
    if (kF16) return {Precision::f16, Precision::f32};
    return {Precision::f32};
  }
  std::vector<float> gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const std::vector<float>& a, int64_t lda, const std::vector<float>& b,
                          int64_t ldb, float beta, std::vector<float> c, int64_t ldc) override {
    const CublasHandle handle(false);
    DeviceBuffer<T> a_d(narrow<T>(a)), b_d(narrow<T>(b));
    DeviceBuffer<float> c_d(c);
    cuda::gemm(handle.get(), ta, tb, m, n, k, alpha, a_d.get(), lda, b_d.get(), ldb, beta, c_d.get(), ldc);
    return c_d.download();
  }

  void layer_norm_backward(const std::vector<float>& dout, const std::vector<float>& x,
                           const std::vector<float>& mean, const std::vector<float>& rstd,
                           const std::vector<float>& gamma, int64_t rows, int64_t dim,
                           std::vector<float>& dx, std::vector<float>& dgamma,
                           std::vector<float>& dbeta) override {
    DeviceBuffer<float> x_d(x), gamma_d(gamma), dout_d(dout), mean_d(mean), rstd_d(rstd),
        dx_d(dx), dgamma_d(dgamma), dbeta_d(dbeta),
        workspace(cuda::column_reduction_workspace_floats(rows, dim));
    cuda::layer_norm_backward(dout_d.get(), x_d.get(), mean_d.get(), rstd_d.get(), gamma_d.get(),
                              rows, dim, dx_d.get(), dgamma_d.get(), dbeta_d.get(),
                              workspace.get(), nullptr);
    dx = dx_d.download(), dgamma = dgamma_d.download(), dbeta = dbeta_d.download();
  }
  void bias_backward(const std::vector<float>& dy, int64_t rows, int64_t dim,
                     std::vector<float>& dbias) override {
    DeviceBuffer<float> dy_d(dy), dbias_d(dbias),
        workspace(cuda::column_reduction_workspace_floats(rows, dim));
    cuda::bias_backward(dy_d.get(), rows, dim, dbias_d.get(), workspace.get(), nullptr);
    dbias = dbias_d.download();
  }
  void bias_relu_backward(std::vector<float>& dy, const std::vector<float>& y, int64_t rows,
                          int64_t dim, std::vector<float>& dbias) override {
    DeviceBuffer<float> dy_d(dy), y_d(y), dbias_d(dbias),
        workspace(cuda::column_reduction_workspace_floats(rows, dim));
    cuda::bias_relu_backward(dy_d.get(), y_d.get(), rows, dim, dbias_d.get(), workspace.get(),
                             nullptr);
    dy = dy_d.download(), dbias = dbias_d.download();
  }
  void embedding_backward(const std::vector<float>& dout, const std::vector<int32_t>& ids,
                          int64_t dim, int64_t vocab, float scale,
                          std::vector<float>& dtable) override {
    DeviceBuffer<float> dout_d(dout), table_d(dtable);
    DeviceBuffer<int32_t> ids_d(ids);
    cuda::embedding_backward(dout_d.get(), ids_d.get(), static_cast<int64_t>(ids.size()), dim,
                             vocab, scale, table_d.get(), nullptr);
    dtable = table_d.download();
  }
  AttentionGradients attention_backward(const AttentionBackwardCall& c) override {
    const cuda::HeadStrides qs = on_device(c.q_strides), ks = on_device(c.k_strides);
    const cuda::AttentionShape shape = on_device(c.shape);
    const cuda::DropoutRule rule = cuda::make_dropout_rule(c.seed, c.site, c.dropout);
    DeviceBuffer<float> q(c.q), k(c.k), v(c.v), dout(c.dout), p(c.probabilities), dq(c.q.size()),
        dk(c.k.size()), dv(c.v.size()), workspace(cuda::attention_backward_workspace_floats(shape));
    cuda::attention_backward(dout.get(), qs, q.get(), qs, k.get(), ks, v.get(), ks, p.get(),
                             c.dropout > 0 ? &rule : nullptr, dq.get(), qs, dk.get(), ks, dv.get(),
                             ks, shape, workspace.get(), nullptr);
    return {dq.download(), dk.download(), dv.download()};
  }
  std::vector<float> attention_dropout_values(const AttentionBackwardCall& c) override {
    const cuda::DropoutRule rule = cuda::make_dropout_rule(c.seed, c.site, c.dropout);
    DeviceBuffer<float> p(c.probabilities), v(c.v), out(c.q.size());
    cuda::attention_dropout_values(p.get(), rule, v.get(), on_device(c.k_strides), out.get(),
                                   on_device(c.q_strides), on_device(c.shape), nullptr);
    return out.download();
  }
  void cross_entropy(std::vector<float>& logits, const std::vector<int32_t>& targets, int64_t rows,
                     int64_t vocab, float smoothing, int32_t ignore_id, bool write_gradient,
                     float gradient_scale, std::vector<double>& loss,
                     std::vector<double>& nll) override {
    DeviceBuffer<float> logits_d(logits);
    DeviceBuffer<int32_t> targets_d(targets);
    DeviceBuffer<double> loss_d(rows), nll_d(rows);
    cuda::label_smoothed_cross_entropy(logits_d.get(), targets_d.get(), rows, vocab, smoothing,
                                       ignore_id, write_gradient, gradient_scale, loss_d.get(),
                                       nll_d.get(), nullptr);
    logits = logits_d.download(), loss = loss_d.download(), nll = nll_d.download();
  }
  std::vector<float> dropout(std::vector<float> x, uint64_t seed, uint64_t site, float p) override {
    DeviceBuffer<float> x_d(x);
    cuda::dropout(x_d.get(), static_cast<int64_t>(x.size()), cuda::make_dropout_rule(seed, site, p),
                  nullptr);
    return x_d.download();
  }
  // Also writes the f16 copy of the parameters, which must equal them rounded.
  void adam_step(std::vector<float>& parameters, const std::vector<float>& gradients,
                 std::vector<float>& m, std::vector<float>& v,
                 const AdamConstants& constants) override {
    const int64_t count = static_cast<int64_t>(parameters.size());
    DeviceBuffer<float> p_d(parameters), g_d(gradients), m_d(m), v_d(v);
    DeviceBuffer<half> half_d(parameters.size());
    cuda::adam_step(p_d.get(), g_d.get(), m_d.get(), v_d.get(), count, constants, half_d.get(),
                    nullptr);
    parameters = p_d.download(), m = m_d.download(), v = v_d.download();
    const std::vector<float> half_copy = widen(half_d.download());
    for (size_t i = 0; i < parameters.size(); ++i)
      if (half_copy[i] != half_to_float(float_to_half(parameters[i])))
        throw std::runtime_error("adam_step's f16 parameter " + std::to_string(i) +
                                 " is not the f32 parameter rounded");
  }
  double sum_of_squares(const std::vector<float>& x) override {
    DeviceBuffer<float> x_d(x);
    DeviceBuffer<double> workspace(cuda::kSumOfSquaresPartials), result(1);
    cuda::sum_of_squares(x_d.get(), static_cast<int64_t>(x.size()), workspace.get(), result.get(),
                         nullptr);
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
