// attention() against a double-precision reference: padding, causal offsets, empty sources,
// the fused QKV layout and the decoder's K/V cache layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "random_inputs.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/gather.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/softmax.h"

namespace xf::cpu {
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

struct Reference {
  std::vector<double> out;            // [batch, heads, query_len, head_dim]
  std::vector<double> probabilities;  // [batch, heads, query_len, key_len]
  std::vector<double> score_error;    // [batch, heads, query_len]: largest score rounding
  std::vector<double> error_bound;    // [batch, heads, query_len]: allowance for out
};

// Textbook attention in double, reading only the keys each query may see.
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
          for (int64_t d = 0; d < shape.head_dim; ++d) {
            largest_value = std::max(largest_value, std::fabs(v.at(b, h, j, d)));
          }
        }
        if (scores.empty()) continue;  // no visible key: zeros
        const double max = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (double& s : scores) sum += (s = std::exp(s - max));
        for (size_t j = 0; j < scores.size(); ++j) {
          const double p = scores[j] / sum;
          ref.probabilities[row * shape.key_len + j] = p;
          for (int64_t d = 0; d < shape.head_dim; ++d) {
            ref.out[row * shape.head_dim + d] += p * v.at(b, h, j, d);
          }
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

void expect_matches(const float* out, HeadStrides out_strides, const float* probabilities,
                    const Reference& ref, const AttentionShape& shape) {
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      for (int64_t i = 0; i < shape.query_len; ++i) {
        const int64_t row = (b * shape.heads + h) * shape.query_len + i;
        const double tolerance = std::max(ref.error_bound[row], 1e-7);
        for (int64_t d = 0; d < shape.head_dim; ++d) {
          const float got =
              out[b * out_strides.batch + h * out_strides.head + i * out_strides.position + d];
          ASSERT_NEAR(got, ref.out[row * shape.head_dim + d], tolerance)
              << "batch " << b << " head " << h << " query " << i << " dim " << d;
        }
        if (probabilities == nullptr) continue;
        for (int64_t j = 0; j < shape.key_len; ++j) {
          const double expected = ref.probabilities[row * shape.key_len + j];
          ASSERT_NEAR(probabilities[row * shape.key_len + j], expected,
                      (2.0 * ref.score_error[row] + 1e-5) * expected + 1e-7)
              << "batch " << b << " head " << h << " query " << i << " key " << j;
        }
      }
    }
  }
}

HeadStrides contiguous(const AttentionShape& shape, int64_t positions) {
  return {shape.heads * positions * shape.head_dim, positions * shape.head_dim, shape.head_dim};
}

