#pragma once
// One test body per op over every device. A KernelDevice runs one device's kernels on host
// vectors (it uploads the inputs, calls xf::cpu:: or xf::cuda::, and downloads the outputs as
// f32), so that each op's test file (tests/kernels/<op>_test.cc) writes its double reference,
// its cases and its assertions once, as TEST_P(..., KernelTest) over the devices:
//   cpu        xf::cpu's kernels: KernelDevice itself; always present.
//   cuda_f32   xf::cuda's kernels on f32 buffers  } kernel_device_cuda.cc, built with CUDA;
//   cuda_f16   xf::cuda's kernels on f16 buffers  } they skip, saying why, without a GPU.
// The CUDA host emulation (tests/cuda/runtime_host_emulation.cc) is not a device here: it
// implements xf::cuda's kernels by calling the CPU kernels, so over it these bodies would test
// the CPU kernels a second time and the CUDA kernels not at all; it serves the runtime's and
// trainer's CUDA code instead (the host_emulated.* tests).
//
// Inputs go in as f32 values the device can hold (device.representable(); the reference reads
// the same values); an op a device lacks throws, and a suite is instantiated only over the
// devices that have its op (devices_with()).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "random_inputs.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/dropout.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/gather.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels/optimizer.h"
#include "xf/kernels/recurrent.h"
#include "xf/kernels/softmax.h"
#include "xf/kernels/types.h"

namespace xf::test {

using cpu::AttentionShape;
using cpu::HeadStrides;
using Floats = std::vector<float>;
using Ints = std::vector<int32_t>;

enum class Precision { f32, f16 };
enum class DeviceKind { cpu, cuda };
// What a device may lack; the suites that need one run only where it is.
enum class Feature {
  f32_only_ops,     // log_softmax and the trainer's kernels: f32 buffers only
  split_heads,      // add_bias_split_heads (CUDA)
  convert,          // f32 <-> f16 conversion (CUDA)
  gather_int32,     // gather_rows of int32 rows (CUDA)
  dropout_values,   // attention_dropout_values (CUDA)
};
// The output buffer that add_bias_residual_layer_norm writes, when not its own.
enum class Alias { none, x, residual };

struct AttentionResult {
  Floats out;            // the whole output buffer
  Floats probabilities;  // [batch, heads, query_len, key_len], when asked for
};

// q, k and v are views into one input buffer (at q_at, k_at, v_at with their strides); the
// output is a view into its own buffer of out_size floats, or into the input at q when
// out_over_q. key_lengths empty: no padding; causal_offset < 0: no causal mask.
struct AttentionCall {
  Floats input;
  int64_t q_at = 0, k_at = 0, v_at = 0;
  HeadStrides q, k, v, out;
  int64_t out_size = 0;
  bool out_over_q = false;
  AttentionShape shape;
  Ints key_lengths;
  int64_t causal_offset = -1;
  bool probabilities = false;
  int cpu_threads = 2;
};

// The trainer's attention backward: q, k, v, dout as separate [batch, len, width] buffers with
// the given strides, probabilities from the forward, dropout (seed, site, p) applied to them
// where p > 0.
struct AttentionBackwardCall {
  Floats dout, q, k, v, probabilities;
  HeadStrides q_strides, k_strides;
  AttentionShape shape;
  uint64_t seed = 0, site = 0;
  float dropout = 0.0f;
};
struct AttentionGradients {
  Floats dq, dk, dv;
};

class KernelDevice {
 public:
  virtual ~KernelDevice() = default;
  virtual std::string name() const { return "cpu"; }
  virtual DeviceKind kind() const { return DeviceKind::cpu; }
  virtual Precision precision() const { return Precision::f32; }  // of activations and weights
  virtual bool has(Feature feature) const { return feature == Feature::f32_only_ops; }
  virtual std::string unavailable_reason() const { return {}; }  // empty: usable here
  // Relative tolerance of results stored in `p` (f32: 1e-5, f16: 1e-2).
  static double tolerance(Precision p) { return p == Precision::f16 ? 1e-2 : 1e-5; }
  double tolerance() const { return tolerance(precision()); }
  // The values a buffer of this device's precision holds for `values`.
  Floats representable(Floats values) const;

