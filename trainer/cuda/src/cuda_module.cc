// libxf_cuda_trainer.so: --device cuda|cuda-f32 as a device module (xf/modules/module.h).
// xf_trainer's module_device_training() loads it the first time xf-train asks for CUDA.
#include "xf/modules/module.h"
#include "xf/trainer/cuda_device_training.h"

extern "C" __attribute__((visibility("default"))) const xf_module* xf_module_entry(void) {
  static const xf_module module = {XF_MODULE_ABI, "cuda", [] {
                                     return static_cast<const void*>(&xf::trainer::cuda_device_training());
                                   }};
  return &module;
}
