// Checkpoints -> flat model file: averaging, metadata, writing through xf::ModelWriter.
#include <cstdio>

#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/format/model_writer.h"
#include "xf/format/parameters.h"
#include "xf/trainer/checkpoint.h"

namespace xf::trainer {

Checkpoint average_checkpoints(const std::vector<Checkpoint>& checkpoints,
                               const std::vector<std::string>& labels) {
  if (checkpoints.empty()) throw Error("no checkpoint to average");
  if (labels.size() != checkpoints.size()) throw Error("average_checkpoints: one label per checkpoint");
  const Checkpoint& first = checkpoints.front();
  const auto first_config = config_to_key_values(first.config);
  size_t newest = 0;
  for (size_t i = 1; i < checkpoints.size(); ++i) {
    if (config_to_key_values(checkpoints[i].config) != first_config) {
      throw Error(labels[i] + ": model config differs from " + labels[0] + "; cannot average");
    }
    if (checkpoints[i].tokenizer_model != first.tokenizer_model) {
      throw Error(labels[i] + ": SentencePiece model differs from " + labels[0] + "; cannot average");
    }
    if (checkpoints[i].parameters.size() != first.parameters.size()) {
      throw Error(labels[i] + ": parameter count differs from " + labels[0]);
    }
    if (checkpoints[i].progress.step > checkpoints[newest].progress.step) newest = i;
  }
  Checkpoint averaged = checkpoints[newest];
  averaged.adam = AdamState{};  // moments are meaningless for an average
  if (checkpoints.size() == 1) return averaged;
  const size_t n = first.parameters.size();
  std::vector<double> sum(n, 0.0);
  for (const auto& c : checkpoints) {
    for (size_t i = 0; i < n; ++i) sum[i] += c.parameters[i];
  }
  const double count = static_cast<double>(checkpoints.size());
  for (size_t i = 0; i < n; ++i) averaged.parameters[i] = static_cast<float>(sum[i] / count);
  return averaged;
}

std::map<std::string, std::string> model_metadata(const Checkpoint& checkpoint,
                                                  const std::vector<std::string>& sources,
                                                  const std::map<std::string, std::string>& extra) {
  auto option = [&](const char* name, const char* fallback) {
    auto it = checkpoint.options.find(name);
    return it == checkpoint.options.end() ? std::string(fallback) : it->second;
  };
  auto number = [](double value) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%.4f", value);
    return std::string(buffer);
  };
  std::map<std::string, std::string> metadata;
  metadata["source_language"] = option("src-lang", "");
  metadata["target_language"] = option("tgt-lang", "");
  metadata["created_by"] = "xf-convert";
  metadata["training.steps"] = std::to_string(checkpoint.progress.step);
  metadata["training.tokens_seen"] = std::to_string(checkpoint.progress.tokens_seen);
  metadata["training.wall_seconds"] = number(checkpoint.progress.elapsed_seconds);
  metadata["training.data"] = option("train", "");
  metadata["training.dev"] = option("dev", "");
  std::string list;
  for (const auto& s : sources) list += (list.empty() ? "" : " ") + s;
  metadata["training.checkpoints"] = list;
  metadata["training.averaged"] = std::to_string(sources.size());
  if (checkpoint.progress.has_best || checkpoint.progress.last_valid_loss != 0) {
    metadata["training.valid_loss"] = number(checkpoint.progress.last_valid_loss);
    metadata["training.valid_bleu"] = number(checkpoint.progress.last_valid_bleu);
  }
  std::string options;
  for (const auto& [key, value] : checkpoint.options) {
    options += (options.empty() ? "" : " ") + ("--" + key + "=" + value);
  }
  metadata["training.options"] = options;
  for (const auto& [key, value] : extra) metadata[key] = value;
  return metadata;
}

ModelWriter model_writer(const ModelConfig& config, const float* parameters, size_t count,
                         DType dtype) {
  ModelWriter writer(config);
  size_t offset = 0;
  for (const auto& spec : transformer_parameters(config)) {
    const size_t elements = static_cast<size_t>(spec.elements());
    if (offset + elements > count) throw Error("checkpoint has fewer parameters than its config lists");
    DType tensor_dtype = spec.shape.size() >= 2 ? dtype : DType::f32;
    writer.add_tensor_f32(spec.name, tensor_dtype, spec.shape, parameters + offset);
    offset += elements;
  }
  if (offset != count) throw Error("checkpoint has more parameters than its config lists");
  return writer;
}