  // The kernels, as their headers (xf/kernels_cpu/, xf/kernels_cuda/) state them, run here by
  // xf::cpu's at two threads (the kernels split rows or heads between them); a null pointer is
  // an input not given, `out` an output precision.
  virtual Floats embed(const Floats& table, int64_t vocab, int64_t dim, const Ints& ids,
               const Ints& positions, float scale, PositionEncoding encoding, Precision) {
    Floats out(ids.size() * dim);
    cpu::embed(cpu::WeightMatrix{DType::f32, table.data(), nullptr, vocab, dim}, ids.data(),
               positions.data(), static_cast<int64_t>(ids.size()), scale, out.data(), kCpuThreads,
               encoding);
    return out;
  }
  virtual std::vector<Precision> embed_outputs() const { return {Precision::f32}; }

  virtual Floats layer_norm(const Floats& x, const Floats* bias, const Floats* residual,
                    const Floats& gamma, const Floats& beta, float epsilon, int64_t rows,
                    int64_t dim, Alias alias, Floats* mean, Floats* rstd) {
    Floats x_copy = x, residual_copy = residual ? *residual : Floats();
    Floats separate(rows * dim, std::nanf(""));
    Floats& out = alias == Alias::x ? x_copy : alias == Alias::residual ? residual_copy : separate;
    if (mean) mean->assign(rows, std::nanf(""));
    if (rstd) rstd->assign(rows, std::nanf(""));
    cpu::add_bias_residual_layer_norm(x_copy.data(), get(bias), residual ? residual_copy.data() : nullptr,
                                      gamma.data(), beta.data(), epsilon, rows, dim, out.data(),
                                      mean ? mean->data() : nullptr, rstd ? rstd->data() : nullptr,
                                      kCpuThreads);
    return out;
  }
  virtual Floats add_bias_residual(Floats x, const Floats* bias, const Floats* residual, int64_t rows,
                           int64_t dim) {
    cpu::add_bias_residual(x.data(), get(bias), get(residual), rows, dim, kCpuThreads);
    return x;
  }
  virtual Floats bias_relu(Floats x, const Floats* bias, int64_t rows, int64_t dim) {
    cpu::bias_relu(x.data(), get(bias), rows, dim, kCpuThreads);
    return x;
  }
  virtual Floats bias_activation(Floats x, const Floats* bias, int64_t rows, int64_t dim,
                         Activation activation) {
    cpu::bias_activation(x.data(), get(bias), rows, dim, activation, kCpuThreads);
    return x;
  }

  // One SSRU step (recurrent.h): in [rows, 2 dim]; `cell` the whole state, updated in place;
  // state_rows empty: row r's state is row r. Returns out [rows, dim].
  virtual Floats ssru_step(const Floats& in, Floats& cell, const Ints& state_rows, bool first, int64_t rows,
                           int64_t dim) {
    Floats out(rows * dim, std::nanf(""));
    cpu::ssru_step(in.data(), cell.data(), state_rows.empty() ? nullptr : state_rows.data(), first, rows, dim,
                   out.data(), kCpuThreads);
    return out;
  }