// Runs attention on contiguous [batch, heads, len, head_dim] tensors. Keys and values a query
// must not see are NaN, so reading one shows up in the output.
void check_contiguous(const AttentionShape& shape, const std::vector<int32_t>& key_lengths,
                      int64_t causal_offset, float q_range, int threads,
                      test::RandomInputs& random) {
  SCOPED_TRACE("batch " + std::to_string(shape.batch) + " heads " + std::to_string(shape.heads) +
               " query_len " + std::to_string(shape.query_len) + " key_len " +
               std::to_string(shape.key_len) + " causal_offset " + std::to_string(causal_offset) +
               " threads " + std::to_string(threads));
  const HeadStrides q_strides = contiguous(shape, shape.query_len);
  const HeadStrides kv_strides = contiguous(shape, shape.key_len);
  std::vector<float> q = random.uniform(
      shape.batch * shape.heads * shape.query_len * shape.head_dim, -q_range, q_range);
  std::vector<float> k =
      random.uniform(shape.batch * shape.heads * shape.key_len * shape.head_dim, -1, 1);
  std::vector<float> v =
      random.uniform(shape.batch * shape.heads * shape.key_len * shape.head_dim, -1, 1);
  const int32_t* lengths = key_lengths.empty() ? nullptr : key_lengths.data();
  const Reference ref = reference_attention({q.data(), q_strides}, {k.data(), kv_strides},
                                            {v.data(), kv_strides}, shape, lengths, causal_offset);
  // Poison keys beyond every batch entry's length: the kernel must never read them.
  for (int64_t b = 0; b < shape.batch && lengths != nullptr; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      for (int64_t j = std::max<int64_t>(lengths[b], 0); j < shape.key_len; ++j) {
        for (int64_t d = 0; d < shape.head_dim; ++d) {
          k[b * kv_strides.batch + h * kv_strides.head + j * kv_strides.position + d] = kNaN;
          v[b * kv_strides.batch + h * kv_strides.head + j * kv_strides.position + d] = kNaN;
        }
      }
    }
  }
  std::vector<float> out(q.size(), kNaN);
  std::vector<float> probabilities(shape.batch * shape.heads * shape.query_len * shape.key_len,
                                   kNaN);
  std::vector<float> scratch(threads * shape.key_len);
  attention(q.data(), q_strides, k.data(), kv_strides, v.data(), kv_strides, out.data(), q_strides,
            shape, lengths, causal_offset, probabilities.data(), scratch.data(), threads);
  expect_matches(out.data(), q_strides, probabilities.data(), ref, shape);
  // Without the probabilities output, the same result.
  std::vector<float> out_only(q.size(), kNaN);
  attention(q.data(), q_strides, k.data(), kv_strides, v.data(), kv_strides, out_only.data(),
            q_strides, shape, lengths, causal_offset, nullptr, scratch.data(), threads);
  expect_matches(out_only.data(), q_strides, nullptr, ref, shape);
}

TEST(Attention, PaddedKeysAreMasked) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (int threads : {1, 2}) {
    check_contiguous({3, 2, 5, 7, 16}, {7, 3, 1}, -1, 1.0f, threads, random);
    check_contiguous({2, 4, 9, 40, 64}, {40, 17}, -1, 1.0f, threads, random);
  }
}

TEST(Attention, NoMaskSeesEveryKey) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  check_contiguous({2, 3, 4, 6, 8}, {}, -1, 1.0f, 2, random);
}

TEST(Attention, CausalOffsetLimitsTheKeys) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  check_contiguous({2, 2, 6, 6, 16}, {}, 0, 1.0f, 2, random);      // training: square mask
  check_contiguous({2, 2, 6, 6, 16}, {6, 4}, 0, 1.0f, 2, random);  // plus padding
  check_contiguous({3, 2, 1, 9, 16}, {}, 4, 1.0f, 2, random);      // decode step 4
  check_contiguous({1, 1, 3, 8, 4}, {}, 2, 1.0f, 1, random);       // queries 2..4 of a prefix
  // More keys than the kernel's query blocks keep on the stack: one query at a time.
  check_contiguous({2, 2, 3, 600, 16}, {600, 598}, 596, 1.0f, 2, random);
}

TEST(Attention, EmptyKeyLengthGivesZeros) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  check_contiguous({3, 2, 4, 5, 8}, {0, 5, 0}, -1, 1.0f, 2, random);
}

TEST(Attention, LargeLogitsStayFinite) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  // Scores in the hundreds: a softmax without the max shift would overflow.
  check_contiguous({2, 2, 3, 20, 64}, {20, 11}, -1, 300.0f, 2, random);
}

