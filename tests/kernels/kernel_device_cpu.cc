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

const float* get(const Floats* v) { return v == nullptr ? nullptr : v->data(); }

class CpuDevice final : public KernelDevice {
 public:
  std::string name() const override { return "cpu"; }
  DeviceKind kind() const override { return DeviceKind::cpu; }
  Precision precision() const override { return Precision::f32; }
  bool has(Feature feature) const override { return feature == Feature::f32_only_ops; }

  Floats embed(const Floats& table, int64_t vocab, int64_t dim, const Ints& ids,
               const Ints& positions, float scale, PositionEncoding encoding, Precision) override {
    Floats out(ids.size() * dim);
    cpu::embed(cpu::WeightMatrix{DType::f32, table.data(), nullptr, vocab, dim}, ids.data(),
               positions.data(), static_cast<int64_t>(ids.size()), scale, out.data(), kThreads,
               encoding);
    return out;
  }
  std::vector<Precision> embed_outputs() const override { return {Precision::f32}; }

  Floats layer_norm(const Floats& x, const Floats* bias, const Floats* residual,
                    const Floats& gamma, const Floats& beta, float epsilon, int64_t rows,
                    int64_t dim, Alias alias, Floats* mean, Floats* rstd) override {
    Floats x_copy = x, residual_copy = residual ? *residual : Floats();
    Floats separate(rows * dim, std::nanf(""));
    Floats& out = alias == Alias::x ? x_copy : alias == Alias::residual ? residual_copy : separate;
    if (mean) mean->assign(rows, std::nanf(""));
    if (rstd) rstd->assign(rows, std::nanf(""));
    cpu::add_bias_residual_layer_norm(x_copy.data(), get(bias), residual ? residual_copy.data() : nullptr,
                                      gamma.data(), beta.data(), epsilon, rows, dim, out.data(),
                                      mean ? mean->data() : nullptr, rstd ? rstd->data() : nullptr,
                                      kThreads);
    return out;
  }
  Floats add_bias_residual(Floats x, const Floats* bias, const Floats* residual, int64_t rows,
                           int64_t dim) override {
    cpu::add_bias_residual(x.data(), get(bias), get(residual), rows, dim, kThreads);
    return x;
  }
  Floats bias_relu(Floats x, const Floats* bias, int64_t rows, int64_t dim) override {
    cpu::bias_relu(x.data(), get(bias), rows, dim, kThreads);
    return x;
  }
  Floats bias_activation(Floats x, const Floats* bias, int64_t rows, int64_t dim,
                         Activation activation) override {
    cpu::bias_activation(x.data(), get(bias), rows, dim, activation, kThreads);
    return x;
  }

  AttentionResult attention(const AttentionCall& c) override {
    Floats input = c.input;
    const AttentionShape& s = c.shape;
    AttentionResult result{Floats(c.out_size, std::nanf("")),
                           Floats(c.probabilities ? s.batch * s.heads * s.query_len * s.key_len : 0, std::nanf(""))};
    Floats scratch(c.cpu_threads * c.shape.key_len);
    float* out = c.out_over_q ? input.data() + c.q_at : result.out.data();
    cpu::attention(input.data() + c.q_at, c.q, input.data() + c.k_at, c.k, input.data() + c.v_at,
                   c.v, out, c.out, c.shape, c.key_lengths.empty() ? nullptr : c.key_lengths.data(),
                   c.causal_offset, c.probabilities ? result.probabilities.data() : nullptr,
                   scratch.data(), c.cpu_threads);
    if (c.out_over_q) result.out = Floats(input.begin() + c.q_at, input.end());
    return result;
  }
  // The CPU runtime's decoder step is attention() over the cache with the step as causal offset.
  Floats cached_attention(const Floats& q, int64_t q_row_stride, const Floats& k_cache,
                          const Floats& v_cache, HeadStrides cache, int64_t rows, int64_t heads,
                          int64_t head_dim, int64_t max_len, int64_t step) override {
    const int64_t d_model = heads * head_dim;
    Floats out(rows * d_model, std::nanf("")), scratch(kThreads * max_len);
    cpu::attention(q.data(), {q_row_stride, head_dim, q_row_stride}, k_cache.data(), cache,
                   v_cache.data(), cache, out.data(), {d_model, head_dim, d_model},
                   {rows, heads, 1, max_len, head_dim}, nullptr, step, nullptr, scratch.data(),
                   kThreads);
    return out;
  }

