// Checkpoints -> flat model file: averaging, metadata, writing through xf::ModelWriter.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/format/model_writer.h"
#include "xf/format/parameters.h"
#include "xf/trainer/checkpoint.h"

namespace xf::trainer {

Checkpoint average_checkpoints(const std::vector<Checkpoint>& checkpoints,
                               const std::vector<std::string>& labels, const std::vector<double>& weights) {
  if (checkpoints.empty()) throw Error("no checkpoint to average");
  if (labels.size() != checkpoints.size()) throw Error("average_checkpoints: one label per checkpoint");
  if (!weights.empty() && weights.size() != checkpoints.size()) {
    throw Error("weights: " + std::to_string(weights.size()) + " given for " + std::to_string(checkpoints.size()) +
                " inputs (one per input)");
  }
  for (const double w : weights) {
    if (!(w > 0) || !std::isfinite(w)) throw Error("weights: each must be a positive number");
  }
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
  double total_weight = 0;
  for (size_t c = 0; c < checkpoints.size(); ++c) {
    const double w = weights.empty() ? 1.0 : weights[c];
    total_weight += w;
    const std::vector<float>& p = checkpoints[c].parameters;
    for (size_t i = 0; i < n; ++i) sum[i] += w * p[i];
  }
  for (size_t i = 0; i < n; ++i) averaged.parameters[i] = static_cast<float>(sum[i] / total_weight);
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

void write_model_file(const Checkpoint& checkpoint, DType dtype,
                      const std::map<std::string, std::string>& metadata, const std::string& path,
                      const std::string& target_tokenizer, const LexicalShortlist* shortlist,
                      const std::function<WeightLayout(const std::string& name, DType dtype)>& layout_of) {
  ModelWriter writer = writer_of_parameters(checkpoint.config, checkpoint.parameters.data(),
                                    checkpoint.parameters.size(), dtype);
  if (layout_of) {
    for (const ParameterSpec& spec : transformer_parameters(checkpoint.config)) {
      // writer_of_parameters keeps 1-D tensors (biases, norms) in f32, matrices in `dtype`.
      const DType stored = spec.shape.size() >= 2 ? dtype : DType::f32;
      writer.set_layout(spec.name, layout_of(spec.name, stored));
    }
  }
  writer.set_source_tokenizer(checkpoint.tokenizer_model);
  if (!target_tokenizer.empty()) writer.set_target_tokenizer(target_tokenizer);
  for (const auto& [key, value] : metadata) writer.set_metadata(key, value);
  if (shortlist != nullptr) writer.set_shortlist(*shortlist);
  writer.write(path);
}

LexicalShortlist read_shortlist_for(const Checkpoint& checkpoint, const std::string& target_tokenizer,
                                    const std::string& path, const TextShortlistOptions& options) {
  // piece -> id of one side's SentencePiece model.
  const auto ids_of = [](const std::string& proto) {
    const Tokenizer tokenizer = Tokenizer::from_model_proto(proto, "model");
    std::map<std::string, uint32_t, std::less<>> ids;
    for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) ids.emplace(tokenizer.piece(id), static_cast<uint32_t>(id));
    return ids;
  };
  const auto source_ids = ids_of(checkpoint.tokenizer_model);
  const auto target_ids = target_tokenizer.empty() ? source_ids : ids_of(target_tokenizer);
  const uint32_t unk = static_cast<uint32_t>(checkpoint.config.unk_id);
  const auto lookup = [unk](const std::map<std::string, uint32_t, std::less<>>& ids) {
    return [&ids, unk](std::string_view piece) {
      const auto it = ids.find(piece);
      return it == ids.end() ? unk : it->second;
    };
  };
  return read_text_shortlist(path, lookup(source_ids), lookup(target_ids), checkpoint.config.source_vocab_size,
                             options);
}

namespace {

// Where each tensor of `config` starts in `parameters` (transformer_parameters() order).
std::map<std::string, const float*> tensors_by_name(const ModelConfig& config,
                                                    const std::vector<float>& parameters) {
  std::map<std::string, const float*> tensors;
  size_t offset = 0;
  for (const auto& spec : transformer_parameters(config)) {
    tensors[spec.name] = parameters.data() + offset;
    offset += static_cast<size_t>(spec.elements());
  }
  if (offset != parameters.size()) throw Error("checkpoint parameters do not match its config");
  return tensors;
}

// Checks that `layers` are ascending indices below `count`; `stack` names them in errors.
void check_layer_indices(const std::vector<int>& layers, uint32_t count, const char* stack) {
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 0 || static_cast<uint32_t>(layers[i]) >= count ||
        (i > 0 && layers[i] <= layers[i - 1])) {
      throw Error(std::string("the ") + stack + " layers to keep must be ascending indices below " +
                  std::to_string(count));
    }
  }
}

