#include "xf/format/parameters.h"

namespace xf {
namespace param {

std::string source_embedding(const ModelConfig& c) {
  return c.shared_embeddings ? "embedding.shared" : "embedding.source";
}
std::string target_embedding(const ModelConfig& c) {
  return c.shared_embeddings ? "embedding.shared" : "embedding.target";
}
std::string output_projection(const ModelConfig& c) {
  return c.tied_output ? target_embedding(c) : "output.weight";
}
std::string encoder_layer(uint32_t i) { return "encoder.layers." + std::to_string(i) + "."; }
std::string decoder_layer(uint32_t i) { return "decoder.layers." + std::to_string(i) + "."; }

}  // namespace param

std::vector<ParameterSpec> transformer_parameters(const ModelConfig& c) {
  const uint64_t d = c.d_model, ff = c.d_ff;
  std::vector<ParameterSpec> specs;
  auto add = [&](std::string name, std::vector<uint64_t> shape) {
    specs.push_back({std::move(name), std::move(shape)});
  };
  auto add_linear = [&](const std::string& prefix, uint64_t out, uint64_t in) {
    add(prefix + ".weight", {out, in});
    add(prefix + ".bias", {out});
  };
  auto add_norm = [&](const std::string& prefix) {
    add(prefix + ".gamma", {d});
    add(prefix + ".beta", {d});
  };

  if (c.shared_embeddings) {
    add(param::source_embedding(c), {c.source_vocab_size, d});
  } else {
    add(param::source_embedding(c), {c.source_vocab_size, d});
    add(param::target_embedding(c), {c.target_vocab_size, d});
  }
  for (uint32_t i = 0; i < c.encoder_layers; ++i) {
    const std::string p = param::encoder_layer(i);
    add_linear(p + "self_attention.qkv", 3 * d, d);
    add_linear(p + "self_attention.output", d, d);
    add_norm(p + "self_attention_norm");
    add_linear(p + "ffn.inner", ff, d);
    add_linear(p + "ffn.outer", d, ff);
    add_norm(p + "ffn_norm");
  }
  if (c.norm_position == NormPosition::pre) add_norm("encoder.final_norm");
  for (uint32_t i = 0; i < c.decoder_layers; ++i) {
    const std::string p = param::decoder_layer(i);
    add_linear(p + "self_attention.qkv", 3 * d, d);
    add_linear(p + "self_attention.output", d, d);
    add_norm(p + "self_attention_norm");
    add_linear(p + "cross_attention.query", d, d);
    add_linear(p + "cross_attention.key_value", 2 * d, d);
    add_linear(p + "cross_attention.output", d, d);
    add_norm(p + "cross_attention_norm");
    add_linear(p + "ffn.inner", ff, d);
    add_linear(p + "ffn.outer", d, ff);
    add_norm(p + "ffn_norm");
  }
  if (c.norm_position == NormPosition::pre) add_norm("decoder.final_norm");
  if (!c.tied_output) add("output.weight", {c.target_vocab_size, d});
  if (c.output_bias) add(param::kOutputBias, {c.target_vocab_size});
  return specs;
}

}  // namespace xf
