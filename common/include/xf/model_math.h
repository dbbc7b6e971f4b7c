#pragma once
// The choices of math a model's config names and the kernels compute: the file format stores
// them (xf/format/config.h), the kernels (xf/kernels/) take them as arguments.
#include <cstdint>

namespace xf {

// The feed-forward inner layer's activation: max(0, x); x * sigmoid(x); x * Phi(x) (erf).
enum class Activation : uint8_t { relu = 0, swish = 1, gelu = 2 };
// The sinusoid added to the embeddings at position p, column c of d (frequencies f_i):
//   interleaved       f_i = 10000^(-2i/d); column 2i sin(p f_i), column 2i+1 cos(p f_i) (the paper)
//   sin_then_cos      the same f_i; columns [0, d/2) sin(p f_i), [d/2, d) cos(p f_i) (Hugging Face Marian)
//   marian_sin_then_cos  f_i = exp(-i ln(10000) / (d/2 - 1)) in float; sin then cos (Marian)
enum class PositionEncoding : uint8_t { interleaved = 0, sin_then_cos = 1, marian_sin_then_cos = 2 };

}  // namespace xf
