// Embedding, bias + residual + LayerNorm, bias + ReLU, the QKV head split, row gather and dtype
// conversion against double references.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_test_support.h"
#include "random_inputs.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/gather.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/softmax.h"

namespace xf::test {
namespace {

using cuda::half;

// ---- embed ------------------------------------------------------------------------------------

// scale * table[id] + PE(position), PE(p, 2j) = sin(p / 10000^(2j/dim)), PE(p, 2j+1) = cos(...).
// An id outside the table contributes a zero row.
std::vector<double> reference_embed(const std::vector<float>& table, int64_t vocab, int64_t dim,
                                    const std::vector<int32_t>& ids,
                                    const std::vector<int32_t>& positions, double scale) {
  std::vector<double> out(ids.size() * dim);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t c = 0; c < dim; ++c) {
      const double angle = positions[i] / std::pow(10000.0, static_cast<double>(c - c % 2) / dim);
      const double row = ids[i] >= 0 && ids[i] < vocab ? scale * table[ids[i] * dim + c] : 0.0;
      out[i * dim + c] = row + (c % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  }
  return out;
}

struct EmbedCase {
  int64_t vocab = 50, dim = 37;  // odd dim: the last column is a sine without its cosine
  std::vector<float> table;
  std::vector<int32_t> ids, positions;
  double scale = std::sqrt(37.0);
};

EmbedCase make_embed_case(RandomInputs& random, bool half_table) {
  EmbedCase c;
  c.table = random.uniform(c.vocab * c.dim, -1.0f, 1.0f);
  if (half_table) c.table = round_to_half(c.table);
  for (int i = 0; i < 24; ++i) {
    c.ids.push_back(static_cast<int32_t>(random.integer(0, c.vocab - 1)));
    c.positions.push_back(static_cast<int32_t>(random.integer(0, 1023)));
  }
  c.ids[3] = static_cast<int32_t>(c.vocab);  // outside the table: a zero row, no stray read
  c.ids[5] = -1;
  return c;
}

TEST(cuda_embed, F32TableToF32AndF16) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const EmbedCase c = make_embed_case(random, false);
  DeviceBuffer<float> table(c.table), out(c.ids.size() * c.dim);
  DeviceBuffer<half> out_half(c.ids.size() * c.dim);
  DeviceBuffer<int32_t> ids(c.ids), positions(c.positions);
  cuda::embed(table.get(), c.vocab, c.dim, ids.get(), positions.get(), c.ids.size(), c.scale,
              out.get(), nullptr);
  cuda::embed(table.get(), c.vocab, c.dim, ids.get(), positions.get(), c.ids.size(), c.scale,
              out_half.get(), nullptr);
  const std::vector<double> ref =
      reference_embed(c.table, c.vocab, c.dim, c.ids, c.positions, c.scale);
  expect_close(out.download(), ref, 1.0, kF32Tolerance);
  expect_close(to_float(out_half.download()), ref, 1.0, kF16Tolerance);
}

// The sin-then-cos layouts of imported models against the CPU kernel's write_sinusoid (itself
// checked against double formulas in tests/kernels/), on an even dim.
TEST(cuda_embed, SinThenCosLayoutsEqualTheCpuKernels) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  EmbedCase c = make_embed_case(random, false);
  c.dim = 36;
  c.table = random.uniform(c.vocab * c.dim, -1.0f, 1.0f);
  for (const PositionEncoding encoding : {PositionEncoding::sin_then_cos, PositionEncoding::marian_sin_then_cos}) {
    DeviceBuffer<float> table(c.table), out(c.ids.size() * c.dim);
    DeviceBuffer<int32_t> ids(c.ids), positions(c.positions);
    cuda::embed(table.get(), c.vocab, c.dim, ids.get(), positions.get(), c.ids.size(), c.scale, out.get(),
                nullptr, encoding);
    std::vector<double> ref(c.ids.size() * c.dim);
    std::vector<float> sinusoid(c.dim);
    for (size_t i = 0; i < c.ids.size(); ++i) {
      cpu::write_sinusoid(encoding, c.positions[i], c.dim, sinusoid.data());
      for (int64_t col = 0; col < c.dim; ++col) {
        const bool valid = c.ids[i] >= 0 && c.ids[i] < c.vocab;
        ref[i * c.dim + col] = (valid ? c.scale * c.table[c.ids[i] * c.dim + col] : 0.0) + sinusoid[col];
      }
    }
    // Marian's float angles at positions up to 1023 differ by a few float ulps between sinf and
    // the host's; the tolerance allows 1e-4 there.
    expect_close(out.download(), ref, 1.0, encoding == PositionEncoding::sin_then_cos ? kF32Tolerance : 1e-4);
  }
}

