#pragma once
// oneDNN's effective instruction set (the CPU capped by ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA),
// for the choices that follow what oneDNN itself will run. Internal to xf_kernels_cpu.
#include <oneapi/dnnl/dnnl_types.h>

namespace xf::cpu {

// True when oneDNN may use `level` (its levels are bit masks: a level includes those below it).
bool onednn_allows(dnnl_cpu_isa_t level);

}  // namespace xf::cpu
