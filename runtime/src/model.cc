#include "xf/model.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <unordered_map>

#include "xf/format/model_file.h"
#include "xf/utf8.h"

namespace xf {

class Model::Side {
 public:
  // `vocabulary`: the model's piece of each id, empty when the tokenizer's ids are the model's.
  Side(std::string_view proto, const std::vector<std::string_view>& vocabulary, uint32_t vocab_size,
       int32_t unk_id, const std::string& label, const char* side)
      : pieces_(vocabulary), unk_id_(unk_id), side_(side) {
    const auto status = tokenizer_.LoadFromSerializedProto(proto);
    if (!status.ok()) throw Error(label + ": cannot load the SentencePiece model: " + status.ToString());
    if (pieces_.empty()) {
      // Ids the model can produce must be pieces the tokenizer knows, and the reverse.
      if (static_cast<uint32_t>(tokenizer_.GetPieceSize()) != vocab_size)
        throw Error(label + ": the SentencePiece model has " + std::to_string(tokenizer_.GetPieceSize()) +
                    " pieces but the vocabulary has " + std::to_string(vocab_size));
      return;
    }
    ids_.reserve(pieces_.size());
    for (size_t id = 0; id < pieces_.size(); ++id) ids_.emplace(pieces_[id], static_cast<int32_t>(id));
  }

  // The longest piece's bytes (what one id can take of the text).
  size_t longest_piece() const {
    size_t longest = 0;
    for (int id = 0; id < tokenizer_.GetPieceSize(); ++id) longest = std::max(longest, tokenizer_.IdToPiece(id).size());
    return longest;
  }

  std::vector<int32_t> encode(std::string_view text, const char* label) const {
    check_utf8(text, label);
    std::vector<int32_t> out;
    if (pieces_.empty()) {
      std::vector<int> ids;
      const auto status = tokenizer_.Encode(text, &ids);
      if (!status.ok()) throw Error("tokenization failed: " + status.ToString());
      out.assign(ids.begin(), ids.end());
      return out;
    }
    std::vector<std::string> pieces;
    const auto status = tokenizer_.Encode(text, &pieces);
    if (!status.ok()) throw Error("tokenization failed: " + status.ToString());
    out.reserve(pieces.size());
    for (const std::string& piece : pieces) {
      const auto it = ids_.find(piece);
      out.push_back(it == ids_.end() ? unk_id_ : it->second);
    }
    return out;
  }

  std::vector<int32_t> piece_ids(const std::vector<std::string>& pieces) const {
    std::vector<int32_t> ids(pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (!pieces_.empty()) {
        const auto it = ids_.find(pieces[i]);
        if (it == ids_.end()) throw Error("piece '" + pieces[i] + "' is not in the " + side_ + " vocabulary");
        ids[i] = it->second;
        continue;
      }
      const int id = tokenizer_.PieceToId(pieces[i]);
      // PieceToId answers unk_id for an unknown piece: only the unknown piece itself may map there.
      if (id == tokenizer_.unk_id() && pieces[i] != tokenizer_.IdToPiece(id))
        throw Error("piece '" + pieces[i] + "' is not in the " + side_ + " vocabulary");
      ids[i] = id;
    }
    return ids;
  }

  std::vector<std::string> pieces_of(const int32_t* ids, size_t count) const {
    const int64_t size = pieces_.empty() ? tokenizer_.GetPieceSize() : static_cast<int64_t>(pieces_.size());
    std::vector<std::string> pieces(count);
    for (size_t i = 0; i < count; ++i) {
      if (ids[i] < 0 || ids[i] >= size)
        throw Error("token id " + std::to_string(ids[i]) + " is outside the " + side_ + " vocabulary");
      pieces[i] = pieces_.empty() ? tokenizer_.IdToPiece(ids[i]) : std::string(pieces_[ids[i]]);
    }
    return pieces;
  }

  // The model's own pieces go through SentencePiece's DecodePieces, as Marian and Hugging Face
  // decode them. Trailing spaces (an output ending with the lone "▁" piece) are dropped, as
  // transformers' MarianTokenizer strips them: an output is a line's text.
  std::string decode(const int32_t* ids, size_t count) const {
    std::string text;
    const auto status = pieces_.empty() ? tokenizer_.Decode(std::vector<int>(ids, ids + count), &text)
                                        : tokenizer_.Decode(pieces_of(ids, count), &text);
    if (!status.ok()) throw Error("detokenization failed: " + status.ToString());
    while (!text.empty() && text.back() == ' ') text.pop_back();
    return text;
  }

