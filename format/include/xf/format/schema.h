#pragma once
// The Transformer's layer layout, written once: every parameter name and shape that xf models
// use. A layer is a list of blocks; a block is either a linear map (`<prefix><block>.weight`
// [out, in] and `<prefix><block>.bias` [out]) or a LayerNorm (`<prefix><block>.gamma` and
// `.beta`, [d_model]). transformer_parameters() (parameters.h) expands it into the full list;
// the trainers, the runtime backends and the tests name parameters through these constants, so
// no other C++ file spells a parameter name.
#include <cstdint>

#include "xf/format/config.h"

namespace xf::schema {

// A width as a multiple of d_model plus a multiple of d_ff: {3, 0} is 3 * d_model.
struct Width {
  uint32_t d_model = 0;
  uint32_t d_ff = 0;
  uint64_t of(const ModelConfig& c) const {
    return uint64_t{d_model} * c.d_model + uint64_t{d_ff} * c.d_ff;
  }
};

enum class BlockKind : uint8_t { linear, norm };

struct Block {
  BlockKind kind;
  const char* name;  // the block's part of a parameter name, e.g. "self_attention.qkv"
  Width out, in;     // a linear block's weight shape [out, in]; a norm's is [d_model]
};

// The tensors of a block: its name followed by one of these.
inline constexpr const char* kWeight = ".weight";
inline constexpr const char* kBias = ".bias";
inline constexpr const char* kGamma = ".gamma";
inline constexpr const char* kBeta = ".beta";

inline constexpr Width kDModel{1, 0};
inline constexpr Width kDFf{0, 1};
constexpr Block linear(const char* name, Width out, Width in) {
  return {BlockKind::linear, name, out, in};
}
constexpr Block norm(const char* name) { return {BlockKind::norm, name, kDModel, {}}; }

// Layer blocks. The fused projections keep their parts in this order along `out`:
// query, key, value (qkv) and key, value (key_value).
inline constexpr Block kSelfAttentionQkv = linear("self_attention.qkv", {3, 0}, kDModel);
inline constexpr Block kSelfAttentionOutput = linear("self_attention.output", kDModel, kDModel);
inline constexpr Block kSelfAttentionNorm = norm("self_attention_norm");
inline constexpr Block kCrossAttentionQuery = linear("cross_attention.query", kDModel, kDModel);
inline constexpr Block kCrossAttentionKeyValue =
    linear("cross_attention.key_value", {2, 0}, kDModel);
inline constexpr Block kCrossAttentionOutput = linear("cross_attention.output", kDModel, kDModel);
inline constexpr Block kCrossAttentionNorm = norm("cross_attention_norm");
inline constexpr Block kFfnInner = linear("ffn.inner", kDFf, kDModel);
inline constexpr Block kFfnOuter = linear("ffn.outer", kDModel, kDFf);
inline constexpr Block kFfnNorm = norm("ffn_norm");
// A decoder layer of kind ssru (Marian's SSRU) in place of the self-attention blocks: one fused
// product of the step's input, the candidate rows [0, d) (Marian's `_rnn_W`, whose bias is 0)
// then the forget gate's [d, 2d) (`_rnn_Wf`, `_rnn_bf`), and the norm around the cell (Marian's
// `_rnn_ffn_ln_scale` / `_ln_bias`).
inline constexpr Block kSsruInputForget = linear("ssru.input_forget", {2, 0}, kDModel);
inline constexpr Block kSsruNorm = norm("ssru_norm");

// The blocks of one layer, in parameter order (the trainer's buffer and checkpoints use it).
inline constexpr Block kEncoderLayer[] = {kSelfAttentionQkv, kSelfAttentionOutput,
                                          kSelfAttentionNorm, kFfnInner,
                                          kFfnOuter,         kFfnNorm};
inline constexpr Block kDecoderLayer[] = {
    kSelfAttentionQkv,    kSelfAttentionOutput,    kSelfAttentionNorm,
    kCrossAttentionQuery, kCrossAttentionKeyValue, kCrossAttentionOutput,
    kCrossAttentionNorm,  kFfnInner,               kFfnOuter,
    kFfnNorm};
inline constexpr Block kSsruDecoderLayer[] = {
    kSsruInputForget,        kSsruNorm,         kCrossAttentionQuery, kCrossAttentionKeyValue,
    kCrossAttentionOutput,   kCrossAttentionNorm, kFfnInner,          kFfnOuter,
    kFfnNorm};

// A layer's blocks as members, for any binding of them (a runtime device's weights, the
// trainer's parameter offsets): one member per entry of kEncoderLayer / kDecoderLayer.
template <typename Linear, typename Norm>
struct EncoderLayer {
  Linear qkv, self_output, ffn_inner, ffn_outer;
  Norm self_norm, ffn_norm;
};
// A decoder layer binds the self-attention members or (an SSRU layer) the ssru ones.
template <typename Linear, typename Norm>
struct DecoderLayer {
  Linear qkv, self_output, cross_query, cross_key_value, cross_output, ffn_inner, ffn_outer;
  Norm self_norm, cross_norm, ffn_norm;
  Linear ssru_input_forget{};
  Norm ssru_norm{};
};

// Layer i of a stack is named by this prefix, then i, then ".": "encoder.layers.3.".
inline constexpr const char* kEncoderLayerPrefix = "encoder.layers.";
inline constexpr const char* kDecoderLayerPrefix = "decoder.layers.";

// Blocks outside the layers: each stack's final LayerNorm (pre-norm models only).
inline constexpr Block kEncoderFinalNorm = norm("encoder.final_norm");
inline constexpr Block kDecoderFinalNorm = norm("decoder.final_norm");

// Whole tensors: embeddings [vocab, d_model], output projection [target_vocab, d_model] when
// not tied to the target embedding, output bias [target_vocab] when the config has one.
inline constexpr const char* kSharedEmbedding = "embedding.shared";
inline constexpr const char* kSourceEmbedding = "embedding.source";
inline constexpr const char* kTargetEmbedding = "embedding.target";
inline constexpr const char* kOutputWeight = "output.weight";
inline constexpr const char* kOutputBias = "output.bias";

}  // namespace xf::schema
