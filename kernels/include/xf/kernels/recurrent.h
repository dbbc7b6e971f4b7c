#pragma once
// One decoding step of Marian's SSRU cell (rnn/cells.h, class SSRU), row by row:
//
// ssru_step: for each of `rows` rows r, with [x | f] = in[r] (the step's product u W^T + b,
//   [rows, 2 * dim]: candidate then forget gate, bias included) and c the row's cell state at
//   cell + state_row * dim (state_row = state_rows[r], or r when state_rows is null):
//     s = sigmoid(f);  c = s * c + (1 - s) * x  (c taken as 0 when `first`);  out[r] = relu(c)
//   Marian's highway(c, x, f) then relu. The state is updated in place; out is [rows, dim].
//   f32 math (the state of the half kernel is half, as its activations are).
#include "xf/kernels/types.h"

namespace xf::cpu {

void ssru_step(const float* in, float* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               float* out, int threads);

}  // namespace xf::cpu

namespace xf::cuda {

void ssru_step(const float* in, float* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               float* out, cudaStream_t stream);
void ssru_step(const half* in, half* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               half* out, cudaStream_t stream);

}  // namespace xf::cuda
