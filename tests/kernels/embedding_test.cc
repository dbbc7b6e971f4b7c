// Embedding: scale * table[id] + the position's sinusoid, and its backward (the scatter-add of
// the output gradient into the table rows), against double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gradient_check.h"
#include "kernel_device.h"
#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/matmul.h"

namespace xf::test {
namespace {

// out[i, c] = scale * table[id, c] + PE(position, c), PE(p, 2j) = sin(p / 10000^(2j/dim)),
// PE(p, 2j+1) = cos(...), in double.
std::vector<double> reference_embed(const std::vector<double>& table, int64_t dim,
                                    const std::vector<int32_t>& ids,
                                    const std::vector<int32_t>& positions, double scale) {
  std::vector<double> out(ids.size() * dim);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t c = 0; c < dim; ++c) {
      const double angle = positions[i] / std::pow(10000.0, static_cast<double>(c - c % 2) / dim);
      const double sinusoid = c % 2 == 0 ? std::sin(angle) : std::cos(angle);
      out[i * dim + c] = scale * table[ids[i] * dim + c] + sinusoid;
    }
  }
  return out;
}

struct Tokens {
  std::vector<int32_t> ids, positions;
};

// Ids in the table, positions from 0 with runs of equal positions, as in a decode step (the CPU
// kernel reuses the sinusoid).
Tokens random_tokens(RandomInputs& random, int64_t vocab, int64_t count) {
  Tokens t;
  for (int64_t i = 0; i < count; ++i) {
    t.ids.push_back(static_cast<int32_t>(random.integer(0, vocab - 1)));
    t.positions.push_back(static_cast<int32_t>(random.integer(0, 1023)));
  }
  t.positions[0] = 0;
  for (int64_t i = 3; i < count; i += 4) t.positions[i] = t.positions[i - 1];
  return t;
}

using Embed = KernelTest;

// Every output precision the device writes, from a table of its precision: the result holds
// to the output's tolerance.
TEST_P(Embed, ScalesTheRowAndAddsSinusoids) {
  for (auto [vocab, dim] : {std::pair<int64_t, int64_t>{50, 64}, {11, 7}, {50, 37}, {9, 600},
                            {3, 2100}}) {  // odd: a last sine alone; wide: past the CPU's caches
    SCOPED_TRACE("dim " + std::to_string(dim));
    const std::vector<float> table = uniform(vocab * dim, -1.0f, 1.0f);
    const Tokens t = random_tokens(random, vocab, 23);
    const float scale = std::sqrt(static_cast<float>(dim));
    const std::vector<double> expected = reference_embed(to_double(table), dim, t.ids, t.positions, scale);
    for (const Precision out : device().embed_outputs()) {
      expect_close(device().embed(table, vocab, dim, t.ids, t.positions, scale,
                                  PositionEncoding::interleaved, out),
                   expected, 1.0, KernelDevice::tolerance(out));
    }
  }
}

// The sin-then-cos layouts of imported models add the sinusoid that write_sinusoid writes
// (checked against double formulas below), on an even dim.
TEST_P(Embed, SinThenCosLayoutsAddWriteSinusoid) {
  const int64_t vocab = 50, dim = 36;
  const std::vector<float> table = uniform(vocab * dim, -1.0f, 1.0f);
  const Tokens t = random_tokens(random, vocab, 24);
  const double scale = 6.0;
  for (const PositionEncoding encoding : {PositionEncoding::sin_then_cos, PositionEncoding::marian_sin_then_cos}) {
    std::vector<double> expected(t.ids.size() * dim);
    std::vector<float> sinusoid(dim);
    for (size_t i = 0; i < t.ids.size(); ++i) {
      cpu::write_sinusoid(encoding, t.positions[i], dim, sinusoid.data());
      for (int64_t c = 0; c < dim; ++c)
        expected[i * dim + c] = scale * table[t.ids[i] * dim + c] + sinusoid[c];
    }
    // Marian's float angles at positions up to 1023 differ by a few float ulps between CUDA's
    // sinf and the host's: 1e-4 there.
    const double tolerance = std::max(
        device().tolerance(), encoding == PositionEncoding::marian_sin_then_cos ? 1e-4 : 0.0);
    expect_close(device().embed(table, vocab, dim, t.ids, t.positions, static_cast<float>(scale),
                                encoding, device().precision()),
                 expected, 1.0, tolerance);
  }
}

