// The trainer's CUDA backward kernels (xf/kernels_cuda/backward.h) against double-precision
// references on fresh random inputs: the CPU trainer's kernels instantiated for double
// (xf/kernels_cpu/backward.h, themselves checked by finite differences in tests/trainer), plain
// double loops, and xf::trainer's own dropout masks and Adam. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cuda_test_support.h"
#include "random_inputs.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/dropout.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels/optimizer.h"
#include "xf/kernels/softmax.h"
#include "xf/trainer/optimizer.h"

namespace xf::test {
namespace {

std::vector<double> to_double(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

std::vector<float> to_float_vector(const std::vector<double>& values) {
  return std::vector<float>(values.begin(), values.end());
}

double max_abs(const std::vector<double>& values) {
  double m = 0;
  for (double v : values) m = std::max(m, std::fabs(v));
  return m;
}

// Relative error against the largest reference entry: sums whose terms cancel are only as exact
// as their largest terms.
void expect_near_vector(const std::vector<float>& actual, const std::vector<double>& expected,
                        double tolerance) {
  expect_close(actual, expected, max_abs(expected), tolerance);
}

TEST(cuda_trainer_kernels, DropoutKeepsExactlyTheCpuTrainersMask) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (float p : {0.1f, 0.5f}) {
    const int64_t count = 10007;
    const uint64_t seed = static_cast<uint64_t>(random.integer(0, 1 << 30)), site = 0x200000103;
    const std::vector<float> x = random.uniform(count, -2.0f, 2.0f);
    DeviceBuffer<float> device_x(x);
    cuda::dropout(device_x.get(), count, cuda::make_dropout_rule(seed, site, p), nullptr);
    std::vector<uint8_t> mask(count);
    cpu::make_dropout_mask(seed, site, count, p, mask.data(), 1);
    std::vector<float> expected = x;
    cpu::apply_dropout(expected.data(), mask.data(), count, 1.0f / (1.0f - p), 1);
    EXPECT_EQ(device_x.download(), expected) << "p = " << p;
    int64_t kept = 0;
    for (uint8_t m : mask) kept += m;
    EXPECT_NEAR(static_cast<double>(kept) / count, 1.0 - p, 0.03) << "p = " << p;
  }
  // p = 0 leaves the values alone.
  const std::vector<float> x = random.uniform(100, -1.0f, 1.0f);
  DeviceBuffer<float> device_x(x);
  cuda::dropout(device_x.get(), 100, cuda::make_dropout_rule(1, 2, 0.0f), nullptr);
  EXPECT_EQ(device_x.download(), x);
  EXPECT_THROW(cuda::make_dropout_rule(1, 2, 1.0f), Error);
}

TEST(cuda_trainer_kernels, LayerNormBackwardMatchesDoubleReference) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (auto [rows, dim] : {std::pair<int64_t, int64_t>{37, 96}, {1000, 300}, {3, 1030}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " dim " + std::to_string(dim));
    const std::vector<float> x = random.uniform(rows * dim, -2.0f, 3.0f);
    const std::vector<float> gamma = random.uniform(dim, 0.5f, 1.5f);
    const std::vector<float> dout = random.uniform(rows * dim, -1.0f, 1.0f);
    // dx, dgamma, dbeta start non-zero: the kernel accumulates.
    const std::vector<float> dx0 = random.uniform(rows * dim, -1.0f, 1.0f);
    const std::vector<float> dgamma0 = random.uniform(dim, -1.0f, 1.0f);
    const std::vector<float> dbeta0 = random.uniform(dim, -1.0f, 1.0f);
    std::vector<float> mean(rows), rstd(rows);
    for (int64_t r = 0; r < rows; ++r) {
      double mu = 0, var = 0;
      for (int64_t c = 0; c < dim; ++c) mu += x[r * dim + c];
      mu /= dim;
      for (int64_t c = 0; c < dim; ++c) var += (x[r * dim + c] - mu) * (x[r * dim + c] - mu);
      mean[r] = static_cast<float>(mu);
      rstd[r] = static_cast<float>(1.0 / std::sqrt(var / dim + 1e-6));
    }
    std::vector<double> dx = to_double(dx0), dgamma = to_double(dgamma0),
                        dbeta = to_double(dbeta0);
    cpu::layer_norm_backward<double>(to_double(dout).data(), to_double(x).data(),
                                     to_double(mean).data(), to_double(rstd).data(),
                                     to_double(gamma).data(), rows, dim, dx.data(),
                                     dgamma.data(), dbeta.data(), 1);
    DeviceBuffer<float> d_x(x), d_gamma(gamma), d_dout(dout), d_mean(mean), d_rstd(rstd),
        d_dx(dx0), d_dgamma(dgamma0), d_dbeta(dbeta0),
        workspace(cuda::column_reduction_workspace_floats(rows, dim));
    cuda::layer_norm_backward(d_dout.get(), d_x.get(), d_mean.get(), d_rstd.get(), d_gamma.get(),
                              rows, dim, d_dx.get(), d_dgamma.get(), d_dbeta.get(),
                              workspace.get(), nullptr);
    expect_near_vector(d_dx.download(), dx, kF32Tolerance);
    expect_near_vector(d_dgamma.download(), dgamma, kF32Tolerance);
    expect_near_vector(d_dbeta.download(), dbeta, kF32Tolerance);
  }
}

TEST(cuda_trainer_kernels, BiasAndReluBackwardMatchDoubleReference) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (auto [rows, dim] : {std::pair<int64_t, int64_t>{5, 7}, {2049, 300}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " dim " + std::to_string(dim));
    std::vector<float> y = random.uniform(rows * dim, -1.0f, 1.0f);
    for (float& v : y) v = std::max(v, 0.0f);  // a ReLU output: about half exact zeros
    const std::vector<float> dy = random.uniform(rows * dim, -1.0f, 1.0f);
    const std::vector<float> dbias0 = random.uniform(dim, -1.0f, 1.0f);

    std::vector<double> dy_ref = to_double(dy), dbias_ref = to_double(dbias0);
    cpu::bias_relu_backward<double>(dy_ref.data(), to_double(y).data(), rows, dim,
                                    dbias_ref.data(), 1);
    DeviceBuffer<float> d_dy(dy), d_y(y), d_dbias(dbias0),
        workspace(cuda::column_reduction_workspace_floats(rows, dim));
    cuda::bias_relu_backward(d_dy.get(), d_y.get(), rows, dim, d_dbias.get(), workspace.get(),
                             nullptr);
    EXPECT_EQ(d_dy.download(), to_float_vector(dy_ref));  // a mask: exact
    expect_near_vector(d_dbias.download(), dbias_ref, kF32Tolerance);

    std::vector<double> bias_only = to_double(dbias0);
    cpu::bias_backward<double>(to_double(dy).data(), rows, dim, bias_only.data(), 1);
    DeviceBuffer<float> d_dy2(dy), d_dbias2(dbias0);
    cuda::bias_backward(d_dy2.get(), rows, dim, d_dbias2.get(), workspace.get(), nullptr);
    expect_near_vector(d_dbias2.download(), bias_only, kF32Tolerance);
  }
}