  virtual AttentionResult attention(const AttentionCall& c) {
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
  // One decoder step: query rows (q_row_stride apart) against cache positions 0..step, output
  // [rows, heads * head_dim]. The CPU runtime's step is attention() with the step as causal offset.
  virtual Floats cached_attention(const Floats& q, int64_t q_row_stride, const Floats& k_cache,
                          const Floats& v_cache, HeadStrides cache, int64_t rows, int64_t heads,
                          int64_t head_dim, int64_t max_len, int64_t step) {
    const int64_t d_model = heads * head_dim;
    Floats out(rows * d_model, std::nanf("")), scratch(kCpuThreads * max_len);
    cpu::attention(q.data(), {q_row_stride, head_dim, q_row_stride}, k_cache.data(), cache,
                   v_cache.data(), cache, out.data(), {d_model, head_dim, d_model},
                   {rows, heads, 1, max_len, head_dim}, nullptr, step, nullptr, scratch.data(),
                   kCpuThreads);
    return out;
  }

  virtual Floats log_softmax(Floats logits, int64_t rows, int64_t vocab) {
    cpu::log_softmax(logits.data(), rows, vocab, kCpuThreads);
    return logits;
  }
  // Empty offsets: none.
  virtual void log_softmax_top_k(const Floats& logits, const Floats& offsets, int64_t rows, int64_t vocab,
                         int64_t k, Floats& values, Ints& indices) {
    values.assign(rows * k, std::nanf(""));
    indices.assign(rows * k, -1);
    cpu::log_softmax_top_k(logits.data(), offsets.empty() ? nullptr : offsets.data(), rows, vocab,
                           k, values.data(), indices.data(), kCpuThreads);
  }
  virtual Floats gather_rows(const Floats& src, int64_t src_stride, const Ints& indices, int64_t row_len,
                     Floats dst, int64_t dst_stride) {
    cpu::gather_rows(src.data(), src_stride, indices.data(), static_cast<int64_t>(indices.size()),
                     row_len, dst.data(), dst_stride, kCpuThreads);
    return dst;
  }
  // y = x W^T, x [m, k], W [n, k].
  virtual Floats matmul(const Floats& x, const Floats& w, int64_t m, int64_t n, int64_t k,
                Precision) {
    cpu::StaticMatmul product(engine_, m, cpu::WeightMatrix{DType::f32, w.data(), nullptr, n, k},
                              false);
    std::vector<char> workspace(product.workspace_bytes() + 64);
    void* aligned = workspace.data() + (64 - reinterpret_cast<uintptr_t>(workspace.data()) % 64) % 64;
    Floats y(m * n, std::nanf(""));
    product.run(x.data(), nullptr, y.data(), aligned);
    return y;
  }
  virtual std::vector<Precision> matmul_outputs() const { return {Precision::f32}; }
  // C = alpha op(A) op(B) + beta C, row-major with leading dimensions; C is f32 everywhere.
  virtual Floats gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const Floats& a, int64_t lda, const Floats& b,
                          int64_t ldb, float beta, Floats c, int64_t ldc) {
    cpu::gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    return c;
  }

