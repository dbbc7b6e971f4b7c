#pragma once
// The Transformer's configuration and the tensor dtypes, as the flat model file stores them.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "xf/dtype.h"
#include "xf/model_math.h"

namespace xf {

enum class NormPosition : uint8_t { post = 0, pre = 1 };

// Every field of ModelConfig, in the schema's order (ModelConfig in format/xf_model.fbs), with
// the paper's base model as defaults: X(type, name, default). This is the one list of the
// fields; the struct, the file reader and writer, the text form below (checkpoints, xf-inspect)
// and the tests' loaders all expand it, so a new field is added here and in the schema only.
#define XF_MODEL_CONFIG_FIELDS(X)                \
  X(uint32_t, source_vocab_size, 0)              \
  X(uint32_t, target_vocab_size, 0)              \
  X(uint32_t, d_model, 512)                      \
  X(uint32_t, num_heads, 8)                      \
  X(uint32_t, d_ff, 2048)                        \
  X(uint32_t, encoder_layers, 6)                 \
  X(uint32_t, decoder_layers, 6)                 \
  X(uint32_t, max_positions, 1024)               \
  X(NormPosition, norm_position, NormPosition::post) \
  X(bool, shared_embeddings, true)               \
  X(bool, tied_output, true)                     \
  X(bool, output_bias, false)                    \
  X(float, layer_norm_epsilon, 1e-6f)            \
  X(int32_t, pad_id, 0)                          \
  X(int32_t, unk_id, 1)                          \
  X(int32_t, bos_id, 2)                          \
  X(int32_t, eos_id, 3)                          \
  X(Activation, activation, Activation::relu)    \
  X(bool, scale_embeddings, true)                \
  X(PositionEncoding, position_encoding, PositionEncoding::interleaved) \
  X(bool, zero_start_embedding, false)

// Every field is stored in the file.
struct ModelConfig {
#define XF_MODEL_CONFIG_MEMBER(type, name, default_value) type name = default_value;
  XF_MODEL_CONFIG_FIELDS(XF_MODEL_CONFIG_MEMBER)
#undef XF_MODEL_CONFIG_MEMBER

  uint32_t head_dim() const { return d_model / num_heads; }
};

// Whether the config uses a field of format version 2 (a value other than its default there):
// a file that does not is written as version 1, which older readers take.
bool config_needs_version_2(const ModelConfig& config);
// Whether `name` is a field that came with format version 2 (from `activation` on): text and
// references written before it take its default.
bool is_version_2_field(const std::string& name);

// Calls visit(name, field) for every field of `config` in the schema's order; `field` is a
// reference to the member (const when `config` is).
template <typename Config, typename Visit>
void for_each_config_field(Config& config, Visit&& visit) {
#define XF_MODEL_CONFIG_VISIT(type, name, default_value) visit(#name, config.name);
  XF_MODEL_CONFIG_FIELDS(XF_MODEL_CONFIG_VISIT)
#undef XF_MODEL_CONFIG_VISIT
}

// The config as text, (field name, value) in the schema's order: integers in decimal, flags 0
// or 1, norm_position pre or post, floats in the shortest form that reads back exactly.
// Checkpoints store it as key=value lines; xf-inspect prints it.
std::vector<std::pair<std::string, std::string>> config_to_text(const ModelConfig& config);

// The inverse: each field's text comes from text_of(name), nullopt when absent: a field of
// format version 2 then keeps its default (a text written before it existed), any other throws
// xf::Error "missing key '<name>'"; a malformed value throws xf::Error "<name>: ..." and the
// result is validated (validate_config).
ModelConfig config_from_text(
    const std::function<std::optional<std::string>(const std::string& name)>& text_of);

// Throws xf::Error naming the first field that is out of range or inconsistent.
void validate_config(const ModelConfig& config);

}  // namespace xf
