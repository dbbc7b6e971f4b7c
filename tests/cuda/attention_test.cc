// attention() (padding masks, causal offsets, strided fused-QKV views, aliasing) and
// cached_attention() (one query per row over the K/V cache, split into chunks when long) against
// a textbook double-precision attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
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

using cuda::AttentionShape;
using cuda::half;
using cuda::HeadStrides;

// A strided [batch, heads, positions, head_dim] view over host values.
struct View {
  const std::vector<float>* data;
  HeadStrides strides;
  double at(int64_t b, int64_t h, int64_t p, int64_t d) const {
    return (*data)[b * strides.batch + h * strides.head + p * strides.position + d];
  }
};

struct Reference {
  std::vector<double> out;            // [batch, heads, query_len, head_dim]
  std::vector<double> probabilities;  // [batch, heads, query_len, key_len]
};

// softmax(q k^T / sqrt(head_dim)) v over the keys each query may see; none visible: zeros.
Reference reference_attention(const View& q, const View& k, const View& v,
                              const AttentionShape& s, const std::vector<int32_t>* key_lengths,
                              int64_t causal_offset) {
  Reference ref{std::vector<double>(s.batch * s.heads * s.query_len * s.head_dim, 0.0),
                std::vector<double>(s.batch * s.heads * s.query_len * s.key_len, 0.0)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.query_len; ++i) {
        int64_t visible = s.key_len;
        if (key_lengths != nullptr) visible = std::min<int64_t>(visible, (*key_lengths)[b]);
        if (causal_offset >= 0) visible = std::min(visible, i + causal_offset + 1);
        if (visible <= 0) continue;
        std::vector<double> scores(visible);
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < s.head_dim; ++d) dot += q.at(b, h, i, d) * k.at(b, h, j, d);
          scores[j] = dot * scale;
        }
        const double max = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (double& score : scores) sum += (score = std::exp(score - max));
        const int64_t row = (b * s.heads + h) * s.query_len + i;
        for (int64_t j = 0; j < visible; ++j) {
          const double p = scores[j] / sum;
          ref.probabilities[row * s.key_len + j] = p;
          for (int64_t d = 0; d < s.head_dim; ++d)
            ref.out[row * s.head_dim + d] += p * v.at(b, h, j, d);
        }
      }
  return ref;
}

// Reads a [batch, heads, query_len, head_dim] result out of a strided buffer.
std::vector<float> gather_view(const std::vector<float>& values, HeadStrides strides,
                               const AttentionShape& s) {
  std::vector<float> out;
  const View view{&values, strides};
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.query_len; ++i)
        for (int64_t d = 0; d < s.head_dim; ++d) out.push_back(static_cast<float>(view.at(b, h, i, d)));
  return out;
}

// The encoder's layout: q, k, v read in place from the fused projection [batch, len, 3*d_model],
// the output written to [batch, len, d_model]; sequence 2 is all padding (an empty source).
TEST(cuda_attention, EncoderWithPaddingOverFusedQkvF32) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const AttentionShape s{4, 3, 19, 19, 32};
  const int64_t d_model = s.heads * s.head_dim;
  const std::vector<float> qkv = random.uniform(s.batch * s.query_len * 3 * d_model, -1.0f, 1.0f);
  const std::vector<int32_t> key_lengths = {19, 7, 0, 1};
  const HeadStrides packed{s.query_len * 3 * d_model, s.head_dim, 3 * d_model};
  const HeadStrides out_strides{s.query_len * d_model, s.head_dim, d_model};

  DeviceBuffer<float> qkv_d(qkv), out(s.batch * s.query_len * d_model);
  DeviceBuffer<float> probabilities(s.batch * s.heads * s.query_len * s.key_len);
  DeviceBuffer<int32_t> lengths_d(key_lengths);
  cuda::attention(qkv_d.get(), packed, qkv_d.get() + d_model, packed, qkv_d.get() + 2 * d_model,
                  packed, out.get(), out_strides, s, lengths_d.get(), -1, probabilities.get(),
                  nullptr);
  const std::vector<float> k_values(qkv.begin() + d_model, qkv.end());
  const std::vector<float> v_values(qkv.begin() + 2 * d_model, qkv.end());
  const Reference ref = reference_attention({&qkv, packed}, {&k_values, packed},
                                            {&v_values, packed}, s, &key_lengths, -1);
  // Outputs are convex combinations of values in [-1, 1]: scale 1.
  expect_close(gather_view(out.download(), out_strides, s), ref.out, 1.0, kF32Tolerance);
  expect_close(probabilities.download(), ref.probabilities, 1.0, kF32Tolerance);
}

