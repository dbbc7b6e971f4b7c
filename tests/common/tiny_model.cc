#include "tiny_model.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "xf/format/dtype_convert.h"
#include "xf/format/model_writer.h"
#include "xf/format/parameters.h"

namespace xf::test {
namespace {

const char* const kWords[] = {
    "the", "cat", "dog", "sees", "a", "house", "red", "blue", "small", "big", "runs", "to",
    "river", "tree", "and", "bird", "sings", "in", "morning", "night", "green", "old", "new",
    "city", "walks", "with", "friend", "book", "reads", "on", "table", "sun", "moon", "water",
    "été", "naïve", "über", "garçon", "日本", "ok"};

class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::vector<std::string> lines) : lines_(std::move(lines)) {}
  bool done() const override { return index_ >= lines_.size(); }
  void Next() override { ++index_; }
  const std::string& value() const override { return lines_[index_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  std::vector<std::string> lines_;
  size_t index_ = 0;
};

}  // namespace

ModelConfig tiny_config(uint32_t vocab) {
  ModelConfig c;
  c.source_vocab_size = c.target_vocab_size = vocab;
  c.d_model = 8;
  c.num_heads = 2;
  c.d_ff = 16;
  c.encoder_layers = c.decoder_layers = 1;
  c.max_positions = 32;
  return c;
}

std::vector<std::vector<int32_t>> random_source_ids(size_t count, uint32_t vocab, uint32_t seed,
                                                    size_t max_length) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> sources(count);
  for (auto& s : sources) {
    s.resize(1 + rng() % max_length);
    for (int32_t& id : s) id = 4 + static_cast<int32_t>(rng() % (vocab - 4));
  }
  return sources;
}

std::vector<std::string> sample_sentences(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t words = sizeof(kWords) / sizeof(kWords[0]);
  std::vector<std::string> lines;
  for (size_t i = 0; i < count; ++i) {
    const size_t length = 1 + rng() % 9;
    std::string line;
    for (size_t w = 0; w < length; ++w) {
      if (w > 0) line += ' ';
      line += kWords[rng() % words];
    }
    if (rng() % 3 == 0) line += '.';
    lines.push_back(line);
  }
  return lines;
}

const std::string& tiny_sentencepiece_model() {
  static const std::string proto = [] {
    LineIterator lines(sample_sentences(400, 7));
    const std::unordered_map<std::string, std::string> args = {
        {"model_type", "unigram"}, {"vocab_size", "96"},  {"hard_vocab_limit", "false"},
        {"pad_id", "0"},           {"unk_id", "1"},       {"bos_id", "2"},
        {"eos_id", "3"},           {"num_threads", "1"},  {"minloglevel", "2"},
        {"character_coverage", "1.0"}};
    std::string model;
    const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
    if (!status.ok()) throw std::runtime_error("SentencePiece training failed: " + status.ToString());
    return model;
  }();
  return proto;
}

ModelConfig write_tiny_model(const std::string& path, const TinyModelOptions& options) {
  ModelConfig config;
  uint32_t vocab = options.vocab_size;
  if (options.with_tokenizer) {
    sentencepiece::SentencePieceProcessor processor;
    if (!processor.LoadFromSerializedProto(tiny_sentencepiece_model()).ok())
      throw std::runtime_error("cannot load the tiny SentencePiece model");
    vocab = static_cast<uint32_t>(processor.GetPieceSize());
  }
  config.source_vocab_size = config.target_vocab_size = vocab;
  config.d_model = options.d_model;
  config.num_heads = options.num_heads;
  config.d_ff = options.d_ff;
  config.encoder_layers = config.decoder_layers = options.layers;
  config.max_positions = options.max_positions;
  config.norm_position = options.norm_position;
  config.shared_embeddings = options.shared_embeddings;
  config.tied_output = options.tied_output;
  config.output_bias = options.eos_bias != 0.0f || options.unk_bias != 0.0f;
  config.activation = options.activation;
  config.position_encoding = options.position_encoding;
  config.scale_embeddings = options.scale_embeddings;
  config.zero_start_embedding = options.zero_start_embedding;
  config.decoder_layer_kind = options.decoder_layer_kind;

  ModelWriter writer(config);
  if (options.with_tokenizer) writer.set_source_tokenizer(tiny_sentencepiece_model());
  if (options.shortlist) writer.set_shortlist(*options.shortlist);
  for (const auto& [key, value] : options.metadata) writer.set_metadata(key, value);
  std::mt19937 rng(options.seed);
  for (const ParameterSpec& spec : transformer_parameters(config)) {
    std::vector<float> values(spec.elements());
    const std::string& name = spec.name;
    const bool matrix = spec.shape.size() == 2;
    const bool table = name == param::source_embedding(config) || name == param::target_embedding(config) ||
                       name == schema::kOutputWeight;
    if (table) {
      std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(config.d_model)));
      for (float& v : values) v = normal(rng);
    } else if (matrix) {
      const float bound = std::sqrt(6.0f / static_cast<float>(spec.shape[0] + spec.shape[1]));
      std::uniform_real_distribution<float> uniform(-bound, bound);
      for (float& v : values) v = uniform(rng);
    } else if (name.size() > 6 && name.compare(name.size() - 6, 6, schema::kGamma) == 0) {
      std::uniform_real_distribution<float> uniform(0.8f, 1.2f);
      for (float& v : values) v = uniform(rng);
    } else {
      std::uniform_real_distribution<float> uniform(-0.1f, 0.1f);
      for (float& v : values) v = uniform(rng);
    }
    if (name.size() > 22 && name.compare(name.size() - 22, 22, "ssru.input_forget.bias") == 0)
      std::fill(values.begin(), values.begin() + config.d_model, 0.0f);  // Marian's x W has no bias
    if (name == param::kOutputBias) {
      values[config.eos_id] += options.eos_bias;
      values[config.unk_id] += options.unk_bias;
    }
    if (options.round_to_f16)
      for (float& v : values) v = half_to_float(float_to_half(v));
    DType dtype = options.matrix_dtype;
    if ((!matrix || (table && options.f32_tables)) && dtype == DType::int8) dtype = DType::f32;
    writer.add_tensor_f32(name, dtype, spec.shape, values.data());
  }
  writer.write(path);
  return config;
}

std::string tiny_model_file(const TinyModelOptions& options, const std::string& name) {
  static const std::string dir = make_temp_dir("tiny_models");
  const std::string path = dir + "/" + name + ".xfm";
  write_tiny_model(path, options);
  return path;
}

}  // namespace xf::test