TEST(cuda_trainer_kernels, EmbeddingBackwardScatterAddsRepeatedIds) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t count = 300, dim = 40, vocab = 17;  // every id repeats many times
  const float scale = 3.25f;
  std::vector<int32_t> ids(count);
  for (int32_t& id : ids) id = static_cast<int32_t>(random.integer(0, vocab - 1));
  const std::vector<float> dout = random.uniform(count * dim, -1.0f, 1.0f);
  const std::vector<float> table0 = random.uniform(vocab * dim, -1.0f, 1.0f);
  std::vector<double> expected = to_double(table0);
  cpu::embedding_backward<double>(to_double(dout).data(), ids.data(), count, dim, scale,
                                  expected.data(), 1);
  DeviceBuffer<float> d_dout(dout), d_table(table0);
  DeviceBuffer<int32_t> d_ids(ids);
  cuda::embedding_backward(d_dout.get(), d_ids.get(), count, dim, vocab, scale, d_table.get(),
                           nullptr);
  expect_near_vector(d_table.download(), expected, kF32Tolerance);
}

// The attention backward for one layout (the trainer's packed [B, len, width] views).
struct AttentionCase {
  int64_t batch, heads, query_len, key_len, head_dim;
  bool causal, padded;
  float dropout;
};

TEST(cuda_trainer_kernels, AttentionBackwardMatchesDoubleReference) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const AttentionCase cases[] = {{2, 3, 7, 9, 16, false, true, 0.0f},
                                 {3, 2, 8, 8, 8, true, false, 0.0f},
                                 {2, 2, 6, 11, 32, false, true, 0.3f},
                                 {1, 4, 40, 40, 64, true, false, 0.1f}};
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE("batch " + std::to_string(c.batch) + " heads " + std::to_string(c.heads) +
                 " tq " + std::to_string(c.query_len) + " tk " + std::to_string(c.key_len) +
                 (c.causal ? " causal" : "") + " dropout " + std::to_string(c.dropout));
    const int64_t width = c.heads * c.head_dim;
    const int64_t nq = c.batch * c.query_len * width, nk = c.batch * c.key_len * width;
    const std::vector<float> q = random.uniform(nq, -1.5f, 1.5f), dout = random.uniform(nq, -1, 1);
    const std::vector<float> k = random.uniform(nk, -1.5f, 1.5f), v = random.uniform(nk, -1, 1);
    std::vector<int32_t> key_lengths(c.batch, static_cast<int32_t>(c.key_len));
    if (c.padded)
      for (int32_t& length : key_lengths)
        length = static_cast<int32_t>(random.integer(1, c.key_len));
    const cpu::HeadStrides qs{c.query_len * width, c.head_dim, width};
    const cpu::HeadStrides ks{c.key_len * width, c.head_dim, width};
    cpu::AttentionShape shape{c.batch, c.heads, c.query_len, c.key_len, c.head_dim};
    const int64_t score_count = c.batch * c.heads * c.query_len * c.key_len;
    const uint64_t seed = static_cast<uint64_t>(random.integer(0, 1 << 30)), site = 0x100000202;
    std::vector<uint8_t> mask(score_count, 1);
    if (c.dropout > 0) cpu::make_dropout_mask(seed, site, score_count, c.dropout, mask.data(), 1);
    const double keep_scale = 1.0 / (1.0 - c.dropout);

    // Reference forward (for P and, with dropout, the dropped-out output) and backward.
    std::vector<double> probabilities(score_count), out(nq), scratch(4 * c.key_len);
    cpu::attention_forward<double>(
        to_double(q).data(), qs, to_double(k).data(), ks, to_double(v).data(), ks, out.data(), qs,
        shape, c.padded ? key_lengths.data() : nullptr, c.causal ? 0 : -1, probabilities.data(),
        c.dropout > 0 ? mask.data() : nullptr, keep_scale, scratch.data(), 1);
    std::vector<double> dq(nq), dk(nk), dv(nk);
    cpu::attention_backward<double>(to_double(dout).data(), qs, to_double(q).data(), qs,
                                    to_double(k).data(), ks, to_double(v).data(), ks,
                                    probabilities.data(), c.dropout > 0 ? mask.data() : nullptr,
                                    keep_scale, dq.data(), qs, dk.data(), ks, dv.data(), ks,
                                    shape, scratch.data(), 1);

    const cuda::HeadStrides cqs{qs.batch, qs.head, qs.position};
    const cuda::HeadStrides cks{ks.batch, ks.head, ks.position};
    const cuda::AttentionShape cshape{c.batch, c.heads, c.query_len, c.key_len, c.head_dim};
    const cuda::DropoutRule rule = cuda::make_dropout_rule(seed, site, c.dropout);
    DeviceBuffer<float> d_q(q), d_k(k), d_v(v), d_dout(dout),
        d_p(to_float_vector(probabilities)), d_dq(nq), d_dk(nk), d_dv(nk),
        workspace(cuda::attention_backward_workspace_floats(cshape));
    cuda::attention_backward(d_dout.get(), cqs, d_q.get(), cqs, d_k.get(), cks, d_v.get(), cks,
                             d_p.get(), c.dropout > 0 ? &rule : nullptr, d_dq.get(), cqs,
                             d_dk.get(), cks, d_dv.get(), cks, cshape, workspace.get(), nullptr);
    expect_near_vector(d_dq.download(), dq, kF32Tolerance);
    expect_near_vector(d_dk.download(), dk, kF32Tolerance);
    expect_near_vector(d_dv.download(), dv, kF32Tolerance);

    if (c.dropout > 0) {  // the forward's dropout(P) V
      DeviceBuffer<float> d_out(nq);
      cuda::attention_dropout_values(d_p.get(), rule, d_v.get(), cks, d_out.get(), cqs, cshape,
                                     nullptr);
      expect_near_vector(d_out.download(), out, kF32Tolerance);
    }
  }
}