TEST(cuda_embed, F16TableToF16AndF32) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const EmbedCase c = make_embed_case(random, true);
  DeviceBuffer<half> table(to_half(c.table)), out_half(c.ids.size() * c.dim);
  DeviceBuffer<float> out(c.ids.size() * c.dim);
  DeviceBuffer<int32_t> ids(c.ids), positions(c.positions);
  cuda::embed(table.get(), c.vocab, c.dim, ids.get(), positions.get(), c.ids.size(), c.scale,
              out_half.get(), nullptr);
  cuda::embed(table.get(), c.vocab, c.dim, ids.get(), positions.get(), c.ids.size(), c.scale,
              out.get(), nullptr);
  const std::vector<double> ref =
      reference_embed(c.table, c.vocab, c.dim, c.ids, c.positions, c.scale);
  expect_close(to_float(out_half.download()), ref, 1.0, kF16Tolerance);
  expect_close(out.download(), ref, 1.0, kF32Tolerance);
}

// ---- LayerNorm --------------------------------------------------------------------------------

struct LayerNormReference {
  std::vector<double> out, mean, rstd;
};

// LayerNorm(x + bias + residual) * gamma + beta with the biased variance, epsilon inside the root.
LayerNormReference reference_layer_norm(const std::vector<float>& x,
                                        const std::vector<float>& bias,
                                        const std::vector<float>& residual,
                                        const std::vector<float>& gamma,
                                        const std::vector<float>& beta, double epsilon,
                                        int64_t rows, int64_t dim) {
  LayerNormReference ref{std::vector<double>(rows * dim), std::vector<double>(rows),
                         std::vector<double>(rows)};
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> v(dim);
    double mean = 0.0;
    for (int64_t c = 0; c < dim; ++c) {
      v[c] = static_cast<double>(x[r * dim + c]) + bias[c] + residual[r * dim + c];
      mean += v[c] / dim;
    }
    double variance = 0.0;
    for (int64_t c = 0; c < dim; ++c) variance += (v[c] - mean) * (v[c] - mean) / dim;
    const double rstd = 1.0 / std::sqrt(variance + epsilon);
    for (int64_t c = 0; c < dim; ++c)
      ref.out[r * dim + c] = (v[c] - mean) * rstd * gamma[c] + beta[c];
    ref.mean[r] = mean;
    ref.rstd[r] = rstd;
  }
  return ref;
}

