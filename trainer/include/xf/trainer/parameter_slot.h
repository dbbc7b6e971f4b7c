#pragma once
// The parameter layout every model, the optimizer and checkpoints share: one slot per
// transformer_parameters(config) entry, in that order, back to back in one buffer.
#include <cstddef>
#include <vector>

#include "xf/format/config.h"
#include "xf/format/parameters.h"

namespace xf::trainer {

// Where one parameter lives in the contiguous parameter / gradient / moment buffers.
struct ParameterSlot {
  ParameterSpec spec;
  size_t offset = 0;  // in elements from the start of the buffer
  size_t size = 0;    // elements
};

// One slot per transformer_parameters(config) entry, in that order, back to back.
std::vector<ParameterSlot> parameter_slots(const ModelConfig& config);

}  // namespace xf::trainer