TEST(cuda_trainer_kernels, CrossEntropyMatchesDoubleReference) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (auto [rows, vocab] : {std::pair<int64_t, int64_t>{9, 37}, {6, 5003}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " vocab " + std::to_string(vocab));
    const float smoothing = 0.1f, gradient_scale = 1024.0f;
    const std::vector<float> logits = random.uniform(rows * vocab, -6.0f, 6.0f);
    std::vector<int32_t> targets(rows);
    for (int32_t& t : targets) t = static_cast<int32_t>(random.integer(0, vocab - 1));
    targets[1] = -1;  // padding: scores nothing
    std::vector<double> expected = to_double(logits), loss(rows), nll(rows);
    cpu::label_smoothed_cross_entropy<double>(expected.data(), targets.data(), rows, vocab,
                                              smoothing, -1, true, loss.data(), nll.data(), 1);
    for (double& g : expected) g *= gradient_scale;
    EXPECT_EQ(loss[1], 0.0);

    DeviceBuffer<float> d_logits(logits);
    DeviceBuffer<int32_t> d_targets(targets);
    DeviceBuffer<double> d_loss(rows), d_nll(rows);
    // Loss only: logits untouched.
    cuda::label_smoothed_cross_entropy(d_logits.get(), d_targets.get(), rows, vocab, smoothing,
                                       -1, false, gradient_scale, d_loss.get(), d_nll.get(),
                                       nullptr);
    EXPECT_EQ(d_logits.download(), logits);
    cuda::label_smoothed_cross_entropy(d_logits.get(), d_targets.get(), rows, vocab, smoothing,
                                       -1, true, gradient_scale, d_loss.get(), d_nll.get(),
                                       nullptr);
    const std::vector<double> got_loss = d_loss.download(), got_nll = d_nll.download();
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_NEAR(got_loss[r], loss[r], kF32Tolerance * (std::fabs(loss[r]) + 1)) << "row " << r;
      EXPECT_NEAR(got_nll[r], nll[r], kF32Tolerance * (std::fabs(nll[r]) + 1)) << "row " << r;
    }
    // Relative error, with entries below 1 (a thousandth of gradient_scale) held to 1e-5
    // absolute.
    expect_close(d_logits.download(), expected, 1.0, kF32Tolerance);
  }
}