// Here the contracts differ: the CPU kernel refuses an id outside the table (and a negative
// position); the CUDA kernel, which cannot throw from the device, writes the sinusoid alone
// without reading outside the table.
TEST_P(Embed, IdsOutsideTheTable) {
  const int64_t vocab = 4, dim = 8;
  const std::vector<float> table = uniform(vocab * dim, -1.0f, 1.0f);
  if (device().kind() == DeviceKind::cpu) {
    for (int32_t id : {-1, 4})
      EXPECT_THROW(device().embed(table, vocab, dim, {id}, {0}, 1.0f, PositionEncoding::interleaved,
                                  Precision::f32),
                   Error) << id;
    EXPECT_THROW(device().embed(table, vocab, dim, {0}, {-1}, 1.0f, PositionEncoding::interleaved,
                                Precision::f32),
                 Error);
    return;
  }
  const std::vector<int32_t> ids = {2, -1, 4, 1}, positions = {0, 3, 7, 9};
  std::vector<double> zero_outside = to_double(table);
  zero_outside.resize((vocab + 1) * dim, 0.0);  // the "row" 4 and -1 read: zeros
  std::vector<int32_t> row_read = ids;
  for (int32_t& id : row_read) id = id < 0 || id >= vocab ? static_cast<int32_t>(vocab) : id;
  for (const Precision out : device().embed_outputs())
    expect_close(device().embed(table, vocab, dim, ids, positions, 2.0f,
                                PositionEncoding::interleaved, out),
                 reference_embed(zero_outside, dim, row_read, positions, 2.0), 1.0,
                 KernelDevice::tolerance(out));
}

XF_KERNEL_TEST_DEVICES(Embed, all_devices());

// ---- CPU: the tables a model stores (f16, int8 with row scales), write_sinusoid ----------------

void check_stored_table(DType dtype, int64_t vocab, int64_t dim, int threads, RandomInputs& random) {
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " dim " + std::to_string(dim));
  const std::vector<float> values = random.uniform(vocab * dim, -0.2f, 0.2f);
  std::vector<double> widened(vocab * dim);  // the table's values as stored, exactly
  std::vector<uint16_t> narrow(vocab * dim);
  std::vector<int8_t> quantized(vocab * dim);
  std::vector<float> row_scales(vocab);
  cpu::WeightMatrix table{dtype, nullptr, nullptr, vocab, dim};
  if (dtype == DType::f16) {
    for (size_t i = 0; i < values.size(); ++i) narrow[i] = float_to_half(values[i]);
    for (size_t i = 0; i < values.size(); ++i) widened[i] = decode_binary_float(narrow[i], 5, 10);
    table.data = narrow.data();
  } else {
    quantize_rows_int8(values.data(), vocab, dim, quantized.data(), row_scales.data());
    for (size_t i = 0; i < values.size(); ++i)
      widened[i] = static_cast<double>(quantized[i]) * row_scales[i / dim];
    table.data = quantized.data();
    table.row_scales = row_scales.data();
  }
  const Tokens t = random_tokens(random, vocab, 23);
  const float scale = std::sqrt(static_cast<float>(dim));
  std::vector<float> out(t.ids.size() * dim);
  cpu::embed(table, t.ids.data(), t.positions.data(), static_cast<int64_t>(t.ids.size()), scale,
             out.data(), threads);
  expect_close(out, reference_embed(widened, dim, t.ids, t.positions, scale), 1.0, 1e-5);
}

TEST(EmbedCpu, F16AndInt8TablesAsStored) {
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (DType dtype : {DType::f16, DType::int8}) {
    check_stored_table(dtype, 50, 64, 2, random);
    check_stored_table(dtype, 11, 7, 1, random);    // odd dim: the last column is a sine
    check_stored_table(dtype, 9, 600, 2, random);   // wider than the widening buffer
    check_stored_table(dtype, 3, 2100, 2, random);  // wider than the cached sinusoid
  }
}

