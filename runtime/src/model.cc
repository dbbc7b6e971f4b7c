#include "xf/model.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "xf/format/model_file.h"
#include "xf/metrics.h"

namespace xf {
namespace {

std::unique_ptr<sentencepiece::SentencePieceProcessor> load_tokenizer(std::string_view proto,
                                                                      uint32_t vocab_size,
                                                                      const std::string& label) {
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->LoadFromSerializedProto(proto);
  if (!status.ok()) throw Error(label + ": cannot load the SentencePiece model: " + status.ToString());
  // Ids the model can produce must be pieces the tokenizer knows, and the reverse.
  if (static_cast<uint32_t>(processor->GetPieceSize()) != vocab_size)
    throw Error(label + ": the SentencePiece model has " + std::to_string(processor->GetPieceSize()) +
                " pieces but the vocabulary has " + std::to_string(vocab_size));
  return processor;
}

std::vector<int32_t> encode(const sentencepiece::SentencePieceProcessor& tokenizer, std::string_view text,
                            const char* label) {
  metrics::check_utf8(text, label);
  std::vector<int> pieces;
  const auto status = tokenizer.Encode(text, &pieces);
  if (!status.ok()) throw Error("tokenization failed: " + status.ToString());
  return std::vector<int32_t>(pieces.begin(), pieces.end());
}

std::vector<int32_t> piece_ids(const sentencepiece::SentencePieceProcessor& tokenizer,
                               const std::vector<std::string>& pieces, const char* side) {
  std::vector<int32_t> ids(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int id = tokenizer.PieceToId(pieces[i]);
    // PieceToId answers unk_id for an unknown piece: only the unknown piece itself may map there.
    if (id == tokenizer.unk_id() && pieces[i] != tokenizer.IdToPiece(id))
      throw Error("piece '" + pieces[i] + "' is not in the " + side + " vocabulary");
    ids[i] = id;
  }
  return ids;
}

std::vector<std::string> pieces_of(const sentencepiece::SentencePieceProcessor& tokenizer, const int32_t* ids,
                                   size_t count, const char* side) {
  std::vector<std::string> pieces(count);
  for (size_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= tokenizer.GetPieceSize())
      throw Error("token id " + std::to_string(ids[i]) + " is outside the " + side + " vocabulary");
    pieces[i] = tokenizer.IdToPiece(ids[i]);
  }
  return pieces;
}

}  // namespace

