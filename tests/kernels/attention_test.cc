// Attention against a textbook double-precision attention: padding masks, causal offsets,
// empty sources, the fused QKV layout, the output over the queries, the decoder step over the
// K/V cache (both cache layouts, long caches in chunks); CUDA's head split into Q/K/V and the
// cache; and the trainer's attention backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "kernel_device.h"
#include "xf/kernels/attention.h"

namespace xf::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A strided [batch, heads, positions, head_dim] view over a buffer.
struct View {
  const float* data;
  HeadStrides strides;
  double at(int64_t b, int64_t h, int64_t p, int64_t d) const {
    return data[b * strides.batch + h * strides.head + p * strides.position + d];
  }
};

HeadStrides contiguous(const AttentionShape& shape, int64_t positions) {
  return {shape.heads * positions * shape.head_dim, positions * shape.head_dim, shape.head_dim};
}

struct Reference {
  std::vector<double> out;            // [batch, heads, query_len, head_dim]
  std::vector<double> probabilities;  // [batch, heads, query_len, key_len]
  std::vector<double> score_error;    // [batch, heads, query_len]: largest score rounding
  std::vector<double> error_bound;    // [batch, heads, query_len]: allowance for out
};

// Textbook attention in double, reading only the keys each query may see; none visible: zeros.
Reference reference_attention(const View& q, const View& k, const View& v,
                              const AttentionShape& shape, const int32_t* key_lengths,
                              int64_t causal_offset) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
  Reference ref;
  ref.out.assign(shape.batch * shape.heads * shape.query_len * shape.head_dim, 0.0);
  ref.probabilities.assign(shape.batch * shape.heads * shape.query_len * shape.key_len, 0.0);
  ref.error_bound.assign(shape.batch * shape.heads * shape.query_len, 0.0);
  ref.score_error.assign(shape.batch * shape.heads * shape.query_len, 0.0);
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      for (int64_t i = 0; i < shape.query_len; ++i) {
        const int64_t row = (b * shape.heads + h) * shape.query_len + i;
        std::vector<double> scores;
        double largest_score_error = 0.0, largest_value = 0.0;
        for (int64_t j = 0; j < shape.key_len; ++j) {
          const bool padded = key_lengths != nullptr && j >= key_lengths[b];
          const bool future = causal_offset >= 0 && j > i + causal_offset;
          if (padded || future) break;
          double dot = 0.0, magnitude = 0.0;
          for (int64_t d = 0; d < shape.head_dim; ++d) {
            dot += q.at(b, h, i, d) * k.at(b, h, j, d);
            magnitude += std::fabs(q.at(b, h, i, d) * k.at(b, h, j, d));
          }
          scores.push_back(dot * scale);
          // Rounding errors of a float dot product grow like a random walk: about
          // sqrt(head_dim) * eps * sum|q k| (twice that here, as a margin).
          largest_score_error =
              std::max(largest_score_error, 2.0 * std::sqrt(static_cast<double>(shape.head_dim)) *
                                                FLT_EPSILON * magnitude * scale);
          for (int64_t d = 0; d < shape.head_dim; ++d)
            largest_value = std::max(largest_value, std::fabs(v.at(b, h, j, d)));
        }
        if (scores.empty()) continue;
        const double max = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (double& s : scores) sum += (s = std::exp(s - max));
        for (size_t j = 0; j < scores.size(); ++j) {
          const double p = scores[j] / sum;
          ref.probabilities[row * shape.key_len + j] = p;
          for (int64_t d = 0; d < shape.head_dim; ++d) ref.out[row * shape.head_dim + d] += p * v.at(b, h, j, d);
        }
        // Score errors e perturb each probability by a factor within exp(+-2e); the output, a
        // weighted mean of values, moves by at most that times the largest value. On top, the
        // f32 tolerance of 1e-5 relative.
        ref.score_error[row] = largest_score_error;
        ref.error_bound[row] = 2.0 * largest_score_error * largest_value + 1e-5 * largest_value;
      }
    }
  }
  return ref;
}

class Attention : public KernelTest {
 protected:
  // The CPU kernel is held to the rounding bound of its f32 arithmetic; the CUDA kernels to
  // their buffers' relative tolerance (outputs are weighted means of values in [-1, 1]: scale 1).
  bool rounding_bound() const { return device().kind() == DeviceKind::cpu; }

