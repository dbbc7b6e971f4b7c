#pragma once
// ModelConfig to and from the generated FlatBuffers table, field by field from
// XF_MODEL_CONFIG_FIELDS. Private to the format library (it needs the generated header), and
// shared with the tests that hand-build headers through xf_format_schema_headers.
#include "xf/format/config.h"
#include "xf_model_generated.h"

namespace xf {
namespace detail {
template <typename T>
T to_fb_value(T value) {
  return value;
}
inline fb::NormPosition to_fb_value(NormPosition value) {
  return static_cast<fb::NormPosition>(value);
}
inline fb::Activation to_fb_value(Activation value) { return static_cast<fb::Activation>(value); }
inline fb::PositionEncoding to_fb_value(PositionEncoding value) {
  return static_cast<fb::PositionEncoding>(value);
}
inline fb::DecoderLayerKind to_fb_value(DecoderLayerKind value) {
  return static_cast<fb::DecoderLayerKind>(value);
}
}  // namespace detail

// The arguments of fb::CreateModelConfig are the table's fields in schema order, as is the list.
inline flatbuffers::Offset<fb::ModelConfig> create_fb_config(flatbuffers::FlatBufferBuilder& fbb,
                                                             const ModelConfig& config) {
#define XF_FB_CONFIG_ARGUMENT(type, name, default_value) , detail::to_fb_value(config.name)
  return fb::CreateModelConfig(fbb XF_MODEL_CONFIG_FIELDS(XF_FB_CONFIG_ARGUMENT));
#undef XF_FB_CONFIG_ARGUMENT
}

// Not validated: the caller runs validate_config.
inline ModelConfig config_from_fb(const fb::ModelConfig& table) {
  ModelConfig config;
#define XF_FB_CONFIG_FIELD(type, name, default_value) config.name = static_cast<type>(table.name());
  XF_MODEL_CONFIG_FIELDS(XF_FB_CONFIG_FIELD)
#undef XF_FB_CONFIG_FIELD
  return config;
}

}  // namespace xf