// "encoder.layers.3.ffn.inner.weight" with layers {0, 1, 3} -> "encoder.layers.1.ffn...": the
// name of the original tensor that a renumbered layer's tensor comes from.
std::string original_layer_tensor(const std::string& name, const std::string& stack_prefix,
                                  const std::vector<int>& kept) {
  if (kept.empty() || name.compare(0, stack_prefix.size(), stack_prefix) != 0) return name;
  const size_t dot = name.find('.', stack_prefix.size());
  const int index = std::stoi(name.substr(stack_prefix.size(), dot - stack_prefix.size()));
  return stack_prefix + std::to_string(kept[static_cast<size_t>(index)]) + name.substr(dot);
}

}  // namespace

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
  const auto tensors = tensors_by_name(checkpoint.config, checkpoint.parameters);

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

Checkpoint checkpoint_from_model_file(const ModelFile& model, std::string* target_tokenizer) {
  const bool own_target = model.target_tokenizer() != model.source_tokenizer();
  if (own_target && target_tokenizer == nullptr) {
    throw Error(model.path() + ": has its own target vocabulary already");
  }
  if (target_tokenizer != nullptr) {
    *target_tokenizer = own_target ? std::string(model.target_tokenizer()) : std::string();
  }
  Checkpoint checkpoint;
  checkpoint.config = model.config();
  checkpoint.parameters = parameters_from_model_file(model);
  checkpoint.tokenizer_model = std::string(model.source_tokenizer());
  return checkpoint;
}

namespace {

// As the runtime loads a tokenizer (xf::Model): it must load and hold `vocab_size` pieces.
void check_tokenizer(const std::string& proto, uint32_t vocab_size, const std::string& label) {
  sentencepiece::SentencePieceProcessor processor;
  const auto status = processor.LoadFromSerializedProto(proto);
  if (!status.ok()) throw Error(label + ": cannot load the SentencePiece model: " + status.ToString());
  if (static_cast<uint32_t>(processor.GetPieceSize()) != vocab_size) {
    throw Error(label + ": the SentencePiece model has " + std::to_string(processor.GetPieceSize()) +
                " pieces but the vocabulary has " + std::to_string(vocab_size));
  }
}

}  // namespace

void check_tokenizers(const Checkpoint& checkpoint, const std::string& target_tokenizer,
                      const std::string& label) {
  if (checkpoint.tokenizer_model.empty()) return;
  const ModelConfig& config = checkpoint.config;
  check_tokenizer(checkpoint.tokenizer_model, config.source_vocab_size, label + ": source tokenizer");
  check_tokenizer(target_tokenizer.empty() ? checkpoint.tokenizer_model : target_tokenizer,
                  config.target_vocab_size, label + ": target tokenizer");
}

Checkpoint checkpoint_with_shared_vocabulary(const ModelFile& pruned) {
  const ModelConfig& from = pruned.config();
  if (from.shared_embeddings || pruned.target_tokenizer() == pruned.source_tokenizer()) {
    throw Error(pruned.path() + ": has one shared vocabulary already");
  }
  if (!from.tied_output || from.output_bias) {
    throw Error(pruned.path() + ": an untied output layer or an output bias cannot be shared "
                "again (pruning dropped their other rows)");
  }
  const Tokenizer source =
      Tokenizer::from_model_proto(std::string(pruned.source_tokenizer()), "source tokenizer");
  const Tokenizer target =
      Tokenizer::from_model_proto(std::string(pruned.target_tokenizer()), "target tokenizer");
  std::map<std::string, int32_t> source_ids;
  for (int32_t id = 0; id < source.vocab_size(); ++id) source_ids[source.piece(id)] = id;

  Checkpoint checkpoint;
  checkpoint.config = from;
  checkpoint.config.shared_embeddings = true;
  checkpoint.config.target_vocab_size = from.source_vocab_size;
  checkpoint.tokenizer_model = std::string(pruned.source_tokenizer());
  const std::vector<float> parameters = parameters_from_model_file(pruned);
  const auto tensors = tensors_by_name(from, parameters);
  const float* source_table = tensors.at(param::source_embedding(from));
  const float* target_table = tensors.at(param::target_embedding(from));
  const size_t d = from.d_model;
  for (int32_t id = 0; id < target.vocab_size(); ++id) {
    const auto it = source_ids.find(target.piece(id));
    if (it == source_ids.end() ||
        !std::equal(target_table + id * d, target_table + (id + 1) * d,
                    source_table + static_cast<size_t>(it->second) * d)) {
      throw Error(pruned.path() + ": target piece " + std::to_string(id) +
                  " is not a row of the source vocabulary; not a pruned shared vocabulary");
    }
  }
  for (const auto& spec : transformer_parameters(checkpoint.config)) {
    const std::string& name =
        spec.name == param::source_embedding(checkpoint.config) ? param::source_embedding(from)
                                                                 : spec.name;
    const float* values = tensors.at(name);
    checkpoint.parameters.insert(checkpoint.parameters.end(), values,
                                 values + static_cast<size_t>(spec.elements()));
  }
  return checkpoint;
}

