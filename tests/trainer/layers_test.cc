// The float path of the trainer's layers (kernels_cpu's forward kernels and oneDNN gemm) against
// the double path that the gradient tests check, on the same fresh random inputs; and the
// dropout masks.
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

namespace xf::trainer {
namespace {

using namespace cpu;  // the kernels under test (xf/kernels/)

using testing::random_values;

std::mt19937_64 fresh_rng() { return std::mt19937_64(std::random_device{}()); }

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

void expect_close(const std::vector<float>& actual, const std::vector<double>& expected,
                  const char* what, double tolerance = 2e-5) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double error = std::abs(actual[i] - expected[i]) / std::max(1.0, std::abs(expected[i]));
    if (error > tolerance && ++failures <= 5)
      ADD_FAILURE() << what << "[" << i << "]: float " << actual[i] << ", double " << expected[i];
  }
  EXPECT_EQ(failures, 0) << what;
}

TEST(Layers, LinearFloatMatchesDouble) {
  auto rng = fresh_rng();
  const int64_t rows = 37, in = 64, out = 48;
  const auto x = random_values(rng, rows * in), w = random_values(rng, out * in),
             b = random_values(rng, out), dy = random_values(rng, rows * out);
  std::vector<double> y(rows * out), dx(rows * in), dw(out * in, 0.0), db(out, 0.0);
  linear_forward<double>(x.data(), w.data(), b.data(), rows, in, out, y.data(), 2);
  linear_backward<double>(dy.data(), x.data(), w.data(), rows, in, out, dx.data(), false,
                          dw.data(), db.data(), 2);
  const auto xf = to_float(x), wf = to_float(w), bf = to_float(b), dyf = to_float(dy);
  std::vector<float> yf(rows * out), dxf(rows * in), dwf(out * in, 0.0f), dbf(out, 0.0f);
  linear_forward<float>(xf.data(), wf.data(), bf.data(), rows, in, out, yf.data(), 2);
  linear_backward<float>(dyf.data(), xf.data(), wf.data(), rows, in, out, dxf.data(), false,
                         dwf.data(), dbf.data(), 2);
  expect_close(yf, y, "y");
  expect_close(dxf, dx, "dx");
  expect_close(dwf, dw, "dweight");
  expect_close(dbf, db, "dbias");
}

TEST(Layers, LayerNormFloatMatchesDouble) {
  auto rng = fresh_rng();
  const int64_t rows = 9, dim = 96;
  const auto x = random_values(rng, rows * dim, -3, 5), gamma = random_values(rng, dim),
             beta = random_values(rng, dim);
  std::vector<double> out(rows * dim), mean(rows), rstd(rows);
  layer_norm_forward<double>(x.data(), gamma.data(), beta.data(), 1e-6, rows, dim, out.data(),
                             mean.data(), rstd.data(), 2);
  const auto xf = to_float(x), gf = to_float(gamma), bf = to_float(beta);
  std::vector<float> outf(rows * dim), meanf(rows), rstdf(rows);
  layer_norm_forward<float>(xf.data(), gf.data(), bf.data(), 1e-6f, rows, dim, outf.data(),
                            meanf.data(), rstdf.data(), 2);
  expect_close(outf, out, "out");
  expect_close(meanf, mean, "mean");
  expect_close(rstdf, rstd, "rstd");
}

TEST(Layers, EmbeddingFloatMatchesDouble) {
  auto rng = fresh_rng();
  const int64_t vocab = 20, dim = 32, count = 12;
  const auto table = random_values(rng, vocab * dim);
  std::vector<int32_t> ids(count), positions(count);
  for (int64_t i = 0; i < count; ++i) {
    ids[i] = static_cast<int32_t>(rng() % vocab);
    positions[i] = static_cast<int32_t>(rng() % 200);
  }
  std::vector<double> out(count * dim);
  embedding_forward<double>(table.data(), vocab, dim, ids.data(), positions.data(), count,
                            std::sqrt(32.0), out.data(), 2);
  const auto tf = to_float(table);
  std::vector<float> outf(count * dim);
  embedding_forward<float>(tf.data(), vocab, dim, ids.data(), positions.data(), count,
                           std::sqrt(32.0f), outf.data(), 2);
  // Positions up to 200 in float: the sinusoid's argument carries ~1e-5 absolute error.
  expect_close(outf, out, "embedding", 5e-5);
}

TEST(Layers, BiasReluFloatMatchesDouble) {
  auto rng = fresh_rng();
  const int64_t rows = 7, dim = 33;
  auto x = random_values(rng, rows * dim);
  const auto bias = random_values(rng, dim);
  auto xf = to_float(x);
  const auto bf = to_float(bias);
  bias_relu_forward<double>(x.data(), bias.data(), rows, dim, 2);
  bias_relu_forward<float>(xf.data(), bf.data(), rows, dim, 2);
  expect_close(xf, x, "relu");
}

class AttentionFloat : public ::testing::TestWithParam<bool> {};  // param: with dropout mask

