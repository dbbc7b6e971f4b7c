// The "cpu" device: xf::cpu's kernels on the host vectors themselves, at two threads (the
// kernels split rows or heads between them).
#include <cstdlib>
#include <memory>

#include "kernel_device.h"
#include "xf/kernels_cpu/backward.h"
#include "xf/kernels_cpu/matmul.h"
#include "xf/kernels_cpu/training.h"

namespace xf::test {
namespace {

constexpr int kThreads = 2;

const float* get(const std::vector<float>* v) { return v == nullptr ? nullptr : v->data(); }

class CpuDevice final : public KernelDevice {
 public:
  std::string name() const override { return "cpu"; }
  DeviceKind kind() const override { return DeviceKind::cpu; }
  Precision precision() const override { return Precision::f32; }
  bool has(Feature feature) const override { return feature == Feature::f32_only_ops; }

  std::vector<float> embed(const std::vector<float>& table, int64_t vocab, int64_t dim,
                           const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                           float scale, PositionEncoding encoding, Precision) override {
    std::vector<float> out(ids.size() * dim);
    cpu::embed(cpu::WeightMatrix{DType::f32, table.data(), nullptr, vocab, dim}, ids.data(),
               positions.data(), static_cast<int64_t>(ids.size()), scale, out.data(), kThreads,
               encoding);
    return out;
  }
  std::vector<Precision> embed_outputs() const override { return {Precision::f32}; }

  std::vector<float> layer_norm(const std::vector<float>& x, const std::vector<float>* bias,
                                const std::vector<float>* residual, const std::vector<float>& gamma,
                                const std::vector<float>& beta, float epsilon, int64_t rows,
                                int64_t dim, Alias alias, std::vector<float>* mean,
                                std::vector<float>* rstd) override {
    std::vector<float> x_copy = x, residual_copy = residual ? *residual : std::vector<float>();
    std::vector<float> separate(rows * dim, std::nanf(""));
    std::vector<float>& out = alias == Alias::x ? x_copy : alias == Alias::residual ? residual_copy : separate;
    if (mean) mean->assign(rows, std::nanf(""));
    if (rstd) rstd->assign(rows, std::nanf(""));
    cpu::add_bias_residual_layer_norm(x_copy.data(), get(bias), residual ? residual_copy.data() : nullptr,
                                      gamma.data(), beta.data(), epsilon, rows, dim, out.data(),
                                      mean ? mean->data() : nullptr, rstd ? rstd->data() : nullptr,
                                      kThreads);
    return out;
  }
  std::vector<float> add_bias_residual(std::vector<float> x, const std::vector<float>* bias,
                                       const std::vector<float>* residual, int64_t rows,
                                       int64_t dim) override {
    cpu::add_bias_residual(x.data(), get(bias), get(residual), rows, dim, kThreads);
    return x;
  }
  std::vector<float> bias_relu(std::vector<float> x, const std::vector<float>* bias, int64_t rows,
                               int64_t dim) override {
    cpu::bias_relu(x.data(), get(bias), rows, dim, kThreads);
    return x;
  }
  std::vector<float> bias_activation(std::vector<float> x, const std::vector<float>* bias,
                                     int64_t rows, int64_t dim, Activation activation) override {
    cpu::bias_activation(x.data(), get(bias), rows, dim, activation, kThreads);
    return x;
  }

