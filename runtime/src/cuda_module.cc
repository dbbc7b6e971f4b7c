// libxf_cuda_runtime.so: the CUDA backend as a device module (xf/modules/module.h). The runtime
// loads it the first time a Translator asks for Device::cuda.
#include "backend.h"
#include "xf/modules/module.h"

extern "C" __attribute__((visibility("default"))) const xf_module* xf_module_entry(void) {
  static const xf_module module = {XF_MODULE_ABI, "cuda", [] {
                                     return static_cast<const void*>(&xf::runtime::cuda_backend_factory());
                                   }};
  return &module;
}
