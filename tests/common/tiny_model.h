#pragma once
// Tiny models for tests: a tiny config, random weights written with ModelWriter, and a tiny
// SentencePiece model trained in the test process on generated lines.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "temp_dir.h"  // make_temp_dir, which the tests of tiny models use
#include "xf/format/config.h"
#include "xf/format/shortlist.h"

namespace xf::test {

// A model small enough that a file is a few KB and a gradient check takes milliseconds: vocab
// `vocab`, d_model 8, 2 heads, d_ff 16, one encoder and one decoder layer, 32 positions; the rest
// ModelConfig's defaults (shared embeddings, post-norm, tied output, no bias). Tests change the
// fields they vary.
ModelConfig tiny_config(uint32_t vocab = 12);

struct TinyModelOptions {
  // A model without a tokenizer whose weights come from `seed`: tests draw it from their random
  // inputs, whose printed seed then makes the same model again.
  static TinyModelOptions without_tokenizer(uint32_t seed) {
    TinyModelOptions options;
    options.seed = seed;
    options.with_tokenizer = false;
    return options;
  }

  uint32_t seed = 1;
  bool with_tokenizer = true;     // vocabulary = the tiny SentencePiece model's pieces
  uint32_t vocab_size = 48;       // when without a tokenizer
  uint32_t d_model = 32;
  uint32_t num_heads = 4;
  uint32_t d_ff = 64;
  uint32_t layers = 2;            // encoder and decoder
  uint32_t max_positions = 256;
  NormPosition norm_position = NormPosition::post;
  bool shared_embeddings = true;
  bool tied_output = false;  // random tied models tend to repeat their input token (BOS)
  DType matrix_dtype = DType::f32;  // 2-D tensors; 1-D ones follow unless int8 (then f32)
  // The embedding tables and the output layer in f32 whatever matrix_dtype is, as Marian's int8
  // students keep them (what int8.arithmetic marian-intgemm-* needs).
  bool f32_tables = false;
  // Added to the EOS logit through the output bias (the model then has one), so that outputs
  // end at varying lengths; 0 leaves the bias out.
  float eos_bias = 2.0f;
  // Added to the unknown token's logit alike, so that outputs hold it (disable_unk tests).
  float unk_bias = 0.0f;
  // Values rounded to f16 before writing, so an f32 file and an f16 file hold the same numbers.
  bool round_to_f16 = false;
  // Metadata entries written into the file (e.g. the decoding.* defaults).
  std::vector<std::pair<std::string, std::string>> metadata;
  // What imported models use (format version 2); the defaults are xf's own.
  Activation activation = Activation::relu;
  PositionEncoding position_encoding = PositionEncoding::interleaved;
  bool scale_embeddings = true;
  bool zero_start_embedding = false;
  // Marian's SSRU decoder layers (format version 3): their candidate rows get a zero bias, as
  // Marian's have none.
  DecoderLayerKind decoder_layer_kind = DecoderLayerKind::self_attention;
  // A lexical shortlist stored in the file.
  std::optional<LexicalShortlist> shortlist;
};

// The tiny SentencePiece model proto (trained once per process; pad 0, unk 1, bos 2, eos 3).
const std::string& tiny_sentencepiece_model();
// Lines like the ones it was trained on (deterministic for a seed).
std::vector<std::string> sample_sentences(size_t count, uint32_t seed);

// `count` sentences of 1..max_length random token ids in 4..vocab-1 (no special ids),
// deterministic for a seed.
std::vector<std::vector<int32_t>> random_source_ids(size_t count, uint32_t vocab, uint32_t seed,
                                                    size_t max_length);

// Writes a model file to `path`; returns its config.
ModelConfig write_tiny_model(const std::string& path, const TinyModelOptions& options = {});

// Writes the model as "<name>.xfm" into a folder of the test process (removed at exit); its path.
std::string tiny_model_file(const TinyModelOptions& options = {}, const std::string& name = "tiny");


}  // namespace xf::test