  AttentionResult attention(const AttentionCall& c) override {
    std::vector<float> input = c.input;
    AttentionResult result;
    result.out.assign(c.out_size, std::nanf(""));
    if (c.probabilities)
      result.probabilities.assign(c.shape.batch * c.shape.heads * c.shape.query_len * c.shape.key_len,
                                  std::nanf(""));
    std::vector<float> scratch(c.cpu_threads * c.shape.key_len);
    float* out = c.out_over_q ? input.data() + c.q_at : result.out.data();
    cpu::attention(input.data() + c.q_at, c.q, input.data() + c.k_at, c.k, input.data() + c.v_at,
                   c.v, out, c.out, c.shape, c.key_lengths.empty() ? nullptr : c.key_lengths.data(),
                   c.causal_offset, c.probabilities ? result.probabilities.data() : nullptr,
                   scratch.data(), c.cpu_threads);
    if (c.out_over_q) result.out = std::vector<float>(input.begin() + c.q_at, input.end());
    return result;
  }
  // The CPU runtime's decoder step is attention() over the cache with the step as causal offset.
  std::vector<float> cached_attention(const std::vector<float>& q, int64_t q_row_stride,
                                      const std::vector<float>& k_cache,
                                      const std::vector<float>& v_cache, HeadStrides cache,
                                      int64_t rows, int64_t heads, int64_t head_dim,
                                      int64_t max_len, int64_t step) override {
    const int64_t d_model = heads * head_dim;
    std::vector<float> out(rows * d_model, std::nanf("")), scratch(kThreads * max_len);
    cpu::attention(q.data(), {q_row_stride, head_dim, q_row_stride}, k_cache.data(), cache,
                   v_cache.data(), cache, out.data(), {d_model, head_dim, d_model},
                   {rows, heads, 1, max_len, head_dim}, nullptr, step, nullptr, scratch.data(),
                   kThreads);
    return out;
  }

  std::vector<float> log_softmax(std::vector<float> logits, int64_t rows, int64_t vocab) override {
    cpu::log_softmax(logits.data(), rows, vocab, kThreads);
    return logits;
  }
  void log_softmax_top_k(const std::vector<float>& logits, const std::vector<float>& offsets,
                         int64_t rows, int64_t vocab, int64_t k, std::vector<float>& values,
                         std::vector<int32_t>& indices) override {
    values.assign(rows * k, std::nanf(""));
    indices.assign(rows * k, -1);
    cpu::log_softmax_top_k(logits.data(), offsets.empty() ? nullptr : offsets.data(), rows, vocab,
                           k, values.data(), indices.data(), kThreads);
  }
  std::vector<float> gather_rows(const std::vector<float>& src, int64_t src_stride,
                                 const std::vector<int32_t>& indices, int64_t row_len,
                                 std::vector<float> dst, int64_t dst_stride) override {
    cpu::gather_rows(src.data(), src_stride, indices.data(), static_cast<int64_t>(indices.size()),
                     row_len, dst.data(), dst_stride, kThreads);
    return dst;
  }
  std::vector<float> matmul(const std::vector<float>& x, const std::vector<float>& w, int64_t m,
                            int64_t n, int64_t k, Precision) override {
    cpu::StaticMatmul product(engine_, m, cpu::WeightMatrix{DType::f32, w.data(), nullptr, n, k},
                              false);
    std::vector<char> workspace(product.workspace_bytes() + 64);
    void* aligned = workspace.data() + (64 - reinterpret_cast<uintptr_t>(workspace.data()) % 64) % 64;
    std::vector<float> y(m * n, std::nanf(""));
    product.run(x.data(), nullptr, y.data(), aligned);
    return y;
  }
  std::vector<Precision> matmul_outputs() const override { return {Precision::f32}; }
  std::vector<float> gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const std::vector<float>& a, int64_t lda, const std::vector<float>& b,
                          int64_t ldb, float beta, std::vector<float> c, int64_t ldc) override {
    cpu::gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    return c;
  }