  // Compares the view `out_strides` of `out` (and the probabilities, when given) with ref.
  void expect_matches(const std::vector<float>& out, HeadStrides out_strides,
                      const std::vector<float>& probabilities, const Reference& ref,
                      const AttentionShape& shape) {
    std::vector<float> got;
    std::vector<double> allowed;
    for (int64_t b = 0; b < shape.batch; ++b)
      for (int64_t h = 0; h < shape.heads; ++h)
        for (int64_t i = 0; i < shape.query_len; ++i)
          for (int64_t d = 0; d < shape.head_dim; ++d) {
            const int64_t row = (b * shape.heads + h) * shape.query_len + i;
            got.push_back(out[b * out_strides.batch + h * out_strides.head + i * out_strides.position + d]);
            const double e = ref.out[row * shape.head_dim + d];
            allowed.push_back(rounding_bound() ? std::max(ref.error_bound[row], 1e-7)
                                               : tolerance() * (std::fabs(e) + 1.0));
          }
    expect_within(got, ref.out, [&](size_t i) { return allowed[i]; });
    if (probabilities.empty()) return;
    expect_within(probabilities, ref.probabilities, [&](size_t i) {
      const double p = ref.probabilities[i];
      return rounding_bound() ? (2.0 * ref.score_error[i / shape.key_len] + 1e-5) * p + 1e-7
                              : tolerance() * (p + 1.0);
    });
  }

  // Attention on contiguous [batch, heads, len, head_dim] q, k, v. Keys and values a query
  // must not see are NaN, so reading one shows up in the output; with and without the
  // probabilities output.
  // q, k, v in one buffer, each contiguous [batch, heads, len, head_dim], the output like q.
  AttentionCall contiguous_call(const AttentionShape& shape, float q_range, int64_t causal_offset) {
    AttentionCall call;
    call.shape = shape;
    call.q = call.out = contiguous(shape, shape.query_len);
    call.k = call.v = contiguous(shape, shape.key_len);
    const int64_t q_size = shape.batch * shape.heads * shape.query_len * shape.head_dim;
    const int64_t kv_size = shape.batch * shape.heads * shape.key_len * shape.head_dim;
    call.input = uniform(q_size, -q_range, q_range);
    const Floats kv = uniform(2 * kv_size, -1.0f, 1.0f);
    call.input.insert(call.input.end(), kv.begin(), kv.end());
    call.k_at = q_size;
    call.v_at = q_size + kv_size;
    call.out_size = q_size;
    call.causal_offset = causal_offset;
    return call;
  }
  Reference reference(const AttentionCall& call) {
    const float* data = call.input.data();
    return reference_attention({data + call.q_at, call.q}, {data + call.k_at, call.k},
                               {data + call.v_at, call.v}, call.shape,
                               call.key_lengths.empty() ? nullptr : call.key_lengths.data(),
                               call.causal_offset);
  }

  // Keys and values a query must not see are NaN, so reading one shows up in the output; with
  // and without the probabilities output.
  void check_contiguous(const AttentionShape& shape, const Ints& key_lengths,
                        int64_t causal_offset, float q_range, int threads = 2) {
    SCOPED_TRACE("batch " + std::to_string(shape.batch) + " heads " + std::to_string(shape.heads) +
                 " query_len " + std::to_string(shape.query_len) + " key_len " +
                 std::to_string(shape.key_len) + " causal_offset " + std::to_string(causal_offset) +
                 " threads " + std::to_string(threads));
    AttentionCall call = contiguous_call(shape, q_range, causal_offset);
    call.key_lengths = key_lengths;
    call.cpu_threads = threads;
    const Reference ref = reference(call);
    for (size_t b = 0; b < key_lengths.size(); ++b)
      for (int64_t h = 0; h < shape.heads; ++h)
        for (int64_t j = std::max<int64_t>(key_lengths[b], 0); j < shape.key_len; ++j)
          for (int64_t d = 0; d < shape.head_dim; ++d) {
            const int64_t at = b * call.k.batch + h * call.k.head + j * call.k.position + d;
            call.input[call.k_at + at] = call.input[call.v_at + at] = kNaN;
          }
    call.probabilities = true;
    const AttentionResult with = device().attention(call);
    expect_matches(with.out, call.out, with.probabilities, ref, shape);
    call.probabilities = false;
    expect_matches(device().attention(call).out, call.out, {}, ref, shape);
  }
};

