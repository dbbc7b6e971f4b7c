// SentencePiece glue: training one shared vocabulary through the C++ trainer API, encoding and
// decoding.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

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

}  // namespace xf::trainer