// A table tied to the output layer, read from the product's own f32 copy (at AVX2: panels of 16
// rows), gives embed() over the table itself bit for bit: ids in every row of a panel, the last
// panel partial (vocab 37), dims across the copy's pieces of 256 columns (300).
TEST(EmbedCpu, FromTheOutputLayersCopyEqualsTheTable) {
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  cpu::CpuEngine engine(2);
  // 1000 rows: two slices of oneDNN's packed copy where it holds one (AVX-512), at 2 threads.
  for (auto [vocab, dim] : std::vector<std::pair<int64_t, int64_t>>{{37, 32}, {37, 300}, {1000, 64}}) {
    const std::vector<float> values = random.uniform(vocab * dim, -0.2f, 0.2f);
    const cpu::WeightMatrix table{DType::f32, values.data(), nullptr, vocab, dim};
    const cpu::StaticMatmul product(engine, 8, table, false);
    if (!product.holds_f32_weight_rows()) {
      EXPECT_THROW(cpu::embed(product, nullptr, nullptr, 0, 1.0f, nullptr, 2), Error);
      GTEST_SKIP() << "the f32 products read no copy of their own at this level: " << product.implementation();
    }
    Tokens t = random_tokens(random, vocab, 40);
    for (int32_t id = 0; id < vocab; ++id) t.ids[id % t.ids.size()] = id;
    const int64_t count = static_cast<int64_t>(t.ids.size());
    const float scale = std::sqrt(static_cast<float>(dim));
    std::vector<float> from_table(count * dim), from_copy(count * dim);
    cpu::embed(table, t.ids.data(), t.positions.data(), count, scale, from_table.data(), 2);
    cpu::embed(product, t.ids.data(), t.positions.data(), count, scale, from_copy.data(), 2);
    for (int64_t i = 0; i < count * dim; ++i)
      ASSERT_EQ(from_copy[i], from_table[i]) << "dim " << dim << " token " << i / dim << " column " << i % dim;
    const int32_t outside = static_cast<int32_t>(vocab), position = 0;
    EXPECT_THROW(cpu::embed(product, &outside, &position, 1, scale, from_copy.data(), 2), Error);
  }
}

// The sinusoid layouts of imported models, against double-precision formulas written here:
// Hugging Face's Marian (the paper's frequencies, all sines then all cosines) and Marian's own
// (frequencies 10000^(-i / (d/2 - 1)), sines then cosines; Marian computes them in float, hence
// the looser bound at positions in the hundreds).
TEST(WriteSinusoid, SinThenCosLayoutsMatchDoubleFormulas) {
  const int64_t dim = 16, half = dim / 2;
  for (const PositionEncoding encoding : {PositionEncoding::sin_then_cos, PositionEncoding::marian_sin_then_cos}) {
    for (const int32_t position : {0, 1, 7, 300}) {
      std::vector<float> out(dim);
      cpu::write_sinusoid(encoding, position, dim, out.data());
      for (int64_t c = 0; c < dim; ++c) {
        const int64_t i = c % half;
        const double frequency = encoding == PositionEncoding::sin_then_cos
                                     ? std::pow(10000.0, -2.0 * i / dim)
                                     : std::exp(-static_cast<double>(i) * std::log(10000.0) / (half - 1));
        const double angle = position * frequency;
        const double expected = c < half ? std::sin(angle) : std::cos(angle);
        const double tolerance = encoding == PositionEncoding::sin_then_cos ? 1e-6 : 1e-7 * (1 + position) + 1e-6;
        EXPECT_NEAR(out[c], expected, tolerance) << "column " << c << " position " << position;
      }
    }
    // embed() adds the same sinusoid to the scaled row.
    const std::vector<float> table_values(3 * dim, 0.5f);
    const cpu::WeightMatrix table{DType::f32, table_values.data(), nullptr, 3, dim};
    const std::vector<int32_t> ids = {2, 0}, positions = {5, 9};
    std::vector<float> out(2 * dim), sinusoid(dim);
    cpu::embed(table, ids.data(), positions.data(), 2, 2.0f, out.data(), 1, encoding);
    for (int64_t r = 0; r < 2; ++r) {
      cpu::write_sinusoid(encoding, positions[r], dim, sinusoid.data());
      for (int64_t c = 0; c < dim; ++c) EXPECT_FLOAT_EQ(out[r * dim + c], 1.0f + sinusoid[c]);
    }
  }
}