TEST(cuda_layer_norm, F32WithBiasResidualAndStatistics) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (const int64_t dim : {1, 31, 512, 1000}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const int64_t rows = 9;
    const std::vector<float> x = random.uniform(rows * dim, -2.0f, 3.0f);
    const std::vector<float> bias = random.uniform(dim, -1.0f, 1.0f);
    const std::vector<float> residual = random.uniform(rows * dim, -2.0f, 2.0f);
    const std::vector<float> gamma = random.uniform(dim, 0.5f, 1.5f);
    const std::vector<float> beta = random.uniform(dim, -0.5f, 0.5f);
    DeviceBuffer<float> x_d(x), bias_d(bias), residual_d(residual), gamma_d(gamma), beta_d(beta);
    DeviceBuffer<float> out(rows * dim), mean(rows), rstd(rows);
    cuda::add_bias_residual_layer_norm(x_d.get(), bias_d.get(), residual_d.get(), gamma_d.get(),
                                       beta_d.get(), 1e-6f, rows, dim, out.get(), mean.get(),
                                       rstd.get(), nullptr);
    const LayerNormReference ref =
        reference_layer_norm(x, bias, residual, gamma, beta, 1e-6, rows, dim);
    // Outputs are O(1) (scale 1); dim 1 normalizes to exactly beta.
    expect_close(out.download(), ref.out, 1.0, kF32Tolerance);
    expect_close(mean.download(), ref.mean, 1.0, kF32Tolerance);
    expect_close(rstd.download(), ref.rstd, 0.0, kF32Tolerance);

    // In place (out aliases x), without bias and residual: the encoder's final LayerNorm.
    const std::vector<float> zeros(rows * dim, 0.0f);
    cuda::add_bias_residual_layer_norm(x_d.get(), nullptr, nullptr, gamma_d.get(), beta_d.get(),
                                       1e-6f, rows, dim, x_d.get(), nullptr, nullptr, nullptr);
    const LayerNormReference plain = reference_layer_norm(
        x, std::vector<float>(dim, 0.0f), zeros, gamma, beta, 1e-6, rows, dim);
    expect_close(x_d.download(), plain.out, 1.0, kF32Tolerance);
  }
}

TEST(cuda_layer_norm, F16WithResidualAliasingOutput) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t rows = 12, dim = 512;
  const std::vector<float> x = round_to_half(random.uniform(rows * dim, -2.0f, 3.0f));
  const std::vector<float> bias = round_to_half(random.uniform(dim, -1.0f, 1.0f));
  const std::vector<float> residual = round_to_half(random.uniform(rows * dim, -2.0f, 2.0f));
  const std::vector<float> gamma = round_to_half(random.uniform(dim, 0.5f, 1.5f));
  const std::vector<float> beta = round_to_half(random.uniform(dim, -0.5f, 0.5f));
  DeviceBuffer<half> x_d(to_half(x)), bias_d(to_half(bias)), residual_d(to_half(residual)),
      gamma_d(to_half(gamma)), beta_d(to_half(beta));
  DeviceBuffer<float> mean(rows), rstd(rows);
  // The post-norm residual stream: out overwrites the residual.
  cuda::add_bias_residual_layer_norm(x_d.get(), bias_d.get(), residual_d.get(), gamma_d.get(),
                                     beta_d.get(), 1e-6f, rows, dim, residual_d.get(), mean.get(),
                                     rstd.get(), nullptr);
  const LayerNormReference ref =
      reference_layer_norm(x, bias, residual, gamma, beta, 1e-6, rows, dim);
  expect_close(to_float(residual_d.download()), ref.out, 1.0, kF16Tolerance);
  // The statistics are f32 sums of the f16 inputs: f32 accuracy.
  expect_close(mean.download(), ref.mean, 1.0, kF32Tolerance);
  expect_close(rstd.download(), ref.rstd, 0.0, kF32Tolerance);
}

// ---- bias, residual, ReLU ---------------------------------------------------------------------

