// Embedding: token rows (any stored dtype) scaled plus the position sinusoid, and its backward.
#include "xf/kernels/embedding.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "parallel_cpu.h"
#include "simd_cpu.h"
#include "xf/error.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/matmul.h"

namespace xf::cpu {

// PE(position, :) for `dim` columns. Angles in double: position * frequency reaches hundreds of
// radians, where a float angle would be off by ~1e-5; Marian's own layout is computed in float,
// as Marian computes it, so that imported models see the values they were trained with.
void write_sinusoid(PositionEncoding encoding, int64_t position, int64_t dim, float* out) {
  const double log_base = std::log(10000.0);
  if (encoding == PositionEncoding::interleaved) {
    for (int64_t even = 0; even < dim; even += 2) {
      const double frequency = std::exp(-log_base * static_cast<double>(even) / dim);
      const double angle = static_cast<double>(position) * frequency;
      out[even] = static_cast<float>(std::sin(angle));
      if (even + 1 < dim) out[even + 1] = static_cast<float>(std::cos(angle));
    }
    return;
  }
  const int64_t half = dim / 2;
  if (encoding == PositionEncoding::sin_then_cos) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(position) / std::pow(10000.0, 2.0 * i / dim);
      out[i] = static_cast<float>(std::sin(angle));
      out[half + i] = static_cast<float>(std::cos(angle));
    }
    return;
  }
  const float increment = std::log(10000.0f) / (static_cast<float>(half) - 1.0f);
  for (int64_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(position) * std::exp(static_cast<float>(i) * -increment);
    out[i] = std::sin(angle);
    out[half + i] = std::cos(angle);
  }
}

namespace {

XF_VECTORIZED_BODY void scale_add_body(const float* row, float scale, int64_t dim, float* out) {
#pragma omp simd
  for (int64_t c = 0; c < dim; ++c) out[c] = scale * row[c] + out[c];
}
XF_DISPATCH_BY_ISA(scale_add)

// out_row += scale * table[id, :], widening f16/bf16/int8 rows piece by piece on the stack.
void add_scaled_row(const WeightMatrix& table, int64_t id, float scale, float* out_row) {
  const int64_t dim = table.cols;
  if (table.dtype == DType::f32) {
    scale_add(static_cast<const float*>(table.data) + id * dim, scale, dim, out_row);
    return;
  }
  constexpr int64_t kPiece = 256;
  float widened[kPiece];
  const size_t element = dtype_size(table.dtype);
  for (int64_t begin = 0; begin < dim; begin += kPiece) {
    // A one-row view of columns [begin, begin + width) of row id.
    WeightMatrix piece = table;
    piece.cols = std::min(kPiece, dim - begin);
    piece.data = static_cast<const char*>(table.data) + (id * dim + begin) * element;
    piece.row_scales = table.row_scales != nullptr ? table.row_scales + id : nullptr;
    load_row(piece, 0, widened);
    scale_add(widened, scale, piece.cols, out_row + begin);
  }
}

}  // namespace

void write_sinusoids(PositionEncoding encoding, int64_t positions, int64_t dim, float* out) {
  for (int64_t p = 0; p < positions; ++p) write_sinusoid(encoding, p, dim, out + p * dim);
}

namespace {

// embed() over a table of `vocab` rows of `dim`: add_row(id, scale, out_row) adds a scaled row.
template <typename AddRow>
void embed_rows_of(int64_t vocab, int64_t dim, AddRow&& add_row, const int32_t* ids,
                   const int32_t* positions, int64_t count, float scale, float* out, int threads,
                   PositionEncoding encoding, Sinusoids sinusoids) {
  // Checked here, before the parallel loop: an exception cannot leave an OpenMP region.
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw Error("embed: token id " + std::to_string(ids[i]) + " outside the vocabulary of " +
                  std::to_string(vocab));
    }
    if (positions[i] < 0) throw Error("embed: negative position " + std::to_string(positions[i]));
  }
  // Each thread takes a contiguous range of rows. The sinusoid of the last position is kept on
  // the stack (dims up to kCachedDim): a decode step's rows all share one position, so it costs
  // one row of sin/cos instead of one per row.
  constexpr int64_t kCachedDim = 2048;
  auto embed_rows = [&](int64_t begin, int64_t end) {
    float sinusoid[kCachedDim];
    int64_t cached_position = -1;
    for (int64_t i = begin; i < end; ++i) {
      float* out_row = out + i * dim;
      if (positions[i] < sinusoids.positions) {
        std::memcpy(out_row, sinusoids.values + positions[i] * dim, dim * sizeof(float));
      } else if (dim <= kCachedDim) {
        if (positions[i] != cached_position) {
          write_sinusoid(encoding, positions[i], dim, sinusoid);
          cached_position = positions[i];
        }
        std::memcpy(out_row, sinusoid, dim * sizeof(float));
      } else {
        write_sinusoid(encoding, positions[i], dim, out_row);
      }
      add_row(ids[i], scale, out_row);
    }
  };
  const int64_t parts = std::min<int64_t>(std::max(threads, 1), count);
  detail::parallel_for(parts, threads, count * dim > detail::kMinSharedWork, [&](int64_t part) {
    embed_rows(count * part / parts, count * (part + 1) / parts);
  });
}

}  // namespace

