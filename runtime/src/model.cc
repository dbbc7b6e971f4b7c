#include "xf/model.h"

#include <sentencepiece_processor.h>

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

}  // namespace

Model::Model(std::shared_ptr<const ModelFile> file) : file_(std::move(file)) {
  const ModelConfig& c = file_->config();
  if (!file_->source_tokenizer().empty()) {
    source_tokenizer_ = load_tokenizer(file_->source_tokenizer(), c.source_vocab_size,
                                       file_->path() + ": source tokenizer");
    target_tokenizer_ = load_tokenizer(file_->target_tokenizer(), c.target_vocab_size,
                                       file_->path() + ": target tokenizer");
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

std::vector<int32_t> Model::encode_source(std::string_view text) const {
  if (!source_tokenizer_) throw Error(file_->path() + ": the model has no tokenizer (use token ids)");
  metrics::check_utf8(text, "source text");
  std::vector<int> pieces;
  const auto status = source_tokenizer_->Encode(text, &pieces);
  if (!status.ok()) throw Error("tokenization failed: " + status.ToString());
  return std::vector<int32_t>(pieces.begin(), pieces.end());
}

std::string Model::decode_target(const int32_t* ids, size_t count) const {
  if (!target_tokenizer_) throw Error(file_->path() + ": the model has no tokenizer (use token ids)");
  std::vector<int> pieces(ids, ids + count);
  std::string text;
  const auto status = target_tokenizer_->Decode(pieces, &text);
  if (!status.ok()) throw Error("detokenization failed: " + status.ToString());
  return text;
}

}  // namespace xf
