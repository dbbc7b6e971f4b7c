#pragma once
// A translation model opened from a flat model file (.xfm): the memory-mapped weights (zero copy)
// and the SentencePiece tokenizers stored in the file.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xf/error.h"
#include "xf/format/config.h"
#include "xf/format/file_access.h"
#include "xf/translation_types.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace xf {

class ModelFile;  // xf/format/model_file.h: the reader, internal to xf (not installed)

// Decoding settings a model file carries in its metadata as "decoding.<name>" (xf-convert
// --metadata decoding.length_penalty=1.4, chosen on a dev set): the defaults of every
// translation with that model in xf-run, the C and C++ APIs and Python; an option given
// explicitly wins. Settings the file does not carry keep xf's defaults (the values below).
struct XF_API DecodingDefaults {
  int beam = 4;                     // decoding.beam: beam size, 1 for greedy search
  float length_penalty = 0.6f;      // decoding.length_penalty: alpha
  // decoding.length_normalization: gnmt or power (translation_types.h)
  LengthNormalization length_normalization = LengthNormalization::gnmt;
  int max_decoding_length = 0;      // decoding.max_decoding_length: 0 is no cap
  float repetition_penalty = 1.0f;  // decoding.repetition_penalty: 1 is off
  int no_repeat_ngram_size = 0;     // decoding.no_repeat_ngram_size: 0 is off
  // decoding.allow_unk: 0, the unknown token is never output and the other tokens keep their
  // log-probabilities (Marian's allow-unk false, its default; the disable_unk option instead
  // bans its logit before the softmax). The CPU only: on CUDA it is output as any token.
  bool allow_unk = true;
  std::vector<std::string> from_model;  // the names the file set ("length_penalty"), in order

  // The decoding.* entries of a file's metadata (other entries are not looked at). Throws
  // xf::Error naming an entry whose name is not a setting above or whose value is out of range.
  static DecodingDefaults from_metadata(const std::vector<std::pair<std::string, std::string>>& metadata);
  // Every setting as (name, value) text, in the order above.
  std::vector<std::pair<std::string, std::string>> to_text() const;
  bool set_by_model(const std::string& name) const;
};

// How the CPU computes the products of int8 weight matrices, from the file's metadata entry
// "int8.arithmetic" (xf-convert --metadata int8.arithmetic=marian-intgemm-avx2):
//   xf (the default): activations quantized per row, exact int32 sums (a 7-bit copy of the
//     weights where the CPU's int8 instructions saturate); a sentence translates the same in
//     any batch.
//   marian-intgemm-avx2, marian-intgemm-avx512bw, marian-intgemm-avx512vnni: Marian's intgemm8
//     arithmetic as the intgemm kernel of that name computes it (one activation multiplier per
//     product; saturating 16-bit lane sums on AVX2 and AVX512BW, exact ones on AVX512VNNI:
//     cpu::marian_int8_product), for an imported Marian int8 model whose outputs must be those
//     Marian gives on a CPU of that kind. Like Marian's, a sentence's output then depends on its
//     batch: --max-batch 1 gives Marian's --mini-batch 1. Slower than xf's kernels; the CPU only
//     (CUDA computes its own way); f32 output layers only (Marian's students keep their tied
//     table f32).
enum class Int8Arithmetic { xf, marian_intgemm_avx2, marian_intgemm_avx512bw, marian_intgemm_avx512vnni };
// The metadata's "int8.arithmetic" entry (xf when absent). Throws xf::Error naming the entry and
// the names it takes when its value is not one of them.
XF_API Int8Arithmetic int8_arithmetic_from_metadata(const std::vector<std::pair<std::string, std::string>>& metadata);

class XF_API Model {
 public:
  // Opens and validates the file. Throws xf::Error("<path>: <problem>").
  // FileAccess::map (default): the file is memory-mapped and must not be overwritten in place
  // while the model is open (replace it by renaming a new file over it, which is atomic; `cp
  // new.xfm model.xfm` over an open model kills the process with SIGBUS). FileAccess::read:
  // the file is read into memory, for apps whose files may change under them.
  static std::shared_ptr<const Model> open(const std::string& path);
  static std::shared_ptr<const Model> open(const std::string& path, FileAccess access);
  // Wraps a model file already open (tests and xf's tools open models from memory this way).
  static std::shared_ptr<const Model> from_file(std::shared_ptr<const ModelFile> file);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  // The decoding settings stored in the file, else xf's (read and checked at open).
  const DecodingDefaults& decoding_defaults() const { return decoding_defaults_; }
  // The file's int8.arithmetic (read and checked at open).
  Int8Arithmetic int8_arithmetic() const { return int8_arithmetic_; }
  const ModelFile& file() const { return *file_; }

  // True when the file stores a SentencePiece model (the text API needs one).
  bool has_tokenizer() const { return source_ != nullptr; }

  // Text -> the model's ids of its SentencePiece pieces, without the EOS the translator appends
  // (a piece the model's own vocabulary lacks is its unk_id, as Marian and Hugging Face do).
  // Throws xf::Error when the text is not valid UTF-8 or the model has no tokenizer.
  std::vector<int32_t> encode_source(std::string_view text) const;
  // The first max_tokens ids of a source text, reading no more of it than max_tokens pieces
  // can come from (source_bytes_for(max_tokens) bytes, cut at a character boundary), so that
  // the time and memory it takes do not grow with the text. *truncated: whether the text holds
  // more (more pieces, or bytes past that bound). Same errors as encode_source.
  std::vector<int32_t> encode_source(std::string_view text, size_t max_tokens, bool* truncated) const;
  // The most bytes of source text that max_tokens pieces can come from: max_tokens times the
  // longest piece's bytes, times 4 for what normalization removes or shortens (NFKC, runs of
  // spaces); lines are cut there as they are read (xf-run, xf-bench, the Python package).
  size_t source_bytes_for(size_t max_tokens) const;
  // Target text -> piece ids (a target prefix), without EOS. Same errors.
  std::vector<int32_t> encode_target(std::string_view text) const;
  // Target ids (no EOS) -> text. Throws xf::Error when the model has no tokenizer.
  // Trailing spaces are dropped (an output is a line of text, as transformers strips it).
  std::string decode_target(const int32_t* ids, size_t count) const;

  // SentencePiece pieces <-> ids ("▁Hello"). Throws xf::Error naming a piece the vocabulary
  // lacks, an id outside it, or when the model has no tokenizer.
  std::vector<int32_t> source_piece_ids(const std::vector<std::string>& pieces) const;
  std::vector<int32_t> target_piece_ids(const std::vector<std::string>& pieces) const;
  std::vector<std::string> source_pieces(const int32_t* ids, size_t count) const;
  std::vector<std::string> target_pieces(const int32_t* ids, size_t count) const;

 private:
  explicit Model(std::shared_ptr<const ModelFile> file);
  // One side's text <-> model ids (model.cc): its SentencePiece model, and the model's own
  // vocabulary where the file has one (an imported model's ids are not the tokenizer's).
  class Side;
  // The source or target side; throws xf::Error when the file has no tokenizer.
  const Side& side(bool source) const;

  std::shared_ptr<const ModelFile> file_;
  std::unique_ptr<Side> source_;
  std::unique_ptr<Side> target_;
  DecodingDefaults decoding_defaults_;
  Int8Arithmetic int8_arithmetic_ = Int8Arithmetic::xf;
  size_t longest_source_piece_ = 0;  // bytes; 0 without a tokenizer
};

}  // namespace xf
