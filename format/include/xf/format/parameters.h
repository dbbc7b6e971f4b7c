#pragma once
// The one list of the encoder-decoder Transformer's parameters: names and shapes, expanded from
// the layer layout in schema.h. Trainer, converter and runtime all use it; format/README.md
// documents it.
//
// Linear weights are [out_features, in_features] (y = x W^T + b); INT8 scales are per output row.
#include <cstdint>
#include <string>
#include <vector>

#include "xf/format/config.h"
#include "xf/format/schema.h"

namespace xf {

struct ParameterSpec {
  std::string name;
  std::vector<uint64_t> shape;

  uint64_t elements() const;  // the product of the shape
};

// In a fixed order: embeddings, encoder layers, encoder final norm, decoder layers, decoder
// final norm, output projection.
std::vector<ParameterSpec> transformer_parameters(const ModelConfig& config);

// Elements of all of them: the length of the trainer's contiguous parameter buffer.
uint64_t transformer_parameter_count(const ModelConfig& config);

// Names, so code never spells them by hand.
namespace param {
std::string source_embedding(const ModelConfig& config);   // shared or source embedding
std::string target_embedding(const ModelConfig& config);   // shared or target embedding
std::string output_projection(const ModelConfig& config);  // target embedding when tied

using schema::kOutputBias;
// the prefix of layer i of a stack (schema::kEncoderLayerPrefix, i, ".")
std::string encoder_layer(uint32_t i);
std::string decoder_layer(uint32_t i);
}  // namespace param

}  // namespace xf