TEST_P(Attention, PaddedKeysAreMasked) {
  for (int threads : {1, 2}) {
    check_contiguous({3, 2, 5, 7, 16}, {7, 3, 1}, -1, 1.0f, threads);
    check_contiguous({2, 4, 9, 40, 64}, {40, 17}, -1, 1.0f, threads);
  }
  check_contiguous({3, 8, 33, 33, 64}, {33, 20, 2}, -1, 2.0f);
}

TEST_P(Attention, NoMaskSeesEveryKey) {
  check_contiguous({2, 3, 4, 6, 8}, {}, -1, 1.0f);
  check_contiguous({3, 2, 5, 300, 16}, {}, -1, 1.0f);  // cross-attention: more keys than queries
  // Head sizes not a multiple of 8: the CPU's dot products without its 8-float vectors.
  check_contiguous({2, 3, 4, 6, 12}, {}, -1, 1.0f);
  check_contiguous({2, 2, 1, 9, 20}, {}, -1, 1.0f);
}

TEST_P(Attention, CausalOffsetLimitsTheKeys) {
  check_contiguous({2, 2, 6, 6, 16}, {}, 0, 1.0f);      // training: square mask
  check_contiguous({2, 2, 9, 9, 64}, {}, 0, 1.0f);
  check_contiguous({2, 2, 6, 6, 16}, {6, 4}, 0, 1.0f);  // plus padding
  check_contiguous({3, 2, 1, 9, 16}, {}, 4, 1.0f);      // decode step 4
  check_contiguous({1, 1, 3, 8, 4}, {}, 2, 1.0f, 1);    // queries 2..4 of a prefix
  check_contiguous({1, 1, 4, 10, 8}, {}, 3, 1.0f);
  // More keys than the CPU kernel's query blocks keep on the stack: one query at a time.
  check_contiguous({2, 2, 3, 600, 16}, {600, 598}, 596, 1.0f);
}

TEST_P(Attention, EmptyKeyLengthGivesZeros) {
  check_contiguous({3, 2, 4, 5, 8}, {0, 5, 0}, -1, 1.0f);
}

TEST_P(Attention, LargeLogitsStayFinite) {
  // Scores in the hundreds: a softmax without the max shift would overflow.
  check_contiguous({2, 2, 3, 20, 64}, {20, 11}, -1, 300.0f);
}

// The encoder's fused QKV projection output [batch, len, 3 * d_model]: Q, K and V are views with
// head stride head_dim and position stride 3 * d_model; the output is [batch, len, d_model].
TEST_P(Attention, StridedFusedQkvLayout) {
  struct Case {
    AttentionShape shape;
    std::vector<int32_t> key_lengths;
  };
  for (const Case& c : {Case{{3, 4, 7, 7, 8}, {7, 2, 5}}, Case{{4, 3, 19, 19, 32}, {19, 7, 0, 1}}}) {
    const AttentionShape& s = c.shape;
    const int64_t d_model = s.heads * s.head_dim;
    AttentionCall call;
    call.shape = s;
    call.input = uniform(s.batch * s.query_len * 3 * d_model, -1.0f, 1.0f);
    call.q = call.k = call.v = {s.query_len * 3 * d_model, s.head_dim, 3 * d_model};
    call.out = {s.query_len * d_model, s.head_dim, d_model};
    call.k_at = d_model;
    call.v_at = 2 * d_model;
    call.out_size = s.batch * s.query_len * d_model;
    call.key_lengths = c.key_lengths;
    call.probabilities = true;
    for (int64_t causal_offset : {int64_t{-1}, int64_t{0}}) {
      SCOPED_TRACE("batch " + std::to_string(s.batch) + " causal_offset " + std::to_string(causal_offset));
      call.causal_offset = causal_offset;
      const AttentionResult got = device().attention(call);
      expect_matches(got.out, call.out, got.probabilities, reference(call), s);
    }
  }
}