TEST_P(AttentionFloat, MatchesDouble) {
  const bool with_dropout = GetParam();
  auto rng = fresh_rng();
  const int64_t batch = 3, heads = 4, len = 9, head_dim = 16, d = heads * head_dim;
  const auto qkv = random_values(rng, batch * len * 3 * d, -2, 2);
  const std::vector<int32_t> key_lengths = {9, 5, 1};
  const HeadStrides s = {len * 3 * d, head_dim, 3 * d}, os = {len * d, head_dim, d};
  const AttentionShape shape{batch, heads, len, len, head_dim};
  std::vector<uint8_t> mask;
  if (with_dropout) {
    mask.resize(batch * heads * len * len);
    make_dropout_mask(rng(), 3, mask.size(), 0.2f, mask.data(), 2);
  }
  for (int64_t causal : {int64_t(-1), int64_t(0)}) {
    std::vector<double> out(batch * len * d), probs(batch * heads * len * len),
        scratch(2 * 2 * len);
    attention_forward<double>(qkv.data(), s, qkv.data() + d, s, qkv.data() + 2 * d, s, out.data(),
                              os, shape, key_lengths.data(), causal, probs.data(),
                              with_dropout ? mask.data() : nullptr, 1.25, scratch.data(), 2);
    const auto qkvf = to_float(qkv);
    std::vector<float> outf(out.size()), probsf(probs.size()), scratchf(scratch.size());
    attention_forward<float>(qkvf.data(), s, qkvf.data() + d, s, qkvf.data() + 2 * d, s,
                             outf.data(), os, shape, key_lengths.data(), causal, probsf.data(),
                             with_dropout ? mask.data() : nullptr, 1.25f, scratchf.data(), 2);
    expect_close(outf, out, causal < 0 ? "out" : "causal out");
    expect_close(probsf, probs, causal < 0 ? "probabilities" : "causal probabilities");
  }
}

INSTANTIATE_TEST_SUITE_P(Dropout, AttentionFloat, ::testing::Values(false, true));

TEST(Layers, AttentionBackwardFloatMatchesDouble) {
  auto rng = fresh_rng();
  const int64_t batch = 2, heads = 2, len = 6, head_dim = 8, d = heads * head_dim;
  const auto qkv = random_values(rng, batch * len * 3 * d, -2, 2);
  const auto d_out = random_values(rng, batch * len * d);
  const std::vector<int32_t> key_lengths = {6, 4};
  const HeadStrides s = {len * 3 * d, head_dim, 3 * d}, os = {len * d, head_dim, d};
  const AttentionShape shape{batch, heads, len, len, head_dim};
  std::vector<double> out(batch * len * d), probs(batch * heads * len * len),
      scratch(2 * 2 * len), d_qkv(qkv.size());
  attention_forward<double>(qkv.data(), s, qkv.data() + d, s, qkv.data() + 2 * d, s, out.data(),
                            os, shape, key_lengths.data(), 0, probs.data(), nullptr, 1.0,
                            scratch.data(), 2);
  cpu::attention_backward<double>(d_out.data(), os, qkv.data(), s, qkv.data() + d, s,
                                  qkv.data() + 2 * d, s, probs.data(), nullptr, 1.0, d_qkv.data(),
                                  s, d_qkv.data() + d, s, d_qkv.data() + 2 * d, s, shape,
                                  scratch.data(), 2);
  const auto qkvf = to_float(qkv), d_outf = to_float(d_out), probsf = to_float(probs);
  std::vector<float> scratchf(scratch.size()), d_qkvf(qkv.size());
  cpu::attention_backward<float>(d_outf.data(), os, qkvf.data(), s, qkvf.data() + d, s,
                                 qkvf.data() + 2 * d, s, probsf.data(), nullptr, 1.0f,
                                 d_qkvf.data(), s, d_qkvf.data() + d, s, d_qkvf.data() + 2 * d, s,
                                 shape, scratchf.data(), 2);
  expect_close(d_qkvf, d_qkv, "d_qkv");
}

TEST(Dropout, MaskIsReproducibleAndHasTheRate) {
  const size_t n = 200000;
  std::vector<uint8_t> a(n), b(n), c(n), other_site(n);
  make_dropout_mask(42, 5, n, 0.1f, a.data(), 1);
  make_dropout_mask(42, 5, n, 0.1f, b.data(), 2);
  make_dropout_mask(43, 5, n, 0.1f, c.data(), 2);
  make_dropout_mask(42, 6, n, 0.1f, other_site.data(), 2);
  EXPECT_EQ(a, b);  // same seed and site, any thread count
  EXPECT_NE(a, c);
  EXPECT_NE(a, other_site);
  size_t kept = 0;
  for (uint8_t m : a) kept += m;
  // Binomial(200000, 0.9): standard deviation ~134; allow 5 of them.
  EXPECT_NEAR(static_cast<double>(kept), 0.9 * n, 700.0);
  std::vector<uint8_t> none(1000);
  make_dropout_mask(1, 1, none.size(), 0.0f, none.data(), 1);
  for (uint8_t m : none) EXPECT_EQ(m, 1);
}

// A rank's rows of a larger batch: the mask from first_index on is that part of the whole mask.
TEST(Dropout, MaskFromAFirstIndexIsThatPartOfTheWholeMask) {
  const size_t n = 10000, first = 3217;
  std::vector<uint8_t> whole(n), part(n - first);
  make_dropout_mask(42, 5, n, 0.3f, whole.data(), 2);
  make_dropout_mask(42, 5, part.size(), 0.3f, part.data(), 2, first);
  EXPECT_EQ(part, std::vector<uint8_t>(whole.begin() + first, whole.end()));
}

TEST(Dropout, ApplyScalesKeptAndZeroesDropped) {
  std::vector<double> x = {1, 2, 3, 4};
  const std::vector<uint8_t> mask = {1, 0, 1, 0};
  apply_dropout<double>(x.data(), mask.data(), x.size(), 2.0, 1);
  EXPECT_EQ(x, (std::vector<double>{2, 0, 6, 0}));
}

}  // namespace
}  // namespace xf::trainer