namespace {

// A whole string as a number in [min, max], or nothing.
bool parse_value(const std::string& text, double min, double max, bool integer, double& value) {
  char* end = nullptr;
  errno = 0;
  value = std::strtod(text.c_str(), &end);
  return !text.empty() && *end == '\0' && errno == 0 && std::isfinite(value) && value >= min && value <= max &&
         (!integer || value == std::floor(value));
}

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

DecodingDefaults DecodingDefaults::from_metadata(const std::vector<std::pair<std::string, std::string>>& metadata) {
  static const std::string kPrefix = "decoding.";
  struct Setting {
    const char* name;
    double min, max;
    bool integer;
    std::function<void(DecodingDefaults&, double)> set;
  };
  static const Setting kSettings[] = {
      {"beam", 1, 1024, true, [](DecodingDefaults& d, double v) { d.beam = static_cast<int>(v); }},
      {"length_penalty", -100, 100, false, [](DecodingDefaults& d, double v) { d.length_penalty = static_cast<float>(v); }},
      {"repetition_penalty", 1e-6, 1e6, false,
       [](DecodingDefaults& d, double v) { d.repetition_penalty = static_cast<float>(v); }},
      {"no_repeat_ngram_size", 0, 1 << 20, true,
       [](DecodingDefaults& d, double v) { d.no_repeat_ngram_size = static_cast<int>(v); }},
  };
  DecodingDefaults defaults;
  for (const auto& [key, text] : metadata) {
    if (key.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    const std::string name = key.substr(kPrefix.size());
    const Setting* setting = nullptr;
    std::string known;
    for (const Setting& s : kSettings) {
      if (name == s.name) setting = &s;
      known += std::string(known.empty() ? "" : ", ") + s.name;
    }
    if (setting == nullptr)
      throw Error("metadata " + key + ": not a decoding setting xf knows (" + known + ")");
    double value = 0.0;
    if (!parse_value(text, setting->min, setting->max, setting->integer, value))
      throw Error("metadata " + key + ": expected " + (setting->integer ? "an integer" : "a number") + " from " +
                  number_text(setting->min) + " to " + number_text(setting->max) + ", got '" + text + "'");
    setting->set(defaults, value);
    defaults.from_model.push_back(name);
  }
  return defaults;
}

std::vector<std::pair<std::string, std::string>> DecodingDefaults::to_text() const {
  return {{"beam", std::to_string(beam)},
          {"length_penalty", number_text(length_penalty)},
          {"repetition_penalty", number_text(repetition_penalty)},
          {"no_repeat_ngram_size", std::to_string(no_repeat_ngram_size)}};
}

bool DecodingDefaults::set_by_model(const std::string& name) const {
  return std::find(from_model.begin(), from_model.end(), name) != from_model.end();
}

Model::Model(std::shared_ptr<const ModelFile> file) : file_(std::move(file)) {
  const ModelConfig& c = file_->config();
  try {
    decoding_defaults_ = DecodingDefaults::from_metadata(file_->metadata());
  } catch (const Error& e) {
    throw Error(file_->path() + ": " + e.what());
  }
  if (!file_->source_tokenizer().empty()) {
    source_tokenizer_ = load_tokenizer(file_->source_tokenizer(), c.source_vocab_size,
                                       file_->path() + ": source tokenizer");
    target_tokenizer_ = load_tokenizer(file_->target_tokenizer(), c.target_vocab_size,
                                       file_->path() + ": target tokenizer");
    for (int id = 0; id < source_tokenizer_->GetPieceSize(); ++id)
      longest_source_piece_ = std::max(longest_source_piece_, source_tokenizer_->IdToPiece(id).size());
  }
}

Model::~Model() = default;

std::shared_ptr<const Model> Model::open(const std::string& path) {
  return open(path, FileAccess::map);
}

std::shared_ptr<const Model> Model::open(const std::string& path, FileAccess access) {
  return from_file(ModelFile::open(path, access));
}

std::shared_ptr<const Model> Model::from_file(std::shared_ptr<const ModelFile> file) {
  if (!file) throw Error("Model::from_file: no model file");
  return std::shared_ptr<const Model>(new Model(std::move(file)));
}

const ModelConfig& Model::config() const { return file_->config(); }

const sentencepiece::SentencePieceProcessor& Model::tokenizer(bool source) const {
  if (!source_tokenizer_) throw Error(file_->path() + ": the model has no tokenizer (use token ids)");
  return source ? *source_tokenizer_ : *target_tokenizer_;
}

std::vector<int32_t> Model::encode_source(std::string_view text) const {
  return encode(tokenizer(true), text, "source text");
}

size_t Model::source_bytes_for(size_t max_tokens) const {
  // A piece of at least 4 bytes (byte fallback and unknown characters: one character a piece).
  const size_t per_piece = std::max<size_t>(longest_source_piece_, 4) * 4;
  return max_tokens > SIZE_MAX / per_piece ? SIZE_MAX : max_tokens * per_piece;
}

std::vector<int32_t> Model::encode_source(std::string_view text, size_t max_tokens, bool* truncated) const {
  size_t bytes = std::min(text.size(), source_bytes_for(max_tokens));
  const bool cut = bytes < text.size();
  // Back to the start of a UTF-8 character (at most 3 continuation bytes), so that cutting
  // never makes valid text invalid.
  for (int back = 0; cut && back < 3 && bytes > 0 && (static_cast<unsigned char>(text[bytes]) & 0xC0) == 0x80; ++back)
    --bytes;
  std::vector<int32_t> ids = encode_source(text.substr(0, bytes));
  const bool longer = cut || ids.size() > max_tokens;
  if (ids.size() > max_tokens) ids.resize(max_tokens);
  if (truncated != nullptr) *truncated = longer;
  return ids;
}

std::vector<int32_t> Model::encode_target(std::string_view text) const {
  return encode(tokenizer(false), text, "target text");
}

std::vector<int32_t> Model::source_piece_ids(const std::vector<std::string>& pieces) const {
  return piece_ids(tokenizer(true), pieces, "source");
}

std::vector<int32_t> Model::target_piece_ids(const std::vector<std::string>& pieces) const {
  return piece_ids(tokenizer(false), pieces, "target");
}

std::vector<std::string> Model::source_pieces(const int32_t* ids, size_t count) const {
  return pieces_of(tokenizer(true), ids, count, "source");
}

std::vector<std::string> Model::target_pieces(const int32_t* ids, size_t count) const {
  return pieces_of(tokenizer(false), ids, count, "target");
}

std::string Model::decode_target(const int32_t* ids, size_t count) const {
  std::vector<int> pieces(ids, ids + count);
  std::string text;
  const auto status = tokenizer(false).Decode(pieces, &text);
  if (!status.ok()) throw Error("detokenization failed: " + status.ToString());
  return text;
}

}  // namespace xf
