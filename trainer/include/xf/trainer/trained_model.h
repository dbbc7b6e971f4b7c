#pragma once
// The model a run trains, in its two places: the host model and Adam, which validation and
// checkpoints read, and the model on the device where the steps run (device_training.h), which
// for --device cpu is the host model and Adam themselves.
#include <memory>

#include "xf/format/config.h"
#include "xf/trainer/device_training.h"
#include "xf/trainer/optimizer.h"
#include "xf/trainer/transformer.h"

namespace xf::trainer {

struct TrainedModel {
  ModelConfig config;
  std::unique_ptr<TransformerModel> host;
  std::unique_ptr<Adam> adam;      // the host's moments
  std::unique_ptr<DeviceModel> device;
  bool steps_on_host = true;       // --device cpu: `device` works on `host` and `adam`

  // Copies the device's parameters and moments to the host model and Adam (on the host
  // already: nothing to do).
  void sync_host() {
    if (steps_on_host) return;
    device->copy_parameters_to(host->parameters());
    adam->set_state(device->adam_state());
  }
};

}  // namespace xf::trainer
