// Finite-difference checks, in double precision, of every backward kernel
// (xf/kernels_cpu/backward.h) and of the linear layer's backward, on fresh random inputs.
// Each loss is sum(weights * forward output), so d loss / d output = weights.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "gradient_check.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/dropout.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels/optimizer.h"
#include "xf/kernels/softmax.h"

namespace xf::trainer {
namespace {

using namespace cpu;  // the kernels under test (training.h, backward.h)

using testing::expect_gradient;
using testing::random_values;
using testing::weighted_sum;

std::mt19937_64 fresh_rng() { return std::mt19937_64(std::random_device{}()); }

TEST(BackwardKernels, LayerNormMatchesFiniteDifferences) {
  auto rng = fresh_rng();
  const int64_t rows = 5, dim = 7;
  auto x = random_values(rng, rows * dim, -2, 2);
  auto gamma = random_values(rng, dim, 0.5, 1.5);
  auto beta = random_values(rng, dim);
  const auto weights = random_values(rng, rows * dim);
  const double eps = 1e-6;
  std::vector<double> out(rows * dim), mean(rows), rstd(rows);
  auto loss = [&] {
    layer_norm_forward<double>(x.data(), gamma.data(), beta.data(), eps, rows, dim, out.data(),
                               mean.data(), rstd.data(), 2);
    return weighted_sum(weights, out.data());
  };
  loss();
  // The kernel accumulates: start every output from a known offset and subtract it after.
  const auto dx0 = random_values(rng, rows * dim), dg0 = random_values(rng, dim),
             db0 = random_values(rng, dim);
  auto dx = dx0, dgamma = dg0, dbeta = db0;
  cpu::layer_norm_backward<double>(weights.data(), x.data(), mean.data(), rstd.data(),
                                   gamma.data(), rows, dim, dx.data(), dgamma.data(),
                                   dbeta.data(), 2);
  for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dx0[i];
  for (int64_t j = 0; j < dim; ++j) {
    dgamma[j] -= dg0[j];
    dbeta[j] -= db0[j];
  }
  expect_gradient(loss, x.data(), x.size(), dx.data(), "dx");
  expect_gradient(loss, gamma.data(), gamma.size(), dgamma.data(), "dgamma");
  expect_gradient(loss, beta.data(), beta.size(), dbeta.data(), "dbeta");
}

TEST(BackwardKernels, BiasReluMatchesFiniteDifferences) {
  auto rng = fresh_rng();
  const int64_t rows = 6, dim = 9;
  auto x = random_values(rng, rows * dim);
  auto bias = random_values(rng, dim, -0.5, 0.5);
  const auto weights = random_values(rng, rows * dim);
  std::vector<double> y(rows * dim);
  auto loss = [&] {
    y = x;
    bias_relu_forward<double>(y.data(), bias.data(), rows, dim, 2);
    return weighted_sum(weights, y.data());
  };
  loss();
  auto dx = weights;
  std::vector<double> dbias(dim, 0.0);
  cpu::bias_relu_backward<double>(dx.data(), y.data(), rows, dim, dbias.data(), 2);
  expect_gradient(loss, x.data(), x.size(), dx.data(), "dx");
  expect_gradient(loss, bias.data(), bias.size(), dbias.data(), "dbias");
}

TEST(BackwardKernels, BiasIsTheColumnSum) {
  auto rng = fresh_rng();
  const int64_t rows = 11, dim = 37;
  const auto dy = random_values(rng, rows * dim);
  const auto start = random_values(rng, dim);
  auto dbias = start;
  cpu::bias_backward<double>(dy.data(), rows, dim, dbias.data(), 2);
  for (int64_t j = 0; j < dim; ++j) {
    double sum = start[j];
    for (int64_t r = 0; r < rows; ++r) sum += dy[r * dim + j];
    EXPECT_NEAR(dbias[j], sum, 1e-12) << "column " << j;
  }
}

TEST(BackwardKernels, EmbeddingMatchesFiniteDifferences) {
  auto rng = fresh_rng();
  const int64_t vocab = 6, dim = 40, count = 9;
  auto table = random_values(rng, vocab * dim);
  const std::vector<int32_t> ids = {3, 1, 3, 0, 5, 3, 1, 2, 0};  // repeats on purpose
  const std::vector<int32_t> positions = {0, 1, 2, 3, 0, 1, 2, 7, 8};
  const auto weights = random_values(rng, count * dim);
  const double scale = std::sqrt(double(dim));
  std::vector<double> out(count * dim);
  auto loss = [&] {
    embedding_forward<double>(table.data(), vocab, dim, ids.data(), positions.data(), count,
                              scale, out.data(), 2);
    return weighted_sum(weights, out.data());
  };
  std::vector<double> dtable(vocab * dim, 0.0);
  cpu::embedding_backward<double>(weights.data(), ids.data(), count, dim, scale, dtable.data(), 2);
  expect_gradient(loss, table.data(), table.size(), dtable.data(), "dtable");
  // Token 4 never appears: its row's gradient is exactly zero.
  for (int64_t j = 0; j < dim; ++j) EXPECT_EQ(dtable[4 * dim + j], 0.0);
}

TEST(BackwardKernels, LinearMatchesFiniteDifferences) {
  auto rng = fresh_rng();
  const int64_t rows = 5, in = 6, out = 4;
  auto x = random_values(rng, rows * in);
  auto weight = random_values(rng, out * in);
  auto bias = random_values(rng, out);
  const auto weights = random_values(rng, rows * out);
  std::vector<double> y(rows * out);
  auto loss = [&] {
    linear_forward<double>(x.data(), weight.data(), bias.data(), rows, in, out, y.data(), 1);
    return weighted_sum(weights, y.data());
  };
  const auto dx0 = random_values(rng, rows * in);
  auto dx = dx0;
  std::vector<double> dweight(out * in, 0.0), dbias(out, 0.0);
  linear_backward<double>(weights.data(), x.data(), weight.data(), rows, in, out, dx.data(),
                          /*accumulate_dx=*/true, dweight.data(), dbias.data(), 1);
  for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dx0[i];
  expect_gradient(loss, x.data(), x.size(), dx.data(), "dx");
  expect_gradient(loss, weight.data(), weight.size(), dweight.data(), "dweight");
  expect_gradient(loss, bias.data(), bias.size(), dbias.data(), "dbias");
  // Without accumulate_dx the old contents are replaced.
  auto dx_overwritten = dx0;
  linear_backward<double>(weights.data(), x.data(), weight.data(), rows, in, out,
                          dx_overwritten.data(), false, dweight.data(), dbias.data(), 1);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx_overwritten[i], dx[i], 1e-12);
}

struct AttentionCase {
  const char* name;
  int64_t batch, heads, query_len, key_len, head_dim;
  bool fused;      // q, k, v in one [B, len, 3*d] buffer (self-attention) or separate buffers
  bool causal;
  bool padding;    // key lengths shorter than key_len (one sequence sees no key at all)
  bool dropout;    // a dropout mask on the probabilities
};

class AttentionBackward : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionBackward, MatchesFiniteDifferences) {
  const AttentionCase c = GetParam();
  auto rng = fresh_rng();
  const int64_t d = c.heads * c.head_dim;
  // Inputs: one buffer holding q, k and v, so one finite-difference sweep covers all three.
  // fused: [B, len, 3d] with q | k | v per row; else q [B, Tq, d] then kv [B, Tk, 2d].
  std::vector<double> input;
  HeadStrides qs, ks, vs;
  int64_t q_at, k_at, v_at;
  if (c.fused) {
    input = random_values(rng, c.batch * c.query_len * 3 * d, -2, 2);
    qs = ks = vs = {c.query_len * 3 * d, c.head_dim, 3 * d};
    q_at = 0, k_at = d, v_at = 2 * d;
  } else {
    input = random_values(rng, c.batch * (c.query_len * d + c.key_len * 2 * d), -2, 2);
    qs = {c.query_len * d, c.head_dim, d};
    ks = vs = {c.key_len * 2 * d, c.head_dim, 2 * d};
    q_at = 0, k_at = c.batch * c.query_len * d, v_at = k_at + d;
  }
  std::vector<int32_t> key_lengths(c.batch, static_cast<int32_t>(c.key_len));
  if (c.padding) {
    for (int64_t b = 0; b < c.batch; ++b)
      key_lengths[b] = static_cast<int32_t>(std::max<int64_t>(1, c.key_len - b));
    key_lengths[c.batch - 1] = 0;  // a query that sees no key: zero output, zero gradient
  }
  const int64_t prob_count = c.batch * c.heads * c.query_len * c.key_len;
  std::vector<uint8_t> mask;
  const double p = 0.3;
  if (c.dropout) {
    mask.resize(prob_count);
    make_dropout_mask(rng(), 7, mask.size(), static_cast<float>(p), mask.data(), 2);
  }
  const double keep_scale = 1.0 / (1.0 - p);
  const HeadStrides os = {c.query_len * d, c.head_dim, d};
  std::vector<double> out(c.batch * c.query_len * d), probabilities(prob_count);
  std::vector<double> scratch(2 * 2 * c.key_len);
  const AttentionShape shape{c.batch, c.heads, c.query_len, c.key_len, c.head_dim};
  const auto weights = random_values(rng, out.size());
  auto loss = [&] {
    attention_forward<double>(input.data() + q_at, qs, input.data() + k_at, ks,
                              input.data() + v_at, vs, out.data(), os, shape,
                              key_lengths.data(), c.causal ? 0 : -1, probabilities.data(),
                              c.dropout ? mask.data() : nullptr, keep_scale, scratch.data(), 2);
    return weighted_sum(weights, out.data());
  };
  loss();
  // Start from garbage: the kernel must overwrite every element of dq, dk, dv.
  std::vector<double> d_input(input.size(), 123.0);
  cpu::attention_backward<double>(weights.data(), os, input.data() + q_at, qs,
                                  input.data() + k_at, ks, input.data() + v_at, vs,
                                  probabilities.data(), c.dropout ? mask.data() : nullptr,
                                  keep_scale, d_input.data() + q_at, qs, d_input.data() + k_at,
                                  ks, d_input.data() + v_at, vs, shape, scratch.data(), 2);
  expect_gradient(loss, input.data(), input.size(), d_input.data(), c.name);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionBackward,
    ::testing::Values(AttentionCase{"self", 2, 2, 5, 5, 3, true, false, false, false},
                      AttentionCase{"self_padded", 3, 2, 4, 4, 3, true, false, true, false},
                      AttentionCase{"causal", 2, 3, 5, 5, 2, true, true, false, false},
                      AttentionCase{"cross_padded", 3, 2, 3, 5, 4, false, false, true, false},
                      AttentionCase{"self_dropout", 2, 2, 5, 5, 3, true, true, true, true},
                      AttentionCase{"cross_dropout", 2, 2, 4, 3, 3, false, false, false, true}),
    [](const ::testing::TestParamInfo<AttentionCase>& info) { return info.param.name; });