void embed(const WeightMatrix& table, const int32_t* ids, const int32_t* positions, int64_t count,
           float scale, float* out, int threads, PositionEncoding encoding, Sinusoids sinusoids) {
  embed_rows_of(
      table.rows, table.cols,
      [&](int64_t id, float row_scale, float* out_row) { add_scaled_row(table, id, row_scale, out_row); },
      ids, positions, count, scale, out, threads, encoding, sinusoids);
}

void embed(const StaticMatmul& table, const int32_t* ids, const int32_t* positions, int64_t count,
           float scale, float* out, int threads, PositionEncoding encoding, Sinusoids sinusoids) {
  if (!table.holds_f32_weight_rows()) throw Error("embed: the product holds no f32 rows of its own");
  const int64_t dim = table.k();
  embed_rows_of(
      table.n(), dim,
      [&](int64_t id, float row_scale, float* out_row) {
        // Copied out piece by piece, then added as add_scaled_row adds a stored f32 row.
        constexpr int64_t kPiece = 256;
        float values[kPiece];
        for (int64_t begin = 0; begin < dim; begin += kPiece) {
          const int64_t width = std::min(kPiece, dim - begin);
          table.copy_weight_row(id, begin, width, values);
          scale_add(values, row_scale, width, out_row + begin);
        }
      },
      ids, positions, count, scale, out, threads, encoding, sinusoids);
}

template <typename T>
void embedding_forward(const T* table, int64_t vocab, int64_t dim, const int32_t* ids,
                       const int32_t* positions, int64_t count, T scale, T* out, int threads) {
  if constexpr (std::is_same_v<T, float>) {
    embed(WeightMatrix{DType::f32, table, nullptr, vocab, dim}, ids, positions, count, scale, out,
          threads);
  } else {
    (void)vocab;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
    for (int64_t i = 0; i < count; ++i) {
      const T* row = table + static_cast<int64_t>(ids[i]) * dim;
      const T p = T(positions[i]);
      for (int64_t j = 0; j < dim; j += 2) {
        // PE(p, 2i) = sin(p / 10000^(2i/dim)), PE(p, 2i+1) = cos(p / 10000^(2i/dim))
        const T angle = p / std::pow(T(10000), T(j) / T(dim));
        out[i * dim + j] = scale * row[j] + std::sin(angle);
        if (j + 1 < dim) out[i * dim + j + 1] = scale * row[j + 1] + std::cos(angle);
      }
    }
  }
}

template <typename T>
void embedding_backward(const T* dout, const int32_t* ids, int64_t count, int64_t dim, T scale,
                        T* dtable, int threads) {
  // Rows of the table repeat (the same token twice), so threads own columns, not rows.
  detail::for_each_column_block(dim, threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = 0; i < count; ++i) {
      const T* src = dout + i * dim;
      T* dst = dtable + static_cast<int64_t>(ids[i]) * dim;
      for (int64_t j = begin; j < end; ++j) dst[j] += scale * src[j];
    }
  });
}

#define XF_INSTANTIATE(T) \
  template void embedding_forward<T>(const T*, int64_t, int64_t, const int32_t*, const int32_t*, \
                                     int64_t, T, T*, int); \
  template void embedding_backward<T>(const T*, const int32_t*, int64_t, int64_t, T, T*, int);
XF_INSTANTIATE(float)
XF_INSTANTIATE(double)

}  // namespace xf::cpu
