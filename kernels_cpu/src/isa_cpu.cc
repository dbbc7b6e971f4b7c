// The kernels' instruction-set level: what the CPU has, within what oneDNN is allowed to use.
#include "xf/kernels_cpu/isa.h"
#include "onednn_isa.h"

#include <oneapi/dnnl/dnnl.hpp>

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace xf::cpu {

bool onednn_allows(dnnl_cpu_isa_t level) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (isa & level) == static_cast<unsigned>(level);
}

namespace {

CpuIsa detect() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // Both: oneDNN's cap, and what GCC's code for each level needs (x86-64-v4 adds VL/DQ/CD to
  // AVX-512F; x86-64-v3 adds FMA, BMI, MOVBE to AVX2).
  __builtin_cpu_init();
  const bool v4 = __builtin_cpu_supports("x86-64-v4");
  const bool v3 = __builtin_cpu_supports("x86-64-v3");
  if (v4 && onednn_allows(dnnl_cpu_isa_avx512_core_vnni) && __builtin_cpu_supports("avx512vnni"))
    return CpuIsa::avx512_vnni;
  if (v4 && onednn_allows(dnnl_cpu_isa_avx512_core)) return CpuIsa::avx512;
  if (v3 && onednn_allows(dnnl_cpu_isa_avx2_vnni)) return CpuIsa::avx2_vnni;
  if (v3 && onednn_allows(dnnl_cpu_isa_avx2)) return CpuIsa::avx2;
  return CpuIsa::baseline;
#elif defined(__aarch64__) && defined(__linux__) && defined(HWCAP_ASIMDDP)
  return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0 ? CpuIsa::neon_dotprod : CpuIsa::neon;
#elif defined(__aarch64__)
  return CpuIsa::neon;
#else
  return CpuIsa::baseline;
#endif
}

}  // namespace

CpuIsa cpu_isa() {
  static const CpuIsa isa = detect();
  return isa;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::baseline: return "baseline";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx2_vnni: return "avx2_vnni";
    case CpuIsa::avx512: return "avx512";
    case CpuIsa::avx512_vnni: return "avx512_vnni";
    case CpuIsa::neon: return "neon";
    case CpuIsa::neon_dotprod: return "neon_dotprod";
  }
  return "unknown";
}

}  // namespace xf::cpu