  // The trainer's kernels, f32 (Feature::f32_only_ops). Gradients accumulate into dx, dgamma,
  // dbeta, dbias and dtable, as the kernels do.
  virtual void layer_norm_backward(const Floats& dout, const Floats& x, const Floats& mean,
                           const Floats& rstd, const Floats& gamma, int64_t rows, int64_t dim,
                           Floats& dx, Floats& dgamma, Floats& dbeta) {
    cpu::layer_norm_backward<float>(dout.data(), x.data(), mean.data(), rstd.data(), gamma.data(),
                                    rows, dim, dx.data(), dgamma.data(), dbeta.data(), kCpuThreads);
  }
  virtual void bias_backward(const Floats& dy, int64_t rows, int64_t dim, Floats& dbias) {
    cpu::bias_backward<float>(dy.data(), rows, dim, dbias.data(), kCpuThreads);
  }
  virtual void bias_relu_backward(Floats& dy, const Floats& y, int64_t rows,
                          int64_t dim, Floats& dbias) {
    cpu::bias_relu_backward<float>(dy.data(), y.data(), rows, dim, dbias.data(), kCpuThreads);
  }
  // x and f: views with in_stride; dx and df: views with d_stride (written at those positions).
  virtual void ssru_scan_forward(const Floats& x, const Floats& f, int64_t in_stride, int64_t batch, int64_t len,
                                 int64_t dim, Floats& cell, Floats& out) {
    cpu::ssru_scan_forward<float>(x.data(), f.data(), in_stride, batch, len, dim, cell.data(), out.data(),
                                  kCpuThreads);
  }
  virtual void ssru_scan_backward(const Floats& dout, const Floats& x, const Floats& f, int64_t in_stride,
                                  const Floats& cell, int64_t batch, int64_t len, int64_t dim, Floats& dx, Floats& df,
                                  int64_t d_stride) {
    cpu::ssru_scan_backward<float>(dout.data(), x.data(), f.data(), in_stride, cell.data(), batch, len, dim,
                                   dx.data(), df.data(), d_stride, kCpuThreads);
  }
  virtual void embedding_backward(const Floats& dout, const Ints& ids,
                          int64_t dim, int64_t, float scale, Floats& dtable) {
    cpu::embedding_backward<float>(dout.data(), ids.data(), static_cast<int64_t>(ids.size()), dim,
                                   scale, dtable.data(), kCpuThreads);
  }
  virtual AttentionGradients attention_backward(const AttentionBackwardCall& c) {
    std::vector<uint8_t> mask;
    if (c.dropout > 0) {
      mask.resize(c.probabilities.size());
      cpu::make_dropout_mask(c.seed, c.site, mask.size(), c.dropout, mask.data(), kCpuThreads);
    }
    AttentionGradients g{Floats(c.q.size(), std::nanf("")),
                         Floats(c.k.size(), std::nanf("")),
                         Floats(c.v.size(), std::nanf(""))};
    Floats scratch(kCpuThreads * 2 * c.shape.key_len);
    cpu::attention_backward<float>(
        c.dout.data(), c.q_strides, c.q.data(), c.q_strides, c.k.data(), c.k_strides, c.v.data(),
        c.k_strides, c.probabilities.data(), mask.empty() ? nullptr : mask.data(),
        static_cast<float>(1.0 / (1.0 - c.dropout)), g.dq.data(), c.q_strides, g.dk.data(),
        c.k_strides, g.dv.data(), c.k_strides, c.shape, scratch.data(), kCpuThreads);
    return g;
  }
  // The gradient, times gradient_scale, over the logits when write_gradient (the CPU kernel has
  // no gradient scale: applied here, as the CPU trainer does).
  virtual void cross_entropy(Floats& logits, const Ints& targets, int64_t rows, int64_t vocab,
                     float smoothing, int32_t ignore_id, bool write_gradient, float gradient_scale,
                     std::vector<double>& loss, std::vector<double>& nll) {
    loss.assign(rows, std::nan(""));
    nll.assign(rows, std::nan(""));
    cpu::label_smoothed_cross_entropy<float>(logits.data(), targets.data(), rows, vocab, smoothing,
                                             ignore_id, write_gradient, loss.data(), nll.data(),
                                             kCpuThreads);
    if (write_gradient)
      for (float& g : logits) g *= gradient_scale;
  }
  virtual Floats dropout(Floats x, uint64_t seed, uint64_t site, float p) {
    std::vector<uint8_t> mask(x.size());
    cpu::make_dropout_mask(seed, site, x.size(), p, mask.data(), kCpuThreads);
    cpu::apply_dropout(x.data(), mask.data(), x.size(), static_cast<float>(1.0 / (1.0 - p)),
                       kCpuThreads);
    return x;
  }
  virtual void adam_step(Floats& parameters, const Floats& gradients, Floats& m, Floats& v,
                 const AdamConstants& constants) {
    cpu::adam_step(parameters.data(), gradients.data(), m.data(), v.data(),
                   static_cast<int64_t>(parameters.size()), constants, kCpuThreads);
  }
  virtual double sum_of_squares(const Floats& x) {
    return cpu::sum_of_squares(x.data(), static_cast<int64_t>(x.size()), kCpuThreads);
  }