TEST_P(Attention, OutputMayOverwriteTheQueries) {
  for (const auto& [shape, causal_offset] : {std::pair<AttentionShape, int64_t>{{2, 3, 5, 5, 8}, 0},
                                             {{3, 2, 5, 30, 16}, -1}}) {
    AttentionCall call = contiguous_call(shape, 1.0f, causal_offset);
    call.out_over_q = true;
    expect_matches(device().attention(call).out, call.out, {}, reference(call), shape);
  }
}

// A decoder step: one query per row, read from rows of q_row_stride (the fused QKV rows, or
// [rows, d_model]), against the self-attention cache filled up to `step`, in either layout:
// head-major [rows, heads, max_len, head_dim] or position-major [rows, max_len, heads, head_dim].
// The rest of the cache is NaN and must stay unread. Long caches run in chunks on CUDA.
TEST_P(Attention, DecoderStepOverTheCache) {
  struct Case {
    int64_t rows, heads, head_dim, max_len, step;
    bool head_major, fused_rows;
  };
  std::vector<Case> cases = {{4, 2, 16, 12, 0, true, false}, {4, 2, 16, 12, 5, true, false},
                             {4, 2, 16, 12, 11, true, false}, {6, 4, 64, 64, 30, true, true},
                             {6, 4, 64, 600, 599, false, true}, {5, 3, 20, 30, 13, false, true}};
  for (bool head_major : {true, false})
    for (auto [max_len, step] : {std::pair<int64_t, int64_t>{40, 0}, {40, 17}, {256, 255},
                                 {700, 256} /* 2 chunks, the last 1 key */, {700, 650}})
      cases.push_back({6, 4, 64, max_len, step, head_major, true});
  for (const Case& c : cases) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " max_len " + std::to_string(c.max_len) +
                 " step " + std::to_string(c.step) + (c.head_major ? " head-major" : " position-major"));
    const int64_t d_model = c.heads * c.head_dim, q_row_stride = c.fused_rows ? 3 * d_model : d_model;
    const HeadStrides cache = c.head_major ? HeadStrides{c.heads * c.max_len * c.head_dim, c.max_len * c.head_dim, c.head_dim}
                                           : HeadStrides{c.max_len * d_model, c.head_dim, d_model};
    std::vector<float> k = uniform(c.rows * c.heads * c.max_len * c.head_dim, -1.0f, 1.0f);
    std::vector<float> v = uniform(k.size(), -1.0f, 1.0f);
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t h = 0; h < c.heads; ++h)
        for (int64_t p = c.step + 1; p < c.max_len; ++p)
          for (int64_t d = 0; d < c.head_dim; ++d)
            k[r * cache.batch + h * cache.head + p * cache.position + d] =
                v[r * cache.batch + h * cache.head + p * cache.position + d] = kNaN;
    const std::vector<float> q = uniform(c.rows * q_row_stride, -1.0f, 1.0f);
    // key_len is the whole cache; the causal offset (the step) hides positions after it.
    const AttentionShape shape{c.rows, c.heads, 1, c.max_len, c.head_dim};
    const HeadStrides q_strides{q_row_stride, c.head_dim, q_row_stride};
    const Reference ref = reference_attention({q.data(), q_strides}, {k.data(), cache},
                                              {v.data(), cache}, shape, nullptr, c.step);
    expect_matches(device().cached_attention(q, q_row_stride, k, v, cache, c.rows, c.heads,
                                             c.head_dim, c.max_len, c.step),
                   {d_model, c.head_dim, d_model}, {}, ref, shape);
  }
}

XF_KERNEL_TEST_DEVICES(Attention, all_devices());

// ---- CUDA's head split ------------------------------------------------------------------------

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

using SplitHeads = KernelTest;

