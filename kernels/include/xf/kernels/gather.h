#pragma once
// Row gathers: the beam search reorders its K/V cache, scores and token history with them.
//
// gather_rows: dst[i, :] = src[indices[i], :] for i in [0, count); rows of row_len elements with
//   the given element strides. indices: [count], each in the caller's range (validated by the
//   caller). dst must not alias src.
// reorder_rows_in_place (CPU): the cache reorder in place, one copy of the decoder's K/V caches
//   instead of two. Rows come in groups of `group` consecutive rows (a sentence's beam
//   hypotheses). Afterwards, row i holds what row parents[i] held before in its first row_len
//   elements (the rest of the row is left as it is). A group's parents all lie in one group at
//   or after it: its own (the beam step), or a later one (the rows of a sentence moved forward
//   when finished sentences are dropped). Rows whose parent is themselves are not touched; a row
//   that another row of its group still needs is copied to the scratch before it is
//   overwritten, so a step copies about as many rows as hypotheses changed, not every row.
//   The same reorder applies to `slabs` blocks of rows, slab_stride apart (the K and V caches of
//   every layer), which run in parallel; the groups too when none draws from another.
//   rows: [slabs, slab_stride], each slab [count, stride]; parents: [count];
//   scratch: [threads, group, row_len] floats.
//   Throws xf::Error when a parent breaks the rule above (nothing is written then).
#include "xf/kernels/types.h"

namespace xf::cpu {

void gather_rows(const float* src, int64_t src_stride, const int32_t* indices, int64_t count,
                 int64_t row_len, float* dst, int64_t dst_stride, int threads);

void reorder_rows_in_place(float* rows, int64_t slabs, int64_t slab_stride, int64_t stride,
                           const int32_t* parents, int64_t count, int64_t group, int64_t row_len,
                           float* scratch, int threads);

}  // namespace xf::cpu

namespace xf::cuda {

// The K/V cache [batch*beam, heads, max_len, head_dim] is gathered as rows of
// heads*max_len*head_dim.
void gather_rows(const float* src, int64_t src_stride, const int32_t* indices, int64_t count,
                 int64_t row_len, float* dst, int64_t dst_stride, cudaStream_t stream);
void gather_rows(const half* src, int64_t src_stride, const int32_t* indices, int64_t count,
                 int64_t row_len, half* dst, int64_t dst_stride, cudaStream_t stream);
void gather_rows(const int32_t* src, int64_t src_stride, const int32_t* indices, int64_t count,
                 int64_t row_len, int32_t* dst, int64_t dst_stride, cudaStream_t stream);

}  // namespace xf::cuda
