#pragma once
// The Transformer's configuration and the tensor dtypes, as the flat model file stores them.
#include <cstddef>
#include <cstdint>
#include <string>

#include "xf/export.h"

namespace xf {

enum class DType : uint8_t { f32 = 0, f16 = 1, bf16 = 2, int8 = 3 };
inline constexpr int kNumDTypes = 4;

XF_API const char* dtype_name(DType dtype);           // "f32", "f16", "bf16", "int8"
XF_API DType parse_dtype(const std::string& name);    // throws xf::Error on an unknown name
XF_API size_t dtype_size(DType dtype);                // bytes per element

enum class NormPosition : uint8_t { post = 0, pre = 1 };

// Paper defaults (base model). Every field is stored in the file.
struct ModelConfig {
  uint32_t source_vocab_size = 0;
  uint32_t target_vocab_size = 0;
  uint32_t d_model = 512;
  uint32_t num_heads = 8;
  uint32_t d_ff = 2048;
  uint32_t encoder_layers = 6;
  uint32_t decoder_layers = 6;
  uint32_t max_positions = 1024;
  NormPosition norm_position = NormPosition::post;
  bool shared_embeddings = true;
  bool tied_output = true;
  bool output_bias = false;
  float layer_norm_epsilon = 1e-6f;
  int32_t pad_id = 0;
  int32_t unk_id = 1;
  int32_t bos_id = 2;
  int32_t eos_id = 3;

  uint32_t head_dim() const { return d_model / num_heads; }
};

// Throws xf::Error naming the first field that is out of range or inconsistent.
void validate_config(const ModelConfig& config);

}  // namespace xf