TEST(cuda_elementwise, AddBiasResidualAndBiasReluF32F16) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t rows = 13, dim = 129;
  const std::vector<float> x = round_to_half(random.uniform(rows * dim, -2.0f, 2.0f));
  const std::vector<float> bias = round_to_half(random.uniform(dim, -1.0f, 1.0f));
  const std::vector<float> residual = round_to_half(random.uniform(rows * dim, -2.0f, 2.0f));
  std::vector<double> sum(rows * dim), sum_no_bias(rows * dim), relu(rows * dim),
      relu_no_bias(rows * dim);
  for (int64_t i = 0; i < rows * dim; ++i) {
    sum[i] = static_cast<double>(x[i]) + bias[i % dim] + residual[i];
    sum_no_bias[i] = static_cast<double>(x[i]) + residual[i];
    relu[i] = std::max(0.0, static_cast<double>(x[i]) + bias[i % dim]);
    relu_no_bias[i] = std::max(0.0, static_cast<double>(x[i]));
  }
  {
    DeviceBuffer<float> a(x), b(x), c(x), d(x), bias_d(bias), residual_d(residual);
    cuda::add_bias_residual(a.get(), bias_d.get(), residual_d.get(), rows, dim, nullptr);
    cuda::add_bias_residual(b.get(), nullptr, residual_d.get(), rows, dim, nullptr);
    cuda::bias_relu(c.get(), bias_d.get(), rows, dim, nullptr);
    cuda::bias_relu(d.get(), nullptr, rows, dim, nullptr);
    expect_close(a.download(), sum, 1.0, kF32Tolerance);
    expect_close(b.download(), sum_no_bias, 1.0, kF32Tolerance);
    expect_close(c.download(), relu, 1.0, kF32Tolerance);
    expect_close(d.download(), relu_no_bias, 1.0, kF32Tolerance);
  }
  {
    DeviceBuffer<half> a(to_half(x)), c(to_half(x)), bias_d(to_half(bias)),
        residual_d(to_half(residual));
    cuda::add_bias_residual(a.get(), bias_d.get(), residual_d.get(), rows, dim, nullptr);
    cuda::bias_relu(c.get(), bias_d.get(), rows, dim, nullptr);
    expect_close(to_float(a.download()), sum, 1.0, kF16Tolerance);
    expect_close(to_float(c.download()), relu, 1.0, kF16Tolerance);
  }
}

TEST(cuda_elementwise, BiasSwishAndGeluF32F16) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t rows = 5, dim = 67;
  const std::vector<float> x = round_to_half(random.uniform(rows * dim, -6.0f, 6.0f));
  const std::vector<float> bias = round_to_half(random.uniform(dim, -1.0f, 1.0f));
  for (const Activation activation : {Activation::swish, Activation::gelu}) {
    std::vector<double> expected(rows * dim);
    for (int64_t i = 0; i < rows * dim; ++i) {
      const double v = static_cast<double>(x[i]) + bias[i % dim];
      expected[i] = activation == Activation::swish ? v / (1.0 + std::exp(-v))
                                                    : 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    }
    DeviceBuffer<float> a(x), bias_d(bias);
    cuda::bias_activation(a.get(), bias_d.get(), rows, dim, activation, nullptr);
    expect_close(a.download(), expected, 1.0, kF32Tolerance);
    DeviceBuffer<half> h(to_half(x)), bias_h(to_half(bias));
    cuda::bias_activation(h.get(), bias_h.get(), rows, dim, activation, nullptr);
    expect_close(to_float(h.download()), expected, 1.0, kF16Tolerance);
  }
}

// ---- head split -------------------------------------------------------------------------------

// Part `part` (0: Q, 1: K, 2: V) of packed rows [batch, len, 3 * d_model] plus its bias, as
// [batch, heads, len, head_dim]: what add_bias_split_heads must write.
std::vector<double> expected_heads(const std::vector<float>& packed, const std::vector<float>& bias,
                                   int64_t part, int64_t batch, int64_t len, int64_t heads,
                                   int64_t head_dim) {
  const int64_t d_model = heads * head_dim;
  std::vector<double> expected(batch * heads * len * head_dim);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < len; ++i)
        for (int64_t d = 0; d < head_dim; ++d) {
          const int64_t column = part * d_model + h * head_dim + d;
          expected[((b * heads + h) * len + i) * head_dim + d] =
              static_cast<double>(packed[(b * len + i) * 3 * d_model + column]) + bias[column];
        }
  return expected;
}