 private:
  sentencepiece::SentencePieceProcessor tokenizer_;
  std::vector<std::string_view> pieces_;  // views into the model file, which outlives the Model
  std::unordered_map<std::string_view, int32_t> ids_;
  int32_t unk_id_;
  const char* side_;
};

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
  // A number in [min, max], or (when `names` is given) one of the names, set as its index.
  struct Setting {
    const char* name;
    double min, max;
    bool integer;
    std::function<void(DecodingDefaults&, double)> set;
    std::vector<std::string> names;
  };
  static const Setting kSettings[] = {
      {"beam", 1, 1024, true, [](DecodingDefaults& d, double v) { d.beam = static_cast<int>(v); }, {}},
      {"length_penalty", -100, 100, false,
       [](DecodingDefaults& d, double v) { d.length_penalty = static_cast<float>(v); }, {}},
      {"length_normalization", 0, 1, true,
       [](DecodingDefaults& d, double v) { d.length_normalization = static_cast<LengthNormalization>(v); },
       {length_normalization_name(LengthNormalization::gnmt), length_normalization_name(LengthNormalization::power)}},
      {"max_decoding_length", 0, 1 << 20, true,
       [](DecodingDefaults& d, double v) { d.max_decoding_length = static_cast<int>(v); }, {}},
      {"repetition_penalty", 1e-6, 1e6, false,
       [](DecodingDefaults& d, double v) { d.repetition_penalty = static_cast<float>(v); }, {}},
      {"no_repeat_ngram_size", 0, 1 << 20, true,
       [](DecodingDefaults& d, double v) { d.no_repeat_ngram_size = static_cast<int>(v); }, {}},
      {"allow_unk", 0, 1, true, [](DecodingDefaults& d, double v) { d.allow_unk = v != 0; }, {}},
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
    if (!setting->names.empty()) {
      const auto it = std::find(setting->names.begin(), setting->names.end(), text);
      if (it == setting->names.end()) {
        std::string choices;
        for (const std::string& n : setting->names) choices += (choices.empty() ? "" : " or ") + n;
        throw Error("metadata " + key + ": expected " + choices + ", got '" + text + "'");
      }
      value = static_cast<double>(it - setting->names.begin());
    } else if (!parse_value(text, setting->min, setting->max, setting->integer, value)) {
      throw Error("metadata " + key + ": expected " + (setting->integer ? "an integer" : "a number") + " from " +
                  number_text(setting->min) + " to " + number_text(setting->max) + ", got '" + text + "'");
    }
    setting->set(defaults, value);
    defaults.from_model.push_back(name);
  }
  return defaults;
}

std::vector<std::pair<std::string, std::string>> DecodingDefaults::to_text() const {
  return {{"beam", std::to_string(beam)},
          {"length_penalty", number_text(length_penalty)},
          {"length_normalization", length_normalization_name(length_normalization)},
          {"max_decoding_length", std::to_string(max_decoding_length)},
          {"repetition_penalty", number_text(repetition_penalty)},
          {"no_repeat_ngram_size", std::to_string(no_repeat_ngram_size)},
          {"allow_unk", allow_unk ? "1" : "0"}};
}

bool DecodingDefaults::set_by_model(const std::string& name) const {
  return std::find(from_model.begin(), from_model.end(), name) != from_model.end();
}

Int8Arithmetic int8_arithmetic_from_metadata(const std::vector<std::pair<std::string, std::string>>& metadata) {
  static const std::pair<const char*, Int8Arithmetic> kNames[] = {
      {"xf", Int8Arithmetic::xf},
      {"marian-intgemm-avx2", Int8Arithmetic::marian_intgemm_avx2},
      {"marian-intgemm-avx512bw", Int8Arithmetic::marian_intgemm_avx512bw},
      {"marian-intgemm-avx512vnni", Int8Arithmetic::marian_intgemm_avx512vnni}};
  Int8Arithmetic arithmetic = Int8Arithmetic::xf;
  for (const auto& [key, value] : metadata) {
    if (key != "int8.arithmetic") continue;
    const auto it = std::find_if(std::begin(kNames), std::end(kNames), [&](const auto& n) { return value == n.first; });
    if (it == std::end(kNames)) {
      std::string names;
      for (const auto& n : kNames) names += std::string(names.empty() ? "" : ", ") + n.first;
      throw Error("metadata int8.arithmetic: expected " + names + "; got '" + value + "'");
    }
    arithmetic = it->second;
  }
  return arithmetic;
}

Model::Model(std::shared_ptr<const ModelFile> file) : file_(std::move(file)) {
  const ModelConfig& c = file_->config();
  try {
    decoding_defaults_ = DecodingDefaults::from_metadata(file_->metadata());
    int8_arithmetic_ = int8_arithmetic_from_metadata(file_->metadata());
  } catch (const Error& e) {
    throw Error(file_->path() + ": " + e.what());
  }
  if (!file_->source_tokenizer().empty()) {
    source_ = std::make_unique<Side>(file_->source_tokenizer(), file_->source_vocabulary(), c.source_vocab_size,
                                     c.unk_id, file_->path() + ": source tokenizer", "source");
    target_ = std::make_unique<Side>(file_->target_tokenizer(), file_->target_vocabulary(), c.target_vocab_size,
                                     c.unk_id, file_->path() + ": target tokenizer", "target");
    longest_source_piece_ = source_->longest_piece();
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

const Model::Side& Model::side(bool source) const {
  if (!source_) throw Error(file_->path() + ": the model has no tokenizer (use token ids)");
  return source ? *source_ : *target_;
}

std::vector<int32_t> Model::encode_source(std::string_view text) const {
  return side(true).encode(text, "source text");
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
  return side(false).encode(text, "target text");
}

std::vector<int32_t> Model::source_piece_ids(const std::vector<std::string>& pieces) const {
  return side(true).piece_ids(pieces);
}

std::vector<int32_t> Model::target_piece_ids(const std::vector<std::string>& pieces) const {
  return side(false).piece_ids(pieces);
}

std::vector<std::string> Model::source_pieces(const int32_t* ids, size_t count) const {
  return side(true).pieces_of(ids, count);
}

std::vector<std::string> Model::target_pieces(const int32_t* ids, size_t count) const {
  return side(false).pieces_of(ids, count);
}

std::string Model::decode_target(const int32_t* ids, size_t count) const {
  return side(false).decode(ids, count);
}

}  // namespace xf
