#include "xf/format/parameters.h"

namespace xf {
namespace param {

std::string source_embedding(const ModelConfig& c) {
  return c.shared_embeddings ? schema::kSharedEmbedding : schema::kSourceEmbedding;
}
std::string target_embedding(const ModelConfig& c) {
  return c.shared_embeddings ? schema::kSharedEmbedding : schema::kTargetEmbedding;
}
std::string output_projection(const ModelConfig& c) {
  return c.tied_output ? target_embedding(c) : schema::kOutputWeight;
}
std::string encoder_layer(uint32_t i) {
  return schema::kEncoderLayerPrefix + std::to_string(i) + ".";
}
std::string decoder_layer(uint32_t i) {
  return schema::kDecoderLayerPrefix + std::to_string(i) + ".";
}

}  // namespace param

uint64_t ParameterSpec::elements() const {
  uint64_t count = 1;
  for (uint64_t dim : shape) count *= dim;
  return count;
}

uint64_t transformer_parameter_count(const ModelConfig& config) {
  uint64_t count = 0;
  for (const ParameterSpec& spec : transformer_parameters(config)) count += spec.elements();
  return count;
}

std::vector<ParameterSpec> transformer_parameters(const ModelConfig& c) {
  std::vector<ParameterSpec> specs;
  auto add = [&](std::string name, std::vector<uint64_t> shape) {
    specs.push_back({std::move(name), std::move(shape)});
  };
  auto add_block = [&](const std::string& prefix, const schema::Block& block) {
    const std::string name = prefix + block.name;
    if (block.kind == schema::BlockKind::linear) {
      add(name + schema::kWeight, {block.out.of(c), block.in.of(c)});
      add(name + schema::kBias, {block.out.of(c)});
    } else {
      add(name + schema::kGamma, {block.out.of(c)});
      add(name + schema::kBeta, {block.out.of(c)});
    }
  };

  add(param::source_embedding(c), {c.source_vocab_size, c.d_model});
  if (!c.shared_embeddings) add(param::target_embedding(c), {c.target_vocab_size, c.d_model});
  for (uint32_t i = 0; i < c.encoder_layers; ++i) {
    for (const schema::Block& block : schema::kEncoderLayer) add_block(param::encoder_layer(i), block);
  }
  if (c.norm_position == NormPosition::pre) add_block("", schema::kEncoderFinalNorm);
  for (uint32_t i = 0; i < c.decoder_layers; ++i) {
    if (c.decoder_layer_kind == DecoderLayerKind::ssru) {
      for (const schema::Block& block : schema::kSsruDecoderLayer) add_block(param::decoder_layer(i), block);
    } else {
      for (const schema::Block& block : schema::kDecoderLayer) add_block(param::decoder_layer(i), block);
    }
  }
  if (c.norm_position == NormPosition::pre) add_block("", schema::kDecoderFinalNorm);
  if (!c.tied_output) add(schema::kOutputWeight, {c.target_vocab_size, c.d_model});
  if (c.output_bias) add(schema::kOutputBias, {c.target_vocab_size});
  return specs;
}

}  // namespace xf