  void layer_norm_backward(const std::vector<float>& dout, const std::vector<float>& x,
                           const std::vector<float>& mean, const std::vector<float>& rstd,
                           const std::vector<float>& gamma, int64_t rows, int64_t dim,
                           std::vector<float>& dx, std::vector<float>& dgamma,
                           std::vector<float>& dbeta) override {
    cpu::layer_norm_backward<float>(dout.data(), x.data(), mean.data(), rstd.data(), gamma.data(),
                                    rows, dim, dx.data(), dgamma.data(), dbeta.data(), kThreads);
  }
  void bias_backward(const std::vector<float>& dy, int64_t rows, int64_t dim,
                     std::vector<float>& dbias) override {
    cpu::bias_backward<float>(dy.data(), rows, dim, dbias.data(), kThreads);
  }
  void bias_relu_backward(std::vector<float>& dy, const std::vector<float>& y, int64_t rows,
                          int64_t dim, std::vector<float>& dbias) override {
    cpu::bias_relu_backward<float>(dy.data(), y.data(), rows, dim, dbias.data(), kThreads);
  }
  void embedding_backward(const std::vector<float>& dout, const std::vector<int32_t>& ids,
                          int64_t dim, int64_t, float scale, std::vector<float>& dtable) override {
    cpu::embedding_backward<float>(dout.data(), ids.data(), static_cast<int64_t>(ids.size()), dim,
                                   scale, dtable.data(), kThreads);
  }
  AttentionGradients attention_backward(const AttentionBackwardCall& c) override {
    std::vector<uint8_t> mask;
    if (c.dropout > 0) {
      mask.resize(c.probabilities.size());
      cpu::make_dropout_mask(c.seed, c.site, mask.size(), c.dropout, mask.data(), kThreads);
    }
    AttentionGradients g{std::vector<float>(c.q.size(), std::nanf("")),
                         std::vector<float>(c.k.size(), std::nanf("")),
                         std::vector<float>(c.v.size(), std::nanf(""))};
    std::vector<float> scratch(kThreads * 2 * c.shape.key_len);
    cpu::attention_backward<float>(
        c.dout.data(), c.q_strides, c.q.data(), c.q_strides, c.k.data(), c.k_strides, c.v.data(),
        c.k_strides, c.probabilities.data(), mask.empty() ? nullptr : mask.data(),
        static_cast<float>(1.0 / (1.0 - c.dropout)), g.dq.data(), c.q_strides, g.dk.data(),
        c.k_strides, g.dv.data(), c.k_strides, c.shape, scratch.data(), kThreads);
    return g;
  }
  // The CPU kernel has no gradient scale: the adapter applies it, as the CPU trainer does.
  void cross_entropy(std::vector<float>& logits, const std::vector<int32_t>& targets, int64_t rows,
                     int64_t vocab, float smoothing, int32_t ignore_id, bool write_gradient,
                     float gradient_scale, std::vector<double>& loss,
                     std::vector<double>& nll) override {
    loss.assign(rows, std::nan(""));
    nll.assign(rows, std::nan(""));
    cpu::label_smoothed_cross_entropy<float>(logits.data(), targets.data(), rows, vocab, smoothing,
                                             ignore_id, write_gradient, loss.data(), nll.data(),
                                             kThreads);
    if (write_gradient)
      for (float& g : logits) g *= gradient_scale;
  }
  std::vector<float> dropout(std::vector<float> x, uint64_t seed, uint64_t site, float p) override {
    std::vector<uint8_t> mask(x.size());
    cpu::make_dropout_mask(seed, site, x.size(), p, mask.data(), kThreads);
    cpu::apply_dropout(x.data(), mask.data(), x.size(), static_cast<float>(1.0 / (1.0 - p)),
                       kThreads);
    return x;
  }
  void adam_step(std::vector<float>& parameters, const std::vector<float>& gradients,
                 std::vector<float>& m, std::vector<float>& v,
                 const AdamConstants& constants) override {
    cpu::adam_step(parameters.data(), gradients.data(), m.data(), v.data(),
                   static_cast<int64_t>(parameters.size()), constants, kThreads);
  }
  double sum_of_squares(const std::vector<float>& x) override {
    return cpu::sum_of_squares(x.data(), static_cast<int64_t>(x.size()), kThreads);
  }

 private:
  cpu::CpuEngine engine_{kThreads};
};

}  // namespace

const KernelDevice& cpu_device() {
  static const CpuDevice device;
  return device;
}

}  // namespace xf::test