Checkpoint keep_layers(const Checkpoint& checkpoint, const std::vector<int>& encoder,
                       const std::vector<int>& decoder) {
  const ModelConfig& from = checkpoint.config;
  check_layer_indices(encoder, from.encoder_layers, "encoder");
  check_layer_indices(decoder, from.decoder_layers, "decoder");
  const auto tensors = tensors_by_name(from, checkpoint.parameters);
  Checkpoint kept = checkpoint;
  if (!encoder.empty()) kept.config.encoder_layers = static_cast<uint32_t>(encoder.size());
  if (!decoder.empty()) kept.config.decoder_layers = static_cast<uint32_t>(decoder.size());
  kept.parameters.clear();
  for (const auto& spec : transformer_parameters(kept.config)) {
    const std::string name = original_layer_tensor(
        original_layer_tensor(spec.name, "encoder.layers.", encoder), "decoder.layers.", decoder);
    const float* values = tensors.at(name);
    kept.parameters.insert(kept.parameters.end(), values,
                           values + static_cast<size_t>(spec.elements()));
  }
  return kept;
}

namespace {

// The trainer's graph is the paper's (ReLU, scaled embeddings, interleaved sinusoid, start
// token) over the tokenizer's own ids: an imported model's version 2 features it cannot keep.
// An SSRU decoder (format version 3) is the trainer's own (--decoder-cell ssru).
void check_trainable(const ModelFile& model) {
  ModelConfig graph = model.config();
  graph.decoder_layer_kind = DecoderLayerKind::self_attention;
  if (config_format_version(graph) >= 2 || !model.source_vocabulary().empty())
    throw Error(model.path() + ": an imported model (format version 2: its activation, embeddings, "
                "positions or vocabulary list) cannot be trained or rewritten; convert it again from "
                "the original with xf-convert --from");
  if (model.shortlist())
    throw Error(model.path() + ": a model with a stored lexical shortlist cannot be trained or rewritten (the "
                "shortlist would be lost); convert it again from the original with xf-convert --from");
}

}  // namespace

std::vector<float> parameters_from_model_file(const ModelFile& model) {
  check_trainable(model);
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

std::vector<std::string> copy_matching_parameters(const ModelFile& model,
                                                  const ModelConfig& config, float* parameters) {
  check_trainable(model);
  std::vector<std::string> copied;
  const std::vector<TensorView>& tensors = model.tensors();  // sorted by name
  for (const auto& spec : transformer_parameters(config)) {
    const auto found = std::lower_bound(
        tensors.begin(), tensors.end(), spec.name,
        [](const TensorView& tensor, const std::string& name) { return tensor.name < name; });
    if (found != tensors.end() && found->name == spec.name && found->rank == spec.shape.size() &&
        std::equal(spec.shape.begin(), spec.shape.end(), found->shape.begin())) {
      widen_to_f32(*found, parameters);
      copied.push_back(spec.name);
    }
    parameters += spec.elements();
  }
  // Another width or vocabulary could still match a few biases by chance: without the
  // embedding, nothing is learnt from the file.
  const std::string embedding = param::source_embedding(config);
  if (std::find(copied.begin(), copied.end(), embedding) == copied.end()) {
    throw Error(model.path() + ": no tensor has the name and shape of the embedding '" + embedding +
                "' of the model trained (another d_model or vocabulary?)");
  }
  return copied;
}

}  // namespace xf::trainer