TEST(BackwardKernels, LabelSmoothedCrossEntropyGradient) {
  auto rng = fresh_rng();
  const int64_t rows = 4, vocab = 7;
  auto logits = random_values(rng, rows * vocab, -3, 3);
  const std::vector<int32_t> targets = {2, -1, 6, 0};  // row 1 is padding
  std::vector<double> row_loss(rows), row_nll(rows);
  auto loss = [&] {
    auto copy = logits;
    cpu::label_smoothed_cross_entropy<double>(copy.data(), targets.data(), rows, vocab, 0.1, -1,
                                              false, row_loss.data(), row_nll.data(), 1);
    double sum = 0;
    for (double l : row_loss) sum += l;
    return sum;
  };
  auto gradient = logits;
  cpu::label_smoothed_cross_entropy<double>(gradient.data(), targets.data(), rows, vocab, 0.1, -1,
                                            true, row_loss.data(), row_nll.data(), 2);
  expect_gradient(loss, logits.data(), logits.size(), gradient.data(), "dlogits");
  for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(gradient[1 * vocab + j], 0.0);
}

TEST(BackwardKernels, LabelSmoothedCrossEntropyByHand) {
  // logits (0, ln 2, ln 4): softmax = (1/7, 2/7, 4/7). Target 1, smoothing 0.1, vocab 3:
  // q = (0.1/3, 0.9 + 0.1/3, 0.1/3); loss = -sum q log p.
  std::vector<double> logits = {0.0, std::log(2.0), std::log(4.0)};
  const int32_t target = 1;
  double loss = 0, nll = 0;
  cpu::label_smoothed_cross_entropy<double>(logits.data(), &target, 1, 3, 0.1, -1, true, &loss,
                                            &nll, 1);
  const double expected_nll = std::log(3.5);
  const double expected_loss =
      0.9 * std::log(3.5) + 0.1 / 3 * (std::log(7.0) + std::log(3.5) + std::log(1.75));
  EXPECT_NEAR(nll, expected_nll, 1e-12);
  EXPECT_NEAR(loss, expected_loss, 1e-12);
  // Gradient softmax - q.
  EXPECT_NEAR(logits[0], 1.0 / 7 - 0.1 / 3, 1e-12);
  EXPECT_NEAR(logits[1], 2.0 / 7 - 0.9 - 0.1 / 3, 1e-12);
  EXPECT_NEAR(logits[2], 4.0 / 7 - 0.1 / 3, 1e-12);

  // Without smoothing the loss is the plain NLL; float agrees with double.
  std::vector<float> logits_f = {0.0f, std::log(2.0f), std::log(4.0f)};
  cpu::label_smoothed_cross_entropy<float>(logits_f.data(), &target, 1, 3, 0.0f, -1, false, &loss,
                                           &nll, 1);
  EXPECT_NEAR(loss, std::log(3.5), 1e-6);
  EXPECT_NEAR(nll, std::log(3.5), 1e-6);
}

}  // namespace
}  // namespace xf::trainer