TEST_P(SplitHeads, QkvIntoContiguousHeadsAndKvIntoCacheAtStep) {
  for (auto [batch, len, heads, head_dim] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{3, 5, 4, 8},
                                             {2, 3, 2, 16}}) {
    const int64_t d_model = heads * head_dim;
    const std::vector<float> packed = uniform(batch * len * 3 * d_model, -1.0f, 1.0f);
    const std::vector<float> bias = uniform(3 * d_model, -1.0f, 1.0f);

    // Encoder: Q, K, V each to [batch, heads, len, head_dim].
    std::vector<float> qkv[3];
    HeadStrides strides[3];
    for (int p = 0; p < 3; ++p) {
      qkv[p].assign(batch * heads * len * head_dim, kNaN);
      strides[p] = {heads * len * head_dim, len * head_dim, head_dim};
    }
    device().add_bias_split_heads(packed, 0, 3 * d_model, bias, 0, 3, batch, len, heads, head_dim,
                                  qkv, strides, 0);
    for (int64_t part = 0; part < 3; ++part)
      expect_close(qkv[part], expected_heads(packed, bias, part, batch, len, heads, head_dim), 1.0,
                   tolerance());

    // Decoder step: K and V (parts 1 and 2 of the packed rows, one token each) into the cache
    // [batch, heads, max_len, head_dim] at position `step`; every other position is untouched.
    const int64_t max_len = 7, step = 4;
    const float untouched = 1234.5f;
    std::vector<float> caches[2];
    for (int p = 0; p < 2; ++p) {
      caches[p].assign(batch * heads * max_len * head_dim, untouched);
      strides[p] = {heads * max_len * head_dim, max_len * head_dim, head_dim};
    }
    // Token 0 of each sequence, K|V only: start at column d_model, row stride len * 3 * d_model.
    device().add_bias_split_heads(packed, d_model, len * 3 * d_model, bias, d_model, 2, batch, 1,
                                  heads, head_dim, caches, strides, step);
    for (int64_t part = 1; part <= 2; ++part) {
      const std::vector<double> part_heads = expected_heads(packed, bias, part, batch, len, heads, head_dim);
      std::vector<double> expected(caches[0].size(), untouched);
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t d = 0; d < head_dim; ++d)
            expected[((b * heads + h) * max_len + step) * head_dim + d] =
                part_heads[((b * heads + h) * len + 0) * head_dim + d];
      expect_close(caches[part - 1], expected, 1.0, tolerance());
    }
  }
}

XF_KERNEL_TEST_DEVICES(SplitHeads, devices_with(Feature::split_heads));

// ---- backward ---------------------------------------------------------------------------------

using trainer::testing::expect_gradient;
using trainer::testing::random_values;
using trainer::testing::weighted_sum;

struct FiniteDifferenceCase {
  const char* name;
  int64_t batch, heads, query_len, key_len, head_dim;
  bool fused;      // q, k, v in one [B, len, 3*d] buffer (self-attention) or separate buffers
  bool causal;
  bool padding;    // key lengths shorter than key_len (one sequence sees no key at all)
  bool dropout;    // a dropout mask on the probabilities
};

class AttentionReference : public ::testing::TestWithParam<FiniteDifferenceCase> {};

