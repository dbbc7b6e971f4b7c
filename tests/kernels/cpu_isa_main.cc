// Prints the instruction-set level xf's CPU kernels run at in this process (xf::cpu::cpu_isa(),
// capped by ONEDNN_MAX_CPU_ISA): tests/run_at_isa.sh's probe.
#include <cstdio>

#include "xf/kernels_cpu/isa.h"

int main() {
  std::printf("%s\n", xf::cpu::cpu_isa_name(xf::cpu::cpu_isa()));
  return 0;
}