// Causal self-attention (the trainer's decoder) and cross-attention with more keys than
// queries, on contiguous tensors; the output overwrites q.
TEST(cuda_attention, CausalAndCrossAttentionWithOutputAliasingQueryF32) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  struct Case {
    AttentionShape shape;
    int64_t causal_offset;
  };
  for (const Case& c : {Case{{2, 2, 9, 9, 64}, 0}, Case{{3, 2, 5, 300, 16}, -1},
                        Case{{1, 1, 4, 10, 8}, 3}}) {
    const AttentionShape& s = c.shape;
    SCOPED_TRACE("query_len " + std::to_string(s.query_len) + " key_len " +
                 std::to_string(s.key_len) + " causal_offset " + std::to_string(c.causal_offset));
    const HeadStrides q_strides = cuda::contiguous_head_strides(s.heads, s.query_len, s.head_dim);
    const HeadStrides kv_strides = cuda::contiguous_head_strides(s.heads, s.key_len, s.head_dim);
    const std::vector<float> q = random.uniform(s.batch * s.heads * s.query_len * s.head_dim, -1, 1);
    const std::vector<float> k = random.uniform(s.batch * s.heads * s.key_len * s.head_dim, -1, 1);
    const std::vector<float> v = random.uniform(k.size(), -1.0f, 1.0f);
    DeviceBuffer<float> q_d(q), k_d(k), v_d(v);
    cuda::attention(q_d.get(), q_strides, k_d.get(), kv_strides, v_d.get(), kv_strides, q_d.get(),
                    q_strides, s, nullptr, c.causal_offset, nullptr, nullptr);
    const Reference ref = reference_attention({&q, q_strides}, {&k, kv_strides},
                                              {&v, kv_strides}, s, nullptr, c.causal_offset);
    expect_close(q_d.download(), ref.out, 1.0, kF32Tolerance);
  }
}

TEST(cuda_attention, EncoderWithPaddingF16) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const AttentionShape s{3, 8, 33, 33, 64};
  const HeadStrides strides = cuda::contiguous_head_strides(s.heads, s.query_len, s.head_dim);
  const size_t count = s.batch * s.heads * s.query_len * s.head_dim;
  const std::vector<float> q = round_to_half(random.uniform(count, -2.0f, 2.0f));
  const std::vector<float> k = round_to_half(random.uniform(count, -2.0f, 2.0f));
  const std::vector<float> v = round_to_half(random.uniform(count, -1.0f, 1.0f));
  const std::vector<int32_t> key_lengths = {33, 20, 2};
  DeviceBuffer<half> q_d(to_half(q)), k_d(to_half(k)), v_d(to_half(v)), out(count);
  DeviceBuffer<int32_t> lengths_d(key_lengths);
  cuda::attention(q_d.get(), strides, k_d.get(), strides, v_d.get(), strides, out.get(), strides,
                  s, lengths_d.get(), -1, nullptr, nullptr);
  const Reference ref =
      reference_attention({&q, strides}, {&k, strides}, {&v, strides}, s, &key_lengths, -1);
  expect_close(to_float(out.download()), ref.out, 1.0, kF16Tolerance);
}

enum class CacheLayout { head_major, position_major };