  // CUDA-only (Feature::split_heads, convert, gather_int32; the base class throws). The split
  // writes `parts` (Q, K, V or K, V) of packed rows plus bias into outputs[] at position_offset.
  virtual void add_bias_split_heads(const Floats& packed, int64_t packed_at, int64_t packed_stride,
                                    const Floats& bias, int64_t bias_at, int parts, int64_t batch,
                                    int64_t len, int64_t heads, int64_t head_dim, Floats* outputs,
                                    const HeadStrides* strides, int64_t position_offset);
  // f32 -> f16 -> f32: the f16 bits and the widened values.
  virtual void convert(const Floats& in, std::vector<uint16_t>& half_bits, Floats& back);
  virtual Ints gather_rows_int32(const Ints& src, int64_t src_stride, const Ints& indices,
                                 int64_t row_len, Ints dst, int64_t dst_stride);

  // dropout(P) V, the trainer's attention forward after the probabilities
  // (Feature::dropout_values).
  virtual Floats attention_dropout_values(const AttentionBackwardCall& call);

 protected:
  static constexpr int kCpuThreads = 2;

 private:
  static const float* get(const Floats* v) { return v == nullptr ? nullptr : v->data(); }
  cpu::CpuEngine engine_{kCpuThreads};
};

// Every device this executable has, and those with a feature / of a precision.
std::vector<const KernelDevice*> all_devices();
std::vector<const KernelDevice*> devices_with(Feature feature);
std::vector<const KernelDevice*> devices_of(Precision precision);
const KernelDevice& cpu_device();
#ifdef XF_TEST_CUDA_DEVICES
const KernelDevice& cuda_device(Precision precision);  // kernel_device_cuda.cc
#endif

// A test over one device: skips, saying why, where the device cannot run; fresh random inputs
// (the seed printed on failure, XF_TEST_SEED replays).
class KernelTest : public ::testing::TestWithParam<const KernelDevice*> {
 protected:
  void SetUp() override {
    const std::string reason = GetParam()->unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << "skipped: " << reason;
  }
  // Kernels are const-free calls on a shared adapter.
  KernelDevice& device() const { return const_cast<KernelDevice&>(*GetParam()); }
  Precision precision() const { return GetParam()->precision(); }
  double tolerance() const { return GetParam()->tolerance(); }
  Floats uniform(size_t count, float low, float high) {
    return GetParam()->representable(random.uniform(count, low, high));
  }

  RandomInputs random;
  ::testing::ScopedTrace seed_trace{__FILE__, __LINE__, random.describe()};
};

std::string device_name(const ::testing::TestParamInfo<const KernelDevice*>& info);
inline void PrintTo(const KernelDevice* device, std::ostream* out) { *out << device->name(); }

// INSTANTIATE over a device list, each test named after its device (.../cpu, .../cuda_f16). A
// suite whose op no device of this build has (a CUDA-only op without CUDA) has no test.
#define XF_KERNEL_TEST_DEVICES(suite, devices)                                             \
  GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(suite);                                    \
  INSTANTIATE_TEST_SUITE_P(, suite, ::testing::ValuesIn(devices), ::xf::test::device_name)

// Every |actual[i] - expected[i]| <= allowed(i) (a NaN fails); reports the first few misses.
void expect_within(const Floats& actual, const std::vector<double>& expected,
                   const std::function<double(size_t)>& allowed);
// allowed = tolerance * (|expected[i]| + scale): relative error, with `scale` the magnitude below
// which relative error means nothing.
void expect_close(const Floats& actual, const std::vector<double>& expected, double scale,
                  double tolerance);

// Relative to the largest expected entry: sums whose terms cancel (gradients) are only as exact
// as their largest terms.
void expect_close_to_largest(const Floats& actual, const std::vector<double>& expected,
                             double tolerance);

std::vector<double> to_double(const Floats& values);

// Value of an IEEE-style binary float with the given field widths, decoded from its bits with
// ldexp (independent of the bit tricks in format/ and kernels_cpu/): f16 is (5, 10), bf16 (8, 7).
double decode_binary_float(uint32_t bits, int exponent_bits, int mantissa_bits);

}  // namespace xf::test
