#pragma once
// The instruction sets xf's CPU kernels use: the CPU's, capped by oneDNN's own knob
// (ONEDNN_MAX_CPU_ISA, or DNNL_MAX_CPU_ISA for oneDNN 2.x, read once by oneDNN), so that one
// variable caps oneDNN's kernels and xf's alike and a test can run the AVX2 path on an AVX-512
// machine. Values: oneDNN's names (SSE41, AVX2, AVX2_VNNI, AVX512_CORE, AVX512_CORE_VNNI, ...).

namespace xf::cpu {

// In rising order on x86-64; aarch64 has the last two only.
enum class CpuIsa {
  baseline,     // x86-64: SSE2; the hot loops' plain build
  avx2,         // x86-64-v3: AVX2 + FMA
  avx2_vnni,    // AVX2 + AVX-VNNI (vpdpbusd on 256 bits: Alder Lake, Zen 5)
  avx512,       // x86-64-v4: AVX-512 F/BW/DQ/VL
  avx512_vnni,  // AVX-512 VNNI (Cascade Lake, Zen 4 and later)
  neon,         // aarch64 without the dot-product instructions
  neon_dotprod, // aarch64 with sdot/udot (ARMv8.2 dotprod: Jetson Xavier/Orin, Graviton 2+)
};

// The level xf's kernels run at in this process: decided once, at the first call.
CpuIsa cpu_isa();
// "avx512_vnni", "avx2", ...: for benchmarks and logs.
const char* cpu_isa_name(CpuIsa isa);

}  // namespace xf::cpu