void write_model_file(const Checkpoint& checkpoint, DType dtype,
                      const std::map<std::string, std::string>& metadata, const std::string& path,
                      const std::string& target_tokenizer) {
  ModelWriter writer = model_writer(checkpoint.config, checkpoint.parameters.data(),
                                    checkpoint.parameters.size(), dtype);
  writer.set_source_tokenizer(checkpoint.tokenizer_model);
  if (!target_tokenizer.empty()) writer.set_target_tokenizer(target_tokenizer);
  for (const auto& [key, value] : metadata) writer.set_metadata(key, value);
  writer.write(path);
}

std::vector<int32_t> target_pieces_used(const std::vector<TextPair>& pairs,
                                        const Tokenizer& tokenizer) {
  std::vector<bool> used(static_cast<size_t>(tokenizer.vocab_size()), false);
  for (int32_t special : {kPadId, kUnkId, kBosId, kEosId}) used[special] = true;
  for (const TextPair& pair : pairs) {
    for (int32_t id : tokenizer.encode(pair.target)) used[id] = true;
  }
  std::vector<int32_t> kept;
  for (size_t id = 0; id < used.size(); ++id) {
    if (used[id]) kept.push_back(static_cast<int32_t>(id));
  }
  return kept;
}

PrunedModel prune_target_vocabulary(const Checkpoint& checkpoint,
                                    const std::vector<int32_t>& kept) {
  const ModelConfig& from = checkpoint.config;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (kept[i] < 0 || kept[i] >= static_cast<int32_t>(from.target_vocab_size) ||
        (i > 0 && kept[i] <= kept[i - 1])) {
      throw Error("prune_target_vocabulary: kept ids must be ascending target ids");
    }
  }
  std::map<std::string, const float*> tensors;  // the checkpoint's tensors by name
  size_t offset = 0;
  for (const auto& spec : transformer_parameters(from)) {
    tensors[spec.name] = checkpoint.parameters.data() + offset;
    offset += static_cast<size_t>(spec.elements());
  }
  if (offset != checkpoint.parameters.size()) {
    throw Error("checkpoint parameters do not match its config");
  }

  PrunedModel pruned{checkpoint, sentencepiece_model_subset(checkpoint.tokenizer_model, kept)};
  ModelConfig& to = pruned.checkpoint.config;
  to.shared_embeddings = false;
  to.target_vocab_size = static_cast<uint32_t>(kept.size());
  // Tensors indexed by target id (the target embedding, the untied output weight and the output
  // bias) keep rows `kept`; every other one is copied as it is.
  const std::map<std::string, std::string> by_target_id = {
      {param::target_embedding(to), param::target_embedding(from)},
      {schema::kOutputWeight, schema::kOutputWeight},
      {schema::kOutputBias, schema::kOutputBias}};
  std::vector<float>& parameters = pruned.checkpoint.parameters;
  parameters.clear();
  for (const auto& spec : transformer_parameters(to)) {
    const size_t elements = static_cast<size_t>(spec.elements());
    auto row_source = by_target_id.find(spec.name);
    if (row_source == by_target_id.end()) {
      const std::string& name =
          spec.name == param::source_embedding(to) ? param::source_embedding(from) : spec.name;
      parameters.insert(parameters.end(), tensors.at(name), tensors.at(name) + elements);
      continue;
    }
    const float* rows = tensors.at(row_source->second);
    const size_t width = elements / kept.size();
    for (int32_t id : kept) {
      parameters.insert(parameters.end(), rows + id * width, rows + (id + 1) * width);
    }
  }
  return pruned;
}

std::vector<float> parameters_from_model_file(const ModelFile& model) {
  std::vector<float> parameters;
  for (const auto& spec : transformer_parameters(model.config())) {
    // ModelFile::open already checked every tensor's presence and shape against the config.
    const TensorView& tensor = model.tensor(spec.name);
    const size_t offset = parameters.size();
    parameters.resize(offset + tensor.elements());
    widen_to_f32(tensor, parameters.data() + offset);
  }
  return parameters;
}

}  // namespace xf::trainer