TEST(cuda_trainer_kernels, AdamStepEqualsCpuOptimizer) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t count = 4099;
  const std::vector<float> parameters = random.uniform(count, -1.0f, 1.0f);
  const std::vector<float> gradients = random.uniform(count, -30.0f, 30.0f);
  std::vector<float> m = random.uniform(count, -0.1f, 0.1f), v = random.uniform(count, 0, 0.01f);
  const int64_t previous_steps = 4;
  const double lr = 7e-4, gradient_scale = 1.0 / 250;

  std::vector<float> cpu_parameters = parameters;
  trainer::Adam adam(count, trainer::AdamOptions{}, 1);
  adam.set_state(trainer::AdamState{previous_steps, m, v});
  adam.step(cpu_parameters.data(), gradients.data(), lr, gradient_scale);

  // The constants as Adam::step derives them (optimizer.cc).
  const trainer::AdamOptions options;
  const double t = previous_steps + 1;
  cuda::AdamConstants constants;
  constants.beta1 = static_cast<float>(options.beta1);
  constants.beta2 = static_cast<float>(options.beta2);
  constants.step_size = static_cast<float>(lr / (1.0 - std::pow(options.beta1, t)));
  constants.inv_sqrt_correction2 =
      static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(options.beta2, t)));
  constants.epsilon = static_cast<float>(options.epsilon);
  constants.gradient_scale = static_cast<float>(gradient_scale);
  DeviceBuffer<float> d_p(parameters), d_g(gradients), d_m(m), d_v(v);
  DeviceBuffer<__half> d_half(count);
  cuda::adam_step(d_p.get(), d_g.get(), d_m.get(), d_v.get(), count, constants, d_half.get(),
                  nullptr);
  // Same f32 operations in the same order (no fused multiply-add on either side): equal up to
  // the last bit, allowing one rounding of slack for a host compiler that contracts.
  auto expect_equal_within_ulp = [](const std::vector<float>& got, const std::vector<float>& want,
                                    const char* what) {
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (std::fabs(got[i] - want[i]) > 2 * std::numeric_limits<float>::epsilon() *
                                            std::fabs(want[i]) + 1e-30f &&
          ++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i];
    EXPECT_EQ(bad, 0) << what;
  };
  const std::vector<float> got_p = d_p.download();
  expect_equal_within_ulp(got_p, cpu_parameters, "parameters");
  expect_equal_within_ulp(d_m.download(), adam.state().first_moment, "first moment");
  expect_equal_within_ulp(d_v.download(), adam.state().second_moment, "second moment");
  EXPECT_EQ(to_float(d_half.download()), round_to_half(got_p));
}