  Floats log_softmax(Floats logits, int64_t rows, int64_t vocab) override {
    cpu::log_softmax(logits.data(), rows, vocab, kThreads);
    return logits;
  }
  void log_softmax_top_k(const Floats& logits, const Floats& offsets, int64_t rows, int64_t vocab,
                         int64_t k, Floats& values, Ints& indices) override {
    values.assign(rows * k, std::nanf(""));
    indices.assign(rows * k, -1);
    cpu::log_softmax_top_k(logits.data(), offsets.empty() ? nullptr : offsets.data(), rows, vocab,
                           k, values.data(), indices.data(), kThreads);
  }
  Floats gather_rows(const Floats& src, int64_t src_stride, const Ints& indices, int64_t row_len,
                     Floats dst, int64_t dst_stride) override {
    cpu::gather_rows(src.data(), src_stride, indices.data(), static_cast<int64_t>(indices.size()),
                     row_len, dst.data(), dst_stride, kThreads);
    return dst;
  }
  Floats matmul(const Floats& x, const Floats& w, int64_t m, int64_t n, int64_t k,
                Precision) override {
    cpu::StaticMatmul product(engine_, m, cpu::WeightMatrix{DType::f32, w.data(), nullptr, n, k},
                              false);
    std::vector<char> workspace(product.workspace_bytes() + 64);
    void* aligned = workspace.data() + (64 - reinterpret_cast<uintptr_t>(workspace.data()) % 64) % 64;
    Floats y(m * n, std::nanf(""));
    product.run(x.data(), nullptr, y.data(), aligned);
    return y;
  }
  std::vector<Precision> matmul_outputs() const override { return {Precision::f32}; }
  Floats gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const Floats& a, int64_t lda, const Floats& b,
                          int64_t ldb, float beta, Floats c, int64_t ldc) override {
    cpu::gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    return c;
  }

  void layer_norm_backward(const Floats& dout, const Floats& x, const Floats& mean,
                           const Floats& rstd, const Floats& gamma, int64_t rows, int64_t dim,
                           Floats& dx, Floats& dgamma, Floats& dbeta) override {
    cpu::layer_norm_backward<float>(dout.data(), x.data(), mean.data(), rstd.data(), gamma.data(),
                                    rows, dim, dx.data(), dgamma.data(), dbeta.data(), kThreads);
  }
  void bias_backward(const Floats& dy, int64_t rows, int64_t dim, Floats& dbias) override {
    cpu::bias_backward<float>(dy.data(), rows, dim, dbias.data(), kThreads);
  }
  void bias_relu_backward(Floats& dy, const Floats& y, int64_t rows,
                          int64_t dim, Floats& dbias) override {
    cpu::bias_relu_backward<float>(dy.data(), y.data(), rows, dim, dbias.data(), kThreads);
  }
  void embedding_backward(const Floats& dout, const Ints& ids,
                          int64_t dim, int64_t, float scale, Floats& dtable) override {
    cpu::embedding_backward<float>(dout.data(), ids.data(), static_cast<int64_t>(ids.size()), dim,
                                   scale, dtable.data(), kThreads);
  }
  AttentionGradients attention_backward(const AttentionBackwardCall& c) override {
    std::vector<uint8_t> mask;
    if (c.dropout > 0) {
      mask.resize(c.probabilities.size());
      cpu::make_dropout_mask(c.seed, c.site, mask.size(), c.dropout, mask.data(), kThreads);
    }
    AttentionGradients g{Floats(c.q.size(), std::nanf("")),
                         Floats(c.k.size(), std::nanf("")),
                         Floats(c.v.size(), std::nanf(""))};
    Floats scratch(kThreads * 2 * c.shape.key_len);
    cpu::attention_backward<float>(
        c.dout.data(), c.q_strides, c.q.data(), c.q_strides, c.k.data(), c.k_strides, c.v.data(),
        c.k_strides, c.probabilities.data(), mask.empty() ? nullptr : mask.data(),
        static_cast<float>(1.0 / (1.0 - c.dropout)), g.dq.data(), c.q_strides, g.dk.data(),
        c.k_strides, g.dv.data(), c.k_strides, c.shape, scratch.data(), kThreads);
    return g;
  }
  // The CPU kernel has no gradient scale: the adapter applies it, as the CPU trainer does.
  void cross_entropy(Floats& logits, const Ints& targets, int64_t rows, int64_t vocab,
                     float smoothing, int32_t ignore_id, bool write_gradient, float gradient_scale,
                     std::vector<double>& loss, std::vector<double>& nll) override {
    loss.assign(rows, std::nan(""));
    nll.assign(rows, std::nan(""));
    cpu::label_smoothed_cross_entropy<float>(logits.data(), targets.data(), rows, vocab, smoothing,
                                             ignore_id, write_gradient, loss.data(), nll.data(),
                                             kThreads);
    if (write_gradient)
      for (float& g : logits) g *= gradient_scale;
  }
  Floats dropout(Floats x, uint64_t seed, uint64_t site, float p) override {
    std::vector<uint8_t> mask(x.size());
    cpu::make_dropout_mask(seed, site, x.size(), p, mask.data(), kThreads);
    cpu::apply_dropout(x.data(), mask.data(), x.size(), static_cast<float>(1.0 / (1.0 - p)),
                       kThreads);
    return x;
  }
  void adam_step(Floats& parameters, const Floats& gradients, Floats& m, Floats& v,
                 const AdamConstants& constants) override {
    cpu::adam_step(parameters.data(), gradients.data(), m.data(), v.data(),
                   static_cast<int64_t>(parameters.size()), constants, kThreads);
  }
  double sum_of_squares(const Floats& x) override {
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
