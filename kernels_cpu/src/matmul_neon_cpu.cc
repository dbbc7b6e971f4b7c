// xf's int8 product kernel on aarch64 (NEON), chosen by matmul_cpu.cc for every int8 product there:
// with the dot-product instructions where cpu_isa() is neon_dotprod, without them otherwise.
#include "matmul_kernels_cpu.h"

#if defined(XF_INT8_ROW_KERNEL) && defined(__aarch64__)
#include <arm_neon.h>

namespace xf::cpu {
namespace {

#define XF_NEON_INLINE inline __attribute__((always_inline))

// The kernel on aarch64 (Jetson, Graviton, Apple): NEON, 4 x rows by 4 weight rows in 16
// accumulators of 4 int32 lanes (32 registers). NEON multiplies s8 by s8, so x is shifted back
// to s8 as it is loaded (one eor per x load, shared by 4 weight rows) and the dot product needs
// no shift sums. With the dot-product instructions (ARMv8.2 dotprod: Jetson Xavier and Orin)
// sdot adds 4-byte groups into int32 lanes; without them, pairs of s8 products are added in
// int16 (smull, smlal2: 2 * 127 * 128 fits, x being in [-127, 127]) and then into int32
// (sadalp). Both exact, so every row count runs here: oneDNN 2.6 has no int8 GEMM of its own
// on aarch64 worth calling, and no weight copy is made.
struct NeonDot {
  XF_NEON_INLINE static int32x4_t dot(int32x4_t acc, int8x16_t x, int8x16_t w) {
    int16x8_t pairs = vmull_s8(vget_low_s8(x), vget_low_s8(w));
    pairs = vmlal_high_s8(pairs, x, w);
    return vpadalq_s16(acc, pairs);
  }
};
// sdot as inline asm: the vdotq_s32 intrinsic needs a "+dotprod" target on every function it is
// inlined into (GCC refuses otherwise), and the tile code is shared with the plain build.
struct NeonDotprod {
  XF_NEON_INLINE static int32x4_t dot(int32x4_t acc, int8x16_t x, int8x16_t w) {
    asm(".arch armv8.2-a+dotprod\n\tsdot %0.4s, %1.16b, %2.16b" : "+w"(acc) : "w"(x), "w"(w));
    return acc;
  }
};

// x row i . weight row j for kRows x rows (shifted u8, back to s8 here) and 4 weight rows, into
// y[i * ldy + j] as float(dot) * row_scales[j]; the k % 16 bytes past the last step in scalar code.
template <typename Dot, int kRows>
XF_NEON_INLINE void int8_tile_neon(const uint8_t* x, const int8_t* w, int64_t k,
                                   const float* row_scales, float* y, int64_t ldy) {
  int32x4_t acc[kRows][4];
  for (auto& row : acc)
    for (auto& v : row) v = vdupq_n_s32(0);
  const uint8x16_t sign = vdupq_n_u8(0x80);
  const int64_t full = k / 16 * 16;
  for (int64_t c = 0; c < full; c += 16) {
    int8x16_t xv[kRows];
    for (int i = 0; i < kRows; ++i) xv[i] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(x + i * k + c), sign));
    for (int j = 0; j < 4; ++j) {
      const int8x16_t wv = vld1q_s8(w + j * k + c);
      for (int i = 0; i < kRows; ++i) acc[i][j] = Dot::dot(acc[i][j], xv[i], wv);
    }
  }
  const float32x4_t scales = vld1q_f32(row_scales);
  for (int i = 0; i < kRows; ++i) {
    int32x4_t dots = vpaddq_s32(vpaddq_s32(acc[i][0], acc[i][1]), vpaddq_s32(acc[i][2], acc[i][3]));
    if (full < k) {
      int32_t tails[4];
      for (int j = 0; j < 4; ++j) {
        tails[j] = 0;
        for (int64_t c = full; c < k; ++c) {
          tails[j] += int32_t{static_cast<int8_t>(x[i * k + c] ^ 0x80)} * w[j * k + c];
        }
      }
      dots = vaddq_s32(dots, vld1q_s32(tails));
    }
    vst1q_f32(y + i * ldy, vmulq_f32(vcvtq_f32_s32(dots), scales));
  }
}

template <typename Dot>
XF_NEON_INLINE void int8_row_products_neon(const uint8_t* x_shifted, int64_t m, const int8_t* w,
                                           int64_t k, int64_t rows, const float* row_scales,
                                           float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      int8_tile_neon<Dot, 4>(x_shifted + i * k, w + r * k, k, row_scales + r, y + i * ldy + r, ldy);
    }
    for (; i < m; ++i) {
      int8_tile_neon<Dot, 1>(x_shifted + i * k, w + r * k, k, row_scales + r, y + i * ldy + r, ldy);
    }
  }
  for (; r < rows; ++r) {
    for (int64_t i = 0; i < m; ++i) {
      int32_t dot = 0;
      for (int64_t c = 0; c < k; ++c) {
        dot += int32_t{static_cast<int8_t>(x_shifted[i * k + c] ^ 0x80)} * w[r * k + c];
      }
      y[i * ldy + r] = static_cast<float>(dot) * row_scales[r];
    }
  }
}

}  // namespace

// The shift sums are not used: x goes back to s8.
void int8_row_products_neon_plain(const uint8_t* x_shifted, int64_t m, const int8_t* w, int64_t k,
                                  int64_t rows, const int32_t*, const float* row_scales, float* y,
                                  int64_t ldy) {
  int8_row_products_neon<NeonDot>(x_shifted, m, w, k, rows, row_scales, y, ldy);
}
void int8_row_products_neon_dotprod(
    const uint8_t* x_shifted, int64_t m, const int8_t* w, int64_t k, int64_t rows, const int32_t*,
    const float* row_scales, float* y, int64_t ldy) {
  int8_row_products_neon<NeonDotprod>(x_shifted, m, w, k, rows, row_scales, y, ldy);
}
#undef XF_NEON_INLINE

}  // namespace xf::cpu
#endif