TEST(cuda_split_heads, QkvIntoContiguousHeadsAndKvIntoCacheAtStep) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t batch = 3, len = 5, heads = 4, head_dim = 8, d_model = heads * head_dim;
  const std::vector<float> packed = random.uniform(batch * len * 3 * d_model, -1.0f, 1.0f);
  const std::vector<float> bias = random.uniform(3 * d_model, -1.0f, 1.0f);
  DeviceBuffer<float> packed_d(packed), bias_d(bias);

  // Encoder: Q, K, V each to [batch, heads, len, head_dim].
  DeviceBuffer<float> q(batch * heads * len * head_dim), k(q.size()), v(q.size());
  cuda::SplitHeadsOutputs<float> outputs;
  outputs.data[0] = q.get();
  outputs.data[1] = k.get();
  outputs.data[2] = v.get();
  for (auto& s : outputs.strides) s = cuda::contiguous_head_strides(heads, len, head_dim);
  cuda::add_bias_split_heads(packed_d.get(), 3 * d_model, bias_d.get(), 3, batch, len, heads,
                             head_dim, outputs, 0, nullptr);
  const DeviceBuffer<float>* results[3] = {&q, &k, &v};
  for (int64_t part = 0; part < 3; ++part) {
    expect_close(results[part]->download(),
                 expected_heads(packed, bias, part, batch, len, heads, head_dim), 1.0,
                 kF32Tolerance);
  }

  // Decoder step: K and V (parts 1 and 2 of the packed rows, one token each) into the cache
  // [batch, heads, max_len, head_dim] at position `step`; every other position is untouched.
  const int64_t max_len = 7, step = 4;
  const float untouched = 1234.5f;
  const std::vector<float> filled(batch * heads * max_len * head_dim, untouched);
  DeviceBuffer<float> k_cache(filled), v_cache(filled);
  cuda::SplitHeadsOutputs<float> cache;
  cache.data[0] = k_cache.get();
  cache.data[1] = v_cache.get();
  cache.strides[0] = cache.strides[1] = cuda::contiguous_head_strides(heads, max_len, head_dim);
  // Token 0 of each sequence, K|V only: start at column d_model, row stride len * 3 * d_model.
  cuda::add_bias_split_heads(packed_d.get() + d_model, len * 3 * d_model, bias_d.get() + d_model,
                             2, batch, 1, heads, head_dim, cache, step, nullptr);
  const DeviceBuffer<float>* caches[2] = {&k_cache, &v_cache};
  for (int64_t part = 1; part <= 2; ++part) {
    const std::vector<double> part_heads =
        expected_heads(packed, bias, part, batch, len, heads, head_dim);
    std::vector<double> expected(filled.begin(), filled.end());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < head_dim; ++d)  // token 0 of each sequence, at position `step`
          expected[((b * heads + h) * max_len + step) * head_dim + d] =
              part_heads[((b * heads + h) * len + 0) * head_dim + d];
    expect_close(caches[part - 1]->download(), expected, 1.0, kF32Tolerance);
  }
}

TEST(cuda_split_heads, F16QkvIntoHeads) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t batch = 2, len = 3, heads = 2, head_dim = 16, d_model = heads * head_dim;
  const std::vector<float> packed = round_to_half(random.uniform(batch * len * 3 * d_model, -1, 1));
  const std::vector<float> bias = round_to_half(random.uniform(3 * d_model, -1.0f, 1.0f));
  DeviceBuffer<half> packed_d(to_half(packed)), bias_d(to_half(bias));
  DeviceBuffer<half> q(batch * heads * len * head_dim), k(q.size()), v(q.size());
  cuda::SplitHeadsOutputs<half> outputs;
  outputs.data[0] = q.get();
  outputs.data[1] = k.get();
  outputs.data[2] = v.get();
  for (auto& s : outputs.strides) s = cuda::contiguous_head_strides(heads, len, head_dim);
  cuda::add_bias_split_heads(packed_d.get(), 3 * d_model, bias_d.get(), 3, batch, len, heads,
                             head_dim, outputs, 0, nullptr);
  const DeviceBuffer<half>* results[3] = {&q, &k, &v};
  for (int64_t part = 0; part < 3; ++part) {
    expect_close(to_float(results[part]->download()),
                 expected_heads(packed, bias, part, batch, len, heads, head_dim), 1.0,
                 kF16Tolerance);
  }
}