// One decoder step: queries read from fused QKV rows [rows, 3*d_model] against cache positions
// 0..step, in either cache layout; the output rows [rows, d_model].
template <typename T>
void check_cached_attention(int64_t max_len, int64_t step, CacheLayout layout, double tolerance) {
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  SCOPED_TRACE("max_len " + std::to_string(max_len) + " step " + std::to_string(step) +
               (layout == CacheLayout::head_major ? " head-major" : " position-major"));
  const int64_t rows = 6, heads = 4, head_dim = 64, d_model = heads * head_dim;
  std::vector<float> q = random.uniform(rows * 3 * d_model, -1.0f, 1.0f);
  std::vector<float> k = random.uniform(rows * heads * max_len * head_dim, -1.0f, 1.0f);
  std::vector<float> v = random.uniform(k.size(), -1.0f, 1.0f);
  const HeadStrides cache_strides =
      layout == CacheLayout::head_major
          ? cuda::contiguous_head_strides(heads, max_len, head_dim)
          : HeadStrides{max_len * d_model, head_dim, d_model};
  // Cache positions after `step` hold values that would dominate the result if read.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t p = step + 1; p < max_len; ++p)
        for (int64_t d = 0; d < head_dim; ++d) {
          const int64_t at = r * cache_strides.batch + h * cache_strides.head +
                             p * cache_strides.position + d;
          k[at] = 1e4f;
          v[at] = 1e4f;
        }
  std::vector<T> q_t, k_t, v_t;
  if constexpr (std::is_same_v<T, half>) {
    q = round_to_half(q), k = round_to_half(k), v = round_to_half(v);
    q_t = to_half(q), k_t = to_half(k), v_t = to_half(v);
  } else {
    q_t = q, k_t = k, v_t = v;
  }
  DeviceBuffer<T> q_d(q_t), k_d(k_t), v_d(v_t), out(rows * d_model);
  const size_t workspace_bytes =
      cuda::cached_attention_workspace_bytes(rows, heads, head_dim, max_len);
  DeviceBuffer<char> workspace(std::max<size_t>(workspace_bytes, 1));
  cuda::cached_attention(q_d.get(), 3 * d_model, k_d.get(), v_d.get(), cache_strides, rows, heads,
                         head_dim, max_len, step, out.get(), d_model, workspace.get(), nullptr);
  const AttentionShape s{rows, heads, 1, max_len, head_dim};
  const HeadStrides q_strides{3 * d_model, head_dim, 3 * d_model};
  const Reference ref = reference_attention({&q, q_strides}, {&k, cache_strides},
                                            {&v, cache_strides}, s, nullptr, step);
  std::vector<float> got;
  if constexpr (std::is_same_v<T, half>) {
    got = to_float(out.download());
  } else {
    got = out.download();
  }
  expect_close(got, ref.out, 1.0, tolerance);
}

TEST(cuda_cached_attention, ShortCacheInOneBlockF32) {
  XF_SKIP_WITHOUT_GPU();
  for (const CacheLayout layout : {CacheLayout::head_major, CacheLayout::position_major}) {
    check_cached_attention<float>(40, 0, layout, kF32Tolerance);
    check_cached_attention<float>(40, 17, layout, kF32Tolerance);
    check_cached_attention<float>(256, 255, layout, kF32Tolerance);
  }
}

TEST(cuda_cached_attention, LongCacheSplitIntoChunksF32) {
  XF_SKIP_WITHOUT_GPU();
  for (const CacheLayout layout : {CacheLayout::head_major, CacheLayout::position_major}) {
    check_cached_attention<float>(700, 256, layout, kF32Tolerance);  // 2 chunks, the last 1 key
    check_cached_attention<float>(700, 650, layout, kF32Tolerance);  // three chunks
  }
}

TEST(cuda_cached_attention, ShortAndLongCacheF16) {
  XF_SKIP_WITHOUT_GPU();
  check_cached_attention<half>(64, 30, CacheLayout::head_major, kF16Tolerance);
  check_cached_attention<half>(600, 599, CacheLayout::position_major, kF16Tolerance);
}

}  // namespace
}  // namespace xf::test
