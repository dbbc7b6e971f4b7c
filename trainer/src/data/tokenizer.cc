// SentencePiece glue: training one shared vocabulary through the C++ trainer API, encoding and
// decoding.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cmath>
#include <unordered_map>

#include "xf/error.h"
#include "xf/trainer/data.h"

namespace xf::trainer {

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

// Feeds the training sentences (both sides of every pair) to the trainer without a temp file.
class PairSentenceIterator : public sentencepiece::SentenceIterator {
 public:
  explicit PairSentenceIterator(const std::vector<TextPair>& pairs) : pairs_(pairs) { load(); }
  bool done() const override { return index_ >= 2 * pairs_.size(); }
  void Next() override {
    ++index_;
    load();
  }
  const std::string& value() const override { return *current_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void load() {
    if (done()) return;
    const TextPair& pair = pairs_[index_ / 2];
    current_ = index_ % 2 == 0 ? &pair.source : &pair.target;
  }
  const std::vector<TextPair>& pairs_;
  size_t index_ = 0;
  const std::string* current_ = nullptr;
};

}  // namespace

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_model_proto(std::string model_proto, const std::string& label) {
  Tokenizer tokenizer;
  auto status = tokenizer.impl_->processor.LoadFromSerializedProto(model_proto);
  if (!status.ok()) throw Error(label + ": not a SentencePiece model (" + status.ToString() + ")");
  const auto& p = tokenizer.impl_->processor;
  if (p.pad_id() != kPadId || p.unk_id() != kUnkId || p.bos_id() != kBosId ||
      p.eos_id() != kEosId) {
    throw Error(label + ": SentencePiece model has special ids pad=" + std::to_string(p.pad_id()) +
                " unk=" + std::to_string(p.unk_id()) + " bos=" + std::to_string(p.bos_id()) +
                " eos=" + std::to_string(p.eos_id()) + ", expected pad=0 unk=1 bos=2 eos=3");
  }
  tokenizer.model_proto_ = std::move(model_proto);
  return tokenizer;
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_model_proto(read_file_bytes(path), path);
}

Tokenizer Tokenizer::train(const std::vector<TextPair>& pairs,
                           const SentencePieceTrainOptions& options) {
  if (pairs.empty()) throw Error("cannot train SentencePiece on an empty corpus");
  if (options.vocab_size < 8) {
    throw Error("--vocab-size " + std::to_string(options.vocab_size) + " is too small (min 8)");
  }
  std::unordered_map<std::string, std::string> args = {
      {"model_type", options.model_type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"character_coverage", std::to_string(options.character_coverage)},
      {"input_sentence_size", std::to_string(options.max_training_sentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(options.threads)},
      {"pad_id", std::to_string(kPadId)},
      {"unk_id", std::to_string(kUnkId)},
      {"bos_id", std::to_string(kBosId)},
      {"eos_id", std::to_string(kEosId)},
      // A small corpus may not support the requested size: take what it supports.
      {"hard_vocab_limit", "false"},
      {"minloglevel", "1"},
  };
  PairSentenceIterator sentences(pairs);
  std::string model_proto;
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &sentences, &model_proto);
  if (!status.ok()) throw Error("SentencePiece training failed: " + status.ToString());
  return from_model_proto(std::move(model_proto), "trained SentencePiece model");
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  auto status = impl_->processor.Encode(text, &ids);
  if (!status.ok()) throw Error("SentencePiece encode failed: " + status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::vector<int32_t> Tokenizer::sample_encode(std::string_view text, int nbest, double alpha,
                                              double draw) const {
  sentencepiece::ImmutableNBestSentencePieceText candidates;
  auto status = impl_->processor.NBestEncode(text, nbest, candidates.mutable_proto());
  if (!status.ok()) {
    throw Error("subword sampling needs a unigram SentencePiece model (n-best encoding failed: " +
                status.ToString() + ")");
  }
  const size_t count = candidates.nbests_size();
  if (count == 0) return encode(text);
  // Chances relative to the best segmentation's, so exp never overflows.
  std::vector<double> weights(count);
  const double best = candidates.nbests(0).score();
  double total = 0;
  for (size_t i = 0; i < count; ++i) {
    weights[i] = std::exp(alpha * (candidates.nbests(static_cast<int>(i)).score() - best));
    total += weights[i];
  }
  size_t chosen = 0;
  for (double mark = draw * total; chosen + 1 < count && mark >= weights[chosen]; ++chosen) {
    mark -= weights[chosen];
  }
  const auto pieces = candidates.nbests(static_cast<int>(chosen)).pieces();
  std::vector<int32_t> ids;
  ids.reserve(pieces.size());
  for (const auto& piece : pieces) ids.push_back(static_cast<int32_t>(piece.id()));
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<int> plain;
  plain.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id < vocab_size() && id != kPadId && id != kBosId && id != kEosId) {
      plain.push_back(id);
    }
  }
  std::string text;
  auto status = impl_->processor.Decode(plain, &text);
  if (!status.ok()) throw Error("SentencePiece decode failed: " + status.ToString());
  return text;
}

int Tokenizer::vocab_size() const { return impl_->processor.GetPieceSize(); }

std::string Tokenizer::piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary of " +
                std::to_string(vocab_size()));
  }
  return impl_->processor.IdToPiece(id);
}

namespace {

uint64_t read_varint(std::string_view bytes, size_t* pos) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= bytes.size()) break;
    const auto byte = static_cast<uint8_t>(bytes[(*pos)++]);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return value;
  }
  throw Error("SentencePiece model: truncated or malformed varint");
}

}  // namespace

std::string sentencepiece_model_subset(std::string_view model_proto,
                                       const std::vector<int32_t>& kept) {
  for (int32_t special : {kPadId, kUnkId, kBosId, kEosId}) {
    if (kept.size() <= static_cast<size_t>(special) || kept[special] != special) {
      throw Error("a SentencePiece subset must keep the special ids 0..3 first");
    }
  }
  for (size_t i = 1; i < kept.size(); ++i) {
    if (kept[i] <= kept[i - 1]) throw Error("the kept piece ids must be ascending and distinct");
  }
  constexpr uint64_t kPiecesField = 1, kSelfTestField = 4;
  std::string subset;
  size_t pos = 0, next_kept = 0;
  int32_t piece_id = 0;
  while (pos < model_proto.size()) {
    const size_t start = pos;
    const uint64_t tag = read_varint(model_proto, &pos);
    switch (tag & 7) {
      case 0: read_varint(model_proto, &pos); break;
      case 1: pos += 8; break;
      case 2: {
        const uint64_t length = read_varint(model_proto, &pos);
        if (length > model_proto.size() - pos) throw Error("SentencePiece model: truncated field");
        pos += length;
        break;
      }
      case 5: pos += 4; break;
      default: throw Error("SentencePiece model: unknown wire type " + std::to_string(tag & 7));
    }
    if (pos > model_proto.size()) throw Error("SentencePiece model: truncated field");
    const uint64_t field = tag >> 3;
    if (field == kSelfTestField) continue;
    if (field == kPiecesField) {
      const bool keep = next_kept < kept.size() && kept[next_kept] == piece_id;
      ++piece_id;
      if (!keep) continue;
      ++next_kept;
    }
    subset.append(model_proto.substr(start, pos - start));
  }
  if (next_kept != kept.size()) {
    throw Error("piece id " + std::to_string(kept[next_kept]) +
                " is not in the SentencePiece model (" + std::to_string(piece_id) + " pieces)");
  }
  return subset;
}

}  // namespace xf::trainer
