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
// The decoder layers' first sub-layer: self-attention (the paper) or Marian's SSRU.
enum class DecoderLayerKind : uint8_t { self_attention = 0, ssru = 1 };

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
  X(bool, zero_start_embedding, false)            \
  X(DecoderLayerKind, decoder_layer_kind, DecoderLayerKind::self_attention)

// Every field is stored in the file.
struct ModelConfig {
#define XF_MODEL_CONFIG_MEMBER(type, name, default_value) type name = default_value;
  XF_MODEL_CONFIG_FIELDS(XF_MODEL_CONFIG_MEMBER)
#undef XF_MODEL_CONFIG_MEMBER

  uint32_t head_dim() const { return d_model / num_heads; }
};

// The lowest format version that holds the config: 3 when it uses a field of version 3, 2 when
// one of version 2 (a value other than the field's default there), else 1, which every reader
// takes.
uint32_t config_format_version(const ModelConfig& config);
// The format version a field came with (1 for source_vocab_size .. eos_id, 2 from `activation`,
// 3 from `decoder_layer_kind`), 0 for an unknown name: text and references written before a
// field existed take its default.
uint32_t field_format_version(const std::string& name);

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