TEST(cuda_trainer_kernels, SumOfSquaresInDoubleFlagsNonFiniteValues) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (int64_t count : {int64_t{1}, int64_t{1000}, int64_t{1234567}}) {
    std::vector<float> x = random.uniform(count, -3.0f, 3.0f);
    double expected = 0;
    for (float value : x) expected += double(value) * value;
    DeviceBuffer<float> d_x(x);
    DeviceBuffer<double> workspace(cuda::kSumOfSquaresPartials), result(1);
    cuda::sum_of_squares(d_x.get(), count, workspace.get(), result.get(), nullptr);
    EXPECT_NEAR(result.download()[0], expected, 1e-12 * expected) << "count " << count;
    if (count < 1000) continue;
    x[count / 3] = std::numeric_limits<float>::infinity();
    d_x.upload(x);
    cuda::sum_of_squares(d_x.get(), count, workspace.get(), result.get(), nullptr);
    EXPECT_TRUE(std::isinf(result.download()[0]));
    x[count / 2] = std::numeric_limits<float>::quiet_NaN();
    d_x.upload(x);
    cuda::sum_of_squares(d_x.get(), count, workspace.get(), result.get(), nullptr);
    EXPECT_TRUE(std::isnan(result.download()[0]));
  }
}

// gemm: every transpose combination, padded leading dimensions, alpha and beta, f32 and f16.
template <typename Input>
void check_gemm(RandomInputs& random) {
  cublasHandle_t handle = nullptr;
  XF_CUBLAS_CHECK(cublasCreate(&handle));
  const int64_t m = 37, n = 29, k = 45, pad = 3;
  const float alpha = 0.75f, beta = 0.5f;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string("transpose_a ") + (ta ? "yes" : "no") + " transpose_b " +
                   (tb ? "yes" : "no"));
      const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, lda = a_cols + pad;
      const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n, ldb = b_cols + pad;
      const int64_t ldc = n + pad;
      std::vector<float> a = random.uniform(a_rows * lda, -1, 1);
      std::vector<float> b = random.uniform(b_rows * ldb, -1, 1);
      if constexpr (std::is_same_v<Input, __half>) {  // exact f16 inputs: f32 results
        a = round_to_half(a);
        b = round_to_half(b);
      }
      const std::vector<float> c0 = random.uniform(m * ldc, -1, 1);
      std::vector<double> expected(to_double(c0)), scale(m * ldc, 0.0);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0, magnitude = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double av = ta ? a[p * lda + i] : a[i * lda + p];
            const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
            sum += av * bv;
            magnitude += std::fabs(av * bv);
          }
          expected[i * ldc + j] = alpha * sum + beta * c0[i * ldc + j];
          scale[i * ldc + j] = alpha * magnitude + beta * std::fabs(c0[i * ldc + j]);
        }
      std::vector<Input> a_in, b_in;
      if constexpr (std::is_same_v<Input, __half>) {
        a_in = to_half(a);
        b_in = to_half(b);
      } else {
        a_in = a;
        b_in = b;
      }
      DeviceBuffer<Input> d_a(a_in), d_b(b_in);
      DeviceBuffer<float> d_c(c0);
      cuda::gemm(handle, ta, tb, m, n, k, alpha, d_a.get(), lda, d_b.get(), ldb, beta, d_c.get(),
                 ldc);
      expect_close(d_c.download(), expected, scale, kF32Tolerance);  // padding untouched too
    }
  }
  XF_CUBLAS_CHECK(cublasDestroy(handle));
}

TEST(cuda_trainer_kernels, GemmF32AllTransposesMatchesDoubleReference) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  check_gemm<float>(random);
}

TEST(cuda_trainer_kernels, GemmF16InputsAccumulateInF32) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  check_gemm<__half>(random);
}

}  // namespace
}  // namespace xf::test
