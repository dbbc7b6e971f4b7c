#pragma once
// Embedding: token rows scaled, plus the sinusoid of their positions; and its backward.
//
// embed: out[i, :] = scale * table[ids[i], :] + sinusoid(positions[i]).
//   table: [vocab, dim]; ids, positions: [count]; out: [count, dim].
//   The sinusoid's layout and frequencies are `encoding`'s (xf/model_math.h); interleaved is the
//   paper's: PE(p, 2j) = sin(p / 10000^(2j/dim)), PE(p, 2j+1) = cos(p / 10000^(2j/dim)). Angles
//   in double, except Marian's layout, which Marian computes in float.
//   The CPU kernel throws xf::Error when an id is outside the table or a position is negative;
//   CUDA callers validate ids and positions on the host (an id outside [0, vocab) gives a zero
//   row there, never an out-of-bounds read).
// embedding_backward: dtable[ids[i], :] += scale * dout[i, :] (the position term has no
//   parameters).                                     dout: [count, dim]; dtable: [vocab, dim]
//   The CPU splits columns over threads; CUDA adds by atomic scatter (tokens repeat), so its order
//   of additions, and the last bits of a sum, may vary between runs; an id outside [0, vocab)
//   adds nothing there.
#include "xf/kernels/types.h"
#include "xf/model_math.h"

namespace xf::cpu {

class StaticMatmul;  // xf/kernels/matmul.h

// The sinusoids of positions [0, positions), written once by write_sinusoids (the runtime's, at
// load): embed() copies a position's row from here rather than computing its sin/cos again (an
// encoder's tokens each have their own position); positions beyond are computed. [positions, dim]
struct Sinusoids {
  const float* values = nullptr;
  int64_t positions = 0;
};

// The table in any stored dtype (f16, bf16 and int8 rows widened on the fly).
void embed(const WeightMatrix& table, const int32_t* ids, const int32_t* positions, int64_t count,
           float scale, float* out, int threads,
           PositionEncoding encoding = PositionEncoding::interleaved, Sinusoids sinusoids = {});

// The same over the rows of a product's own f32 copy of a table tied to the output layer
// (StaticMatmul::holds_f32_weight_rows()): equal to embed() over the table itself, bit for bit.
void embed(const StaticMatmul& table, const int32_t* ids, const int32_t* positions, int64_t count,
           float scale, float* out, int threads,
           PositionEncoding encoding = PositionEncoding::interleaved, Sinusoids sinusoids = {});

// The sinusoid of `encoding` at `position`, `dim` columns (embed() adds it).    out: [dim]
void write_sinusoid(PositionEncoding encoding, int64_t position, int64_t dim, float* out);
// Those of positions [0, positions), one row after another.           out: [positions, dim]
void write_sinusoids(PositionEncoding encoding, int64_t positions, int64_t dim, float* out);

// The trainer's embed over an f32 or f64 table (float: embed(); double: plain loops,
// interleaved only).
template <typename T>
void embedding_forward(const T* table, int64_t vocab, int64_t dim, const int32_t* ids,
                       const int32_t* positions, int64_t count, T scale, T* out, int threads);

template <typename T>
void embedding_backward(const T* dout, const int32_t* ids, int64_t count, int64_t dim, T scale,
                        T* dtable, int threads);

}  // namespace xf::cpu

namespace xf::cuda {

void embed(const float* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, float* out, cudaStream_t stream,
           PositionEncoding encoding = PositionEncoding::interleaved);
void embed(const half* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, float* out, cudaStream_t stream,
           PositionEncoding encoding = PositionEncoding::interleaved);
void embed(const half* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, half* out, cudaStream_t stream,
           PositionEncoding encoding = PositionEncoding::interleaved);
void embed(const float* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, half* out, cudaStream_t stream,
           PositionEncoding encoding = PositionEncoding::interleaved);

void embedding_backward(const float* dout, const int32_t* ids, int64_t count, int64_t dim,
                        int64_t vocab, float scale, float* dtable, cudaStream_t stream);

}  // namespace xf::cuda