// The fused QKV projection output [batch, len, 3 * d_model]: Q, K and V are views with
// head stride head_dim and position stride 3 * d_model; the output is [batch, len, d_model].
TEST(Attention, StridedFusedQkvLayout) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t batch = 3, len = 7, heads = 4, head_dim = 8, d_model = heads * head_dim;
  const AttentionShape shape{batch, heads, len, len, head_dim};
  const std::vector<float> qkv = random.uniform(batch * len * 3 * d_model, -1.0f, 1.0f);
  const HeadStrides qkv_strides{len * 3 * d_model, head_dim, 3 * d_model};
  const HeadStrides out_strides{len * d_model, head_dim, d_model};
  const std::vector<int32_t> key_lengths{7, 2, 5};
  for (int64_t causal_offset : {int64_t{-1}, int64_t{0}}) {
    const Reference ref = reference_attention(
        {qkv.data(), qkv_strides}, {qkv.data() + d_model, qkv_strides},
        {qkv.data() + 2 * d_model, qkv_strides}, shape, key_lengths.data(), causal_offset);
    std::vector<float> out(batch * len * d_model, kNaN);
    std::vector<float> scratch(2 * len);
    attention(qkv.data(), qkv_strides, qkv.data() + d_model, qkv_strides, qkv.data() + 2 * d_model,
              qkv_strides, out.data(), out_strides, shape, key_lengths.data(), causal_offset,
              nullptr, scratch.data(), 2);
    expect_matches(out.data(), out_strides, nullptr, ref, shape);
  }
}

// A decode step: one query per batch entry ([batch, 1, d_model]) against the self-attention
// cache [batch, heads, max_len, head_dim] filled up to the current step; the rest of the cache
// is NaN and must stay unread.
TEST(Attention, DecoderCacheLayout) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t batch = 4, heads = 2, head_dim = 16, max_len = 12, d_model = heads * head_dim;
  const HeadStrides cache_strides{heads * max_len * head_dim, max_len * head_dim, head_dim};
  const HeadStrides query_strides{d_model, head_dim, d_model};
  for (int64_t step : {int64_t{0}, int64_t{5}, max_len - 1}) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<float> k_cache(batch * heads * max_len * head_dim, kNaN);
    std::vector<float> v_cache(k_cache.size(), kNaN);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t start = b * cache_strides.batch + h * cache_strides.head;
        const std::vector<float> keys = random.uniform((step + 1) * head_dim, -1.0f, 1.0f);
        const std::vector<float> values = random.uniform((step + 1) * head_dim, -1.0f, 1.0f);
        std::copy(keys.begin(), keys.end(), k_cache.begin() + start);
        std::copy(values.begin(), values.end(), v_cache.begin() + start);
      }
    }
    const std::vector<float> query = random.uniform(batch * d_model, -1.0f, 1.0f);
    // key_len is the whole cache; the causal offset (the step) hides positions after it.
    const AttentionShape shape{batch, heads, 1, max_len, head_dim};
    const Reference ref =
        reference_attention({query.data(), query_strides}, {k_cache.data(), cache_strides},
                            {v_cache.data(), cache_strides}, shape, nullptr, step);
    std::vector<float> out(batch * d_model, kNaN);
    std::vector<float> probabilities(batch * heads * max_len, kNaN);
    std::vector<float> scratch(2 * max_len);
    attention(query.data(), query_strides, k_cache.data(), cache_strides, v_cache.data(),
              cache_strides, out.data(), query_strides, shape, nullptr, step, probabilities.data(),
              scratch.data(), 2);
    expect_matches(out.data(), query_strides, probabilities.data(), ref, shape);
  }
}

TEST(Attention, OutputMayOverwriteTheQueries) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const AttentionShape shape{2, 3, 5, 5, 8};
  const HeadStrides strides = contiguous(shape, 5);
  std::vector<float> q = random.uniform(2 * 3 * 5 * 8, -1.0f, 1.0f);
  const std::vector<float> k = random.uniform(q.size(), -1.0f, 1.0f);
  const std::vector<float> v = random.uniform(q.size(), -1.0f, 1.0f);
  const Reference ref = reference_attention({q.data(), strides}, {k.data(), strides},
                                            {v.data(), strides}, shape, nullptr, 0);
  std::vector<float> scratch(2 * 5);
  attention(q.data(), strides, k.data(), strides, v.data(), strides, q.data(), strides, shape,
            nullptr, 0, nullptr, scratch.data(), 2);
  expect_matches(q.data(), strides, nullptr, ref, shape);
}

}  // namespace
}  // namespace xf::cpu