// ---- gather, convert --------------------------------------------------------------------------

TEST(cuda_gather_rows, ReordersRowsWithStridesForEveryType) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t src_rows = 6, row_len = 300, src_stride = 310, dst_stride = 305, count = 8;
  std::vector<int32_t> indices(count);
  for (auto& index : indices) index = static_cast<int32_t>(random.integer(0, src_rows - 1));
  const std::vector<float> src = random.uniform(src_rows * src_stride, -100.0f, 100.0f);
  std::vector<int32_t> src_int(src.size());
  for (size_t i = 0; i < src.size(); ++i) src_int[i] = static_cast<int32_t>(src[i] * 1000.0f);
  const float fill = -7.0f;  // the gaps between dst rows must stay as they were
  std::vector<double> expected(count * dst_stride, fill);
  for (int64_t i = 0; i < count; ++i)
    for (int64_t c = 0; c < row_len; ++c)
      expected[i * dst_stride + c] = src[indices[i] * src_stride + c];

  DeviceBuffer<int32_t> indices_d(indices);
  DeviceBuffer<float> src_f(src), dst_f(std::vector<float>(count * dst_stride, fill));
  cuda::gather_rows(src_f.get(), src_stride, indices_d.get(), count, row_len, dst_f.get(),
                    dst_stride, nullptr);
  expect_close(dst_f.download(), expected, 0.0, 0.0);  // a copy: exact

  DeviceBuffer<half> src_h(to_half(src)), dst_h(to_half(std::vector<float>(count * dst_stride, fill)));
  cuda::gather_rows(src_h.get(), src_stride, indices_d.get(), count, row_len, dst_h.get(),
                    dst_stride, nullptr);
  const std::vector<float> src_rounded = round_to_half(src);
  std::vector<double> expected_h(expected);
  for (int64_t i = 0; i < count; ++i)
    for (int64_t c = 0; c < row_len; ++c)
      expected_h[i * dst_stride + c] = src_rounded[indices[i] * src_stride + c];
  expect_close(to_float(dst_h.download()), expected_h, 0.0, 0.0);

  DeviceBuffer<int32_t> src_i(src_int), dst_i(std::vector<int32_t>(count * dst_stride, -7));
  cuda::gather_rows(src_i.get(), src_stride, indices_d.get(), count, row_len, dst_i.get(),
                    dst_stride, nullptr);
  const std::vector<int32_t> got = dst_i.download();
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t c = 0; c < dst_stride; ++c) {
      const int32_t want = c < row_len ? src_int[indices[i] * src_stride + c] : -7;
      ASSERT_EQ(got[i * dst_stride + c], want) << "row " << i << " column " << c;
    }
  }
}

TEST(cuda_convert, F32ToF16MatchesHostRoundingAndBack) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  std::vector<float> values = random.uniform(5000, -70000.0f, 70000.0f);  // some beyond f16's max
  const std::vector<float> small = random.uniform(5000, -1e-4f, 1e-4f);   // f16 subnormals
  values.insert(values.end(), small.begin(), small.end());
  DeviceBuffer<float> in(values), back(values.size());
  DeviceBuffer<half> out(values.size());
  cuda::convert(in.get(), values.size(), out.get(), nullptr);
  cuda::convert(out.get(), values.size(), back.get(), nullptr);
  const std::vector<half> got = out.download();
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(static_cast<__half_raw>(got[i]).x, float_to_half(values[i])) << "value " << values[i];
  }
  const std::vector<float> widened = back.download();
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(widened[i], half_to_float(float_to_half(values[i]))) << "value " << values[i];
}

}  // namespace
}  // namespace xf::test