// The double reference itself (the CPU trainer's kernels in double) against finite differences.
TEST_P(AttentionReference, BackwardMatchesFiniteDifferences) {
  const FiniteDifferenceCase c = GetParam();
  std::mt19937_64 rng(std::random_device{}());
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
    cpu::make_dropout_mask(rng(), 7, mask.size(), static_cast<float>(p), mask.data(), 2);
  }
  const double keep_scale = 1.0 / (1.0 - p);
  const HeadStrides os = {c.query_len * d, c.head_dim, d};
  std::vector<double> out(c.batch * c.query_len * d), probabilities(prob_count);
  std::vector<double> scratch(2 * 2 * c.key_len);
  const AttentionShape shape{c.batch, c.heads, c.query_len, c.key_len, c.head_dim};
  const auto weights = random_values(rng, out.size());
  auto loss = [&] {
    cpu::attention_forward<double>(input.data() + q_at, qs, input.data() + k_at, ks,
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
    , AttentionReference,
    ::testing::Values(FiniteDifferenceCase{"self", 2, 2, 5, 5, 3, true, false, false, false},
                      FiniteDifferenceCase{"self_padded", 3, 2, 4, 4, 3, true, false, true, false},
                      FiniteDifferenceCase{"causal", 2, 3, 5, 5, 2, true, true, false, false},
                      FiniteDifferenceCase{"cross_padded", 3, 2, 3, 5, 4, false, false, true, false},
                      FiniteDifferenceCase{"self_dropout", 2, 2, 5, 5, 3, true, true, true, true},
                      FiniteDifferenceCase{"cross_dropout", 2, 2, 4, 3, 3, false, false, false, true}),
    [](const ::testing::TestParamInfo<FiniteDifferenceCase>& info) { return info.param.name; });

using AttentionBackward = KernelTest;

// The trainer's packed [batch, len, width] views, against the double reference; with dropout,
// the forward's dropout(P) V too where the device has it as a kernel of its own.
TEST_P(AttentionBackward, MatchesDoubleReference) {
  struct Case {
    int64_t batch, heads, query_len, key_len, head_dim;
    bool causal, padded;
    float dropout;
  };
  for (const Case& c : {Case{2, 3, 7, 9, 16, false, true, 0.0f}, Case{3, 2, 8, 8, 8, true, false, 0.0f},
                        Case{2, 2, 6, 11, 32, false, true, 0.3f}, Case{1, 4, 40, 40, 64, true, false, 0.1f}}) {
    SCOPED_TRACE("batch " + std::to_string(c.batch) + " heads " + std::to_string(c.heads) +
                 " tq " + std::to_string(c.query_len) + " tk " + std::to_string(c.key_len) +
                 (c.causal ? " causal" : "") + " dropout " + std::to_string(c.dropout));
    const int64_t width = c.heads * c.head_dim;
    const int64_t nq = c.batch * c.query_len * width, nk = c.batch * c.key_len * width;
    AttentionBackwardCall call;
    call.q = uniform(nq, -1.5f, 1.5f), call.dout = uniform(nq, -1, 1);
    call.k = uniform(nk, -1.5f, 1.5f), call.v = uniform(nk, -1, 1);
    std::vector<int32_t> key_lengths(c.batch, static_cast<int32_t>(c.key_len));
    if (c.padded)
      for (int32_t& length : key_lengths) length = static_cast<int32_t>(random.integer(1, c.key_len));
    call.q_strides = {c.query_len * width, c.head_dim, width};
    call.k_strides = {c.key_len * width, c.head_dim, width};
    call.shape = {c.batch, c.heads, c.query_len, c.key_len, c.head_dim};
    const int64_t score_count = c.batch * c.heads * c.query_len * c.key_len;
    call.seed = static_cast<uint64_t>(random.integer(0, 1 << 30)), call.site = 0x100000202;
    call.dropout = c.dropout;
    std::vector<uint8_t> mask(score_count, 1);
    if (c.dropout > 0) cpu::make_dropout_mask(call.seed, call.site, score_count, c.dropout, mask.data(), 1);
    const double keep_scale = 1.0 / (1.0 - c.dropout);

    // Reference forward (for P and, with dropout, the dropped-out output) and backward.
    const std::vector<double> q = to_double(call.q), k = to_double(call.k), v = to_double(call.v);
    std::vector<double> probabilities(score_count), out(nq), scratch(4 * c.key_len);
    cpu::attention_forward<double>(q.data(), call.q_strides, k.data(), call.k_strides, v.data(),
                                   call.k_strides, out.data(), call.q_strides, call.shape,
                                   c.padded ? key_lengths.data() : nullptr, c.causal ? 0 : -1,
                                   probabilities.data(), c.dropout > 0 ? mask.data() : nullptr,
                                   keep_scale, scratch.data(), 1);
    std::vector<double> dq(nq), dk(nk), dv(nk);
    cpu::attention_backward<double>(to_double(call.dout).data(), call.q_strides, q.data(),
                                    call.q_strides, k.data(), call.k_strides, v.data(),
                                    call.k_strides, probabilities.data(),
                                    c.dropout > 0 ? mask.data() : nullptr, keep_scale, dq.data(),
                                    call.q_strides, dk.data(), call.k_strides, dv.data(),
                                    call.k_strides, call.shape, scratch.data(), 1);
    call.probabilities.assign(probabilities.begin(), probabilities.end());
    const AttentionGradients got = device().attention_backward(call);
    expect_close_to_largest(got.dq, dq, tolerance());
    expect_close_to_largest(got.dk, dk, tolerance());
    expect_close_to_largest(got.dv, dv, tolerance());
    if (c.dropout > 0 && device().has(Feature::dropout_values))
      expect_close_to_largest(device().attention_dropout_values(call), out, tolerance());
  }
}

XF_KERNEL_TEST_DEVICES(AttentionBackward, devices_with(Feature::f32_only_ops));

}  // namespace
}  // namespace xf::test
