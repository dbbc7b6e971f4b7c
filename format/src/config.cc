#include "xf/format/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "xf/error.h"

namespace xf {

namespace {
void require(bool ok, const std::string& what) {
  if (!ok) throw Error("invalid model config: " + what);
}

std::string field_text(NormPosition value) { return value == NormPosition::pre ? "pre" : "post"; }
std::string field_text(bool value) { return value ? "1" : "0"; }
constexpr const char* kActivationNames[] = {"relu", "swish", "gelu"};
constexpr const char* kPositionEncodingNames[] = {"interleaved", "sin_then_cos", "marian_sin_then_cos"};
constexpr const char* kDecoderLayerKindNames[] = {"self_attention", "ssru"};
// An enum's name, or its number when it is out of range (validate_config refuses it then).
template <typename Enum, size_t N>
std::string enum_text(Enum value, const char* const (&names)[N]) {
  const auto index = static_cast<size_t>(value);
  return index < N ? names[index] : std::to_string(index);
}
std::string field_text(Activation value) { return enum_text(value, kActivationNames); }
std::string field_text(PositionEncoding value) { return enum_text(value, kPositionEncodingNames); }
std::string field_text(DecoderLayerKind value) { return enum_text(value, kDecoderLayerKindNames); }
std::string field_text(float value) {
  char buffer[32];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, value).ptr;
  return std::string(buffer, end);
}
template <typename Int>
std::string field_text(Int value) {
  return std::to_string(value);
}

// Each parser takes the whole text or throws.
void parse_field(const std::string& name, const std::string& text, NormPosition& value) {
  if (text != "pre" && text != "post") throw Error(name + " must be pre or post");
  value = text == "pre" ? NormPosition::pre : NormPosition::post;
}
template <typename Enum, size_t N>
void parse_enum(const std::string& name, const std::string& text, const char* const (&names)[N], Enum& value) {
  std::string choices;
  for (size_t i = 0; i < N; ++i) {
    if (text == names[i]) {
      value = static_cast<Enum>(i);
      return;
    }
    choices += (i ? "|" : "") + std::string(names[i]);
  }
  throw Error(name + " must be one of " + choices);
}
void parse_field(const std::string& name, const std::string& text, Activation& value) {
  parse_enum(name, text, kActivationNames, value);
}
void parse_field(const std::string& name, const std::string& text, PositionEncoding& value) {
  parse_enum(name, text, kPositionEncodingNames, value);
}
void parse_field(const std::string& name, const std::string& text, DecoderLayerKind& value) {
  parse_enum(name, text, kDecoderLayerKindNames, value);
}
void parse_field(const std::string& name, const std::string& text, bool& value) {
  if (text != "0" && text != "1") throw Error(name + " must be 0 or 1");
  value = text == "1";
}
void parse_field(const std::string& name, const std::string& text, float& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || ptr != end)
    throw Error(name + ": '" + text + "' is not a number");
}
template <typename Int>
void parse_field(const std::string& name, const std::string& text, Int& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (error == std::errc::result_out_of_range) throw Error(name + " is out of range");
  if (text.empty() || error != std::errc() || ptr != end)
    throw Error(name + ": '" + text + "' is not " +
                (std::is_signed_v<Int> ? "an integer" : "a non-negative integer"));
}
}  // namespace

std::vector<std::pair<std::string, std::string>> config_to_text(const ModelConfig& config) {
  std::vector<std::pair<std::string, std::string>> fields;
  for_each_config_field(config, [&](const char* name, const auto& value) {
    fields.emplace_back(name, field_text(value));
  });
  return fields;
}

ModelConfig config_from_text(
    const std::function<std::optional<std::string>(const std::string& name)>& text_of) {
  ModelConfig config;
  for_each_config_field(config, [&](const char* name, auto& value) {
    const std::optional<std::string> text = text_of(name);
    if (text) {
      parse_field(name, *text, value);
    } else if (field_format_version(name) < 2) {
      throw Error("missing key '" + std::string(name) + "'");
    }
  });
  validate_config(config);
  return config;
}

namespace {
// The fields in the schema's order: source_vocab_size .. eos_id came with version 1,
// `activation` .. zero_start_embedding with version 2, decoder_layer_kind with version 3.
constexpr size_t kVersion1Fields = 17, kVersion2Fields = 21;
uint32_t version_of_index(size_t index) {
  return index < kVersion1Fields ? 1 : index < kVersion2Fields ? 2 : 3;
}
}  // namespace