// With the sinusoids written once (the runtime's table), embed() gives what it computes without
// them, bit for bit, for positions inside the table and beyond it, in every layout.
TEST(EmbedSinusoids, TableRowsGiveTheComputedValues) {
  const int64_t dim = 24, vocab = 5, count = 9, table_positions = 6;
  std::vector<float> table_values(vocab * dim);
  for (size_t i = 0; i < table_values.size(); ++i) table_values[i] = 0.01f * static_cast<float>(i % 97) - 0.3f;
  const cpu::WeightMatrix table{DType::f32, table_values.data(), nullptr, vocab, dim};
  const std::vector<int32_t> ids = {1, 4, 0, 2, 3, 1, 0, 4, 2}, positions = {0, 1, 2, 5, 0, 3, 6, 7, 40};
  for (const PositionEncoding encoding :
       {PositionEncoding::interleaved, PositionEncoding::sin_then_cos, PositionEncoding::marian_sin_then_cos}) {
    std::vector<float> sinusoids(table_positions * dim), computed(count * dim), from_table(count * dim);
    cpu::write_sinusoids(encoding, table_positions, dim, sinusoids.data());
    for (const int threads : {1, 2}) {
      cpu::embed(table, ids.data(), positions.data(), count, 1.5f, computed.data(), threads, encoding);
      cpu::embed(table, ids.data(), positions.data(), count, 1.5f, from_table.data(), threads, encoding,
                 cpu::Sinusoids{sinusoids.data(), table_positions});
      EXPECT_EQ(from_table, computed) << "encoding " << static_cast<int>(encoding) << " threads " << threads;
    }
  }
}

// ---- backward ---------------------------------------------------------------------------------

using trainer::testing::expect_gradient;
using trainer::testing::random_values;
using trainer::testing::weighted_sum;

// The double reference itself: the CPU trainer's kernels instantiated for double, against
// finite differences of the training forward (loss = sum(weights * output)).
TEST(EmbeddingReference, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t vocab = 6, dim = 40, count = 9;
  auto table = random_values(rng, vocab * dim);
  const std::vector<int32_t> ids = {3, 1, 3, 0, 5, 3, 1, 2, 0};  // repeats on purpose
  const std::vector<int32_t> positions = {0, 1, 2, 3, 0, 1, 2, 7, 8};
  const auto weights = random_values(rng, count * dim);
  const double scale = std::sqrt(double(dim));
  std::vector<double> out(count * dim);
  auto loss = [&] {
    cpu::embedding_forward<double>(table.data(), vocab, dim, ids.data(), positions.data(), count,
                                   scale, out.data(), 2);
    return weighted_sum(weights, out.data());
  };
  std::vector<double> dtable(vocab * dim, 0.0);
  cpu::embedding_backward<double>(weights.data(), ids.data(), count, dim, scale, dtable.data(), 2);
  expect_gradient(loss, table.data(), table.size(), dtable.data(), "dtable");
  // Token 4 never appears: its row's gradient is exactly zero.
  for (int64_t j = 0; j < dim; ++j) EXPECT_EQ(dtable[4 * dim + j], 0.0);
}

using EmbedBackward = KernelTest;

TEST_P(EmbedBackward, ScatterAddsRepeatedIdsIntoTheTable) {
  const int64_t count = 300, dim = 40, vocab = 17;  // every id repeats many times
  const float scale = 3.25f;
  std::vector<int32_t> ids(count);
  for (int32_t& id : ids) id = static_cast<int32_t>(random.integer(0, vocab - 1));
  const std::vector<float> dout = uniform(count * dim, -1.0f, 1.0f);
  std::vector<float> table = uniform(vocab * dim, -1.0f, 1.0f);  // the gradient accumulates
  std::vector<double> expected = to_double(table);
  cpu::embedding_backward<double>(to_double(dout).data(), ids.data(), count, dim, scale,
                                  expected.data(), 1);
  device().embedding_backward(dout, ids, dim, vocab, scale, table);
  expect_close_to_largest(table, expected, tolerance());
}

XF_KERNEL_TEST_DEVICES(EmbedBackward, devices_with(Feature::f32_only_ops));

}  // namespace
}  // namespace xf::test
