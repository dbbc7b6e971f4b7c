#pragma once
// --device cuda (f16 mixed precision) and cuda-f32 for run_training: DeviceTraining over
// CudaTransformerModel. xf-train passes it when built with xf_trainer_cuda.
#include "xf/trainer/device_training.h"

namespace xf::trainer {

const DeviceTraining& cuda_device_training();

}  // namespace xf::trainer