uint32_t field_format_version(const std::string& name) {
  size_t index = 0;
  uint32_t version = 0;
  const ModelConfig defaults;
  for_each_config_field(defaults, [&](const char* field, const auto&) {
    if (name == field) version = version_of_index(index);
    ++index;
  });
  return version;
}

uint32_t config_format_version(const ModelConfig& c) {
  const auto text = config_to_text(c), defaults = config_to_text(ModelConfig{});
  uint32_t version = 1;
  for (size_t i = kVersion1Fields; i < text.size(); ++i)
    if (text[i].second != defaults[i].second) version = std::max(version, version_of_index(i));
  return version;
}

void validate_config(const ModelConfig& c) {
  // Upper bounds keep every size computation far from overflow on hostile files.
  constexpr uint32_t kMaxVocab = 1u << 22, kMaxDim = 1u << 16, kMaxLayers = 256,
                     kMaxPositions = 1u << 16;
  require(c.source_vocab_size >= 4 && c.source_vocab_size <= kMaxVocab,
          "source_vocab_size " + std::to_string(c.source_vocab_size) + " outside [4, 4194304]");
  require(c.target_vocab_size >= 4 && c.target_vocab_size <= kMaxVocab,
          "target_vocab_size " + std::to_string(c.target_vocab_size) + " outside [4, 4194304]");
  require(c.d_model >= 1 && c.d_model <= kMaxDim, "d_model " + std::to_string(c.d_model) +
                                                       " outside [1, 65536]");
  require(c.num_heads >= 1 && c.num_heads <= c.d_model && c.d_model % c.num_heads == 0,
          "num_heads " + std::to_string(c.num_heads) + " does not divide d_model " +
              std::to_string(c.d_model));
  require(c.d_ff >= 1 && c.d_ff <= 4 * kMaxDim, "d_ff " + std::to_string(c.d_ff) +
                                                     " outside [1, 262144]");
  require(c.encoder_layers >= 1 && c.encoder_layers <= kMaxLayers,
          "encoder_layers " + std::to_string(c.encoder_layers) + " outside [1, 256]");
  require(c.decoder_layers >= 1 && c.decoder_layers <= kMaxLayers,
          "decoder_layers " + std::to_string(c.decoder_layers) + " outside [1, 256]");
  require(c.max_positions >= 2 && c.max_positions <= kMaxPositions,
          "max_positions " + std::to_string(c.max_positions) + " outside [2, 65536]");
  require(c.norm_position == NormPosition::post || c.norm_position == NormPosition::pre,
          "unknown norm_position " + std::to_string(static_cast<int>(c.norm_position)));
  require(!c.shared_embeddings || c.source_vocab_size == c.target_vocab_size,
          "shared_embeddings needs equal source and target vocabulary sizes");
  require(std::isfinite(c.layer_norm_epsilon) && c.layer_norm_epsilon > 0.0f &&
              c.layer_norm_epsilon < 1.0f,
          "layer_norm_epsilon must be in (0, 1)");
  const auto id_ok = [&](int32_t id) {
    return id >= 0 && static_cast<uint32_t>(id) < c.source_vocab_size &&
           static_cast<uint32_t>(id) < c.target_vocab_size;
  };
  require(id_ok(c.pad_id) && id_ok(c.unk_id) && id_ok(c.bos_id) && id_ok(c.eos_id),
          "special token ids must lie inside both vocabularies");
  require(c.bos_id != c.eos_id && c.pad_id != c.eos_id, "pad, bos and eos ids must differ");
  require(static_cast<size_t>(c.activation) < std::size(kActivationNames),
          "unknown activation " + std::to_string(static_cast<int>(c.activation)));
  require(static_cast<size_t>(c.position_encoding) < std::size(kPositionEncodingNames),
          "unknown position_encoding " + std::to_string(static_cast<int>(c.position_encoding)));
  require(c.position_encoding == PositionEncoding::interleaved || c.d_model % 2 == 0,
          "position_encoding " + field_text(c.position_encoding) + " needs an even d_model");
  require(c.position_encoding != PositionEncoding::marian_sin_then_cos || c.d_model >= 4,
          "position_encoding marian_sin_then_cos needs d_model >= 4");
  require(static_cast<size_t>(c.decoder_layer_kind) < std::size(kDecoderLayerKindNames),
          "unknown decoder_layer_kind " + std::to_string(static_cast<int>(c.decoder_layer_kind)));
}

}  // namespace xf
