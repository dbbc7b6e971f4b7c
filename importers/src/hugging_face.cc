// Hugging Face MarianMTModel (transformers' modeling_marian.py): post-norm layers, separate
// q/k/v projections with biases, final_logits_bias, sinusoids of sines then cosines, the decoder
// starting from decoder_start_token_id (the pad token in OPUS-MT's conversions).
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "foreign_tensors.h"
#include "imported_model.h"
#include "xf/error.h"
#include "xf/format/parameters.h"
#include "xf/format/schema.h"
#include "xf/importers/importers.h"

namespace xf::importers {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json(const std::string& path, const std::string& what) {
  const std::string text = read_whole_file(path, what);
  try {
    return json::parse(text);
  } catch (const std::exception& e) {
    throw Error(path + ": " + what + " is not JSON (" + e.what() + ")");
  }
}

// A key of config.json with its type checked; `fallback` when absent (or null) and one is given.
template <typename T>
T config_value(const json& config, const std::string& path, const std::string& key,
               std::optional<T> fallback = std::nullopt) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) {
    if (fallback) return *fallback;
    throw Error(path + ": config key '" + key + "' is missing");
  }
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    throw Error(path + ": config key '" + key + "' has an unexpected type");
  }
}

}  // namespace

void import_hugging_face(const std::string& directory, const std::string& output, const ImportOptions& options) {
  const fs::path dir(directory);
  if (!fs::is_directory(dir)) throw Error(directory + ": not a directory (a Hugging Face MarianMTModel folder)");
  const std::string config_path = (dir / "config.json").string();
  if (!fs::exists(config_path)) throw Error(directory + ": no config.json (not a Hugging Face model folder)");
  const json config = read_json(config_path, "config.json");
  const std::string model_type = config_value<std::string>(config, config_path, "model_type", "");
  if (model_type != "marian")
    throw Error(config_path + ": config key 'model_type' is '" + model_type + "', only 'marian' is imported");
  for (const char* file : {"vocab.json", "source.spm", "target.spm"})
    if (!fs::exists(dir / file)) throw Error(directory + ": missing vocabulary file " + file);
  // model.safetensors when there is one (as transformers prefers it), else pytorch_model.bin.
  const bool safetensors = fs::exists(dir / "model.safetensors");
  const fs::path weights_path = dir / (safetensors ? "model.safetensors" : "pytorch_model.bin");
  if (!fs::exists(weights_path)) throw Error(directory + ": no model.safetensors or pytorch_model.bin");

  ImportedModel model;
  ModelConfig& c = model.config;
  auto get_int = [&](const char* key, std::optional<int64_t> fallback = std::nullopt) {
    return config_value<int64_t>(config, config_path, key, fallback);
  };
  auto get_bool = [&](const char* key, bool fallback) { return config_value<bool>(config, config_path, key, fallback); };
  c.d_model = static_cast<uint32_t>(get_int("d_model"));
  c.num_heads = static_cast<uint32_t>(get_int("encoder_attention_heads"));
  c.d_ff = static_cast<uint32_t>(get_int("encoder_ffn_dim"));
  c.encoder_layers = static_cast<uint32_t>(get_int("encoder_layers"));
  c.decoder_layers = static_cast<uint32_t>(get_int("decoder_layers"));
  c.max_positions = static_cast<uint32_t>(get_int("max_position_embeddings", 512));
  // xf has one head count and one FFN width for both stacks.
  for (const auto& [key, same_as] : {std::pair{"decoder_attention_heads", "encoder_attention_heads"},
                                     std::pair{"decoder_ffn_dim", "encoder_ffn_dim"}})
    if (get_int(key) != get_int(same_as))
      throw Error(config_path + ": config key '" + key + "' differs from '" + same_as + "' (xf needs them equal)");
  if (get_bool("normalize_before", false) || get_bool("add_final_layer_norm", false) ||
      get_bool("normalize_embedding", false))
    throw Error(config_path + ": config keys 'normalize_before', 'add_final_layer_norm' or 'normalize_embedding' "
                "are set; MarianMTModel's layers are post-norm without them");
  const std::string activation = config_value<std::string>(config, config_path, "activation_function", "gelu");
  if (activation == "relu")
    c.activation = Activation::relu;
  else if (activation == "swish" || activation == "silu")
    c.activation = Activation::swish;
  else if (activation == "gelu")
    c.activation = Activation::gelu;
  else
    throw Error(config_path + ": config key 'activation_function' is '" + activation +
                "' (relu, swish, silu or gelu)");
  c.norm_position = NormPosition::post;
  c.layer_norm_epsilon = 1e-5f;  // torch.nn.LayerNorm's default, which MarianMTModel uses
  c.scale_embeddings = get_bool("scale_embedding", false);
  c.position_encoding = PositionEncoding::sin_then_cos;
  c.output_bias = true;

  // The vocabulary: vocab.json maps each piece to the model's id.
  const json vocab = read_json((dir / "vocab.json").string(), "vocab.json");
  if (!vocab.is_object() || vocab.empty()) throw Error((dir / "vocab.json").string() + ": not a piece -> id object");
  std::vector<std::string> pieces(vocab.size());
  for (const auto& [piece, id_value] : vocab.items()) {
    const int64_t id = id_value.is_number_integer() ? id_value.get<int64_t>() : -1;
    if (id < 0 || id >= static_cast<int64_t>(pieces.size()) || !pieces[id].empty())
      throw Error((dir / "vocab.json").string() + ": the ids are not 0.." + std::to_string(pieces.size() - 1) +
                  " each once (piece '" + piece + "')");
    pieces[id] = piece;
  }
  const int64_t vocab_size = get_int("vocab_size");
  if (vocab_size != static_cast<int64_t>(pieces.size()))
    throw Error(config_path + ": config key 'vocab_size' is " + std::to_string(vocab_size) + " but vocab.json has " +
                std::to_string(pieces.size()) + " pieces");
  if (get_int("decoder_vocab_size", vocab_size) != vocab_size)
    throw Error(config_path + ": config key 'decoder_vocab_size' differs from 'vocab_size' (separate vocabularies "
                "are not imported)");
  c.source_vocab_size = c.target_vocab_size = static_cast<uint32_t>(pieces.size());
  c.eos_id = static_cast<int32_t>(get_int("eos_token_id"));
  c.pad_id = static_cast<int32_t>(get_int("pad_token_id"));
  c.bos_id = static_cast<int32_t>(get_int("decoder_start_token_id", c.pad_id));
  const auto unk = vocab.find("<unk>");
  c.unk_id = unk != vocab.end() ? unk->get<int32_t>() : c.pad_id;
  model.source_vocabulary = model.target_vocabulary = pieces;
  model.source_tokenizer = read_whole_file((dir / "source.spm").string(), "the source SentencePiece model");
  model.target_tokenizer = read_whole_file((dir / "target.spm").string(), "the target SentencePiece model");

  // Weights.
  ForeignTensors weights =
      safetensors ? read_safetensors(weights_path.string()) : read_pytorch_bin(weights_path.string());
  auto take = [&](const std::string& name) -> ImportedTensor {
    const auto it = weights.find(name);
    if (it == weights.end()) throw Error(weights_path.string() + ": no tensor '" + name + "'");
    return {it->second.shape, it->second.values, name, {}, {}};
  };
  auto take_first = [&](const std::vector<std::string>& names) -> ImportedTensor {
    for (const std::string& name : names)
      if (weights.count(name)) return take(name);
    return take(names.front());
  };
  const bool shared = get_bool("share_encoder_decoder_embeddings", true);
  c.shared_embeddings = shared;
  c.tied_output = get_bool("tie_word_embeddings", true);
  if (shared) {
    model.tensors[param::source_embedding(c)] =
        take_first({"model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"});
  } else {
    model.tensors[param::source_embedding(c)] = take_first({"model.encoder.embed_tokens.weight", "model.shared.weight"});
    model.tensors[param::target_embedding(c)] = take_first({"model.decoder.embed_tokens.weight", "model.shared.weight"});
  }
  if (!c.tied_output) model.tensors[param::output_projection(c)] = take("lm_head.weight");
  ImportedTensor bias = take("final_logits_bias");
  bias.shape = {bias.values.size()};
  // generate() masks single-token bad_words_ids (OPUS-MT: the pad token) at every step: an
  // output bias of -inf does the same.
  // generate()'s defaults: generation_config.json, else config.json (as transformers reads them).
  const std::string generation_path = fs::exists(dir / "generation_config.json")
                                          ? (dir / "generation_config.json").string()
                                          : config_path;
  const json generation = generation_path == config_path ? config : read_json(generation_path, "generation_config.json");
  const auto bad_words = generation.find("bad_words_ids");
  if (bad_words != generation.end() && bad_words->is_array())
    for (const auto& words : *bad_words)
      if (words.is_array() && words.size() == 1 && words[0].is_number_integer()) {
        const int64_t id = words[0].get<int64_t>();
        if (id >= 0 && id < static_cast<int64_t>(bias.values.size()))
          bias.values[id] = -std::numeric_limits<float>::infinity();
      }
  model.tensors[schema::kOutputBias] = bias;

  auto linear = [&](const std::string& prefix, const std::string& xf_name, const std::vector<std::string>& parts) {
    std::vector<ImportedTensor> weights_of, biases_of;
    for (const std::string& part : parts) {
      weights_of.push_back(take(prefix + part + ".weight"));
      biases_of.push_back(take(prefix + part + ".bias"));
    }
    add_linear(model, xf_name, weights_of, biases_of);
  };
  auto norm = [&](const std::string& name, const std::string& xf_name) {
    model.tensors[xf_name + schema::kGamma] = take(name + ".weight");
    model.tensors[xf_name + schema::kBeta] = take(name + ".bias");
  };
  for (uint32_t i = 0; i < c.encoder_layers; ++i) {
    const std::string p = "model.encoder.layers." + std::to_string(i) + ".", x = param::encoder_layer(i);
    linear(p, x + schema::kSelfAttentionQkv.name, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"});
    linear(p, x + schema::kSelfAttentionOutput.name, {"self_attn.out_proj"});
    norm(p + "self_attn_layer_norm", x + schema::kSelfAttentionNorm.name);
    linear(p, x + schema::kFfnInner.name, {"fc1"});
    linear(p, x + schema::kFfnOuter.name, {"fc2"});
    norm(p + "final_layer_norm", x + schema::kFfnNorm.name);
  }
  for (uint32_t i = 0; i < c.decoder_layers; ++i) {
    const std::string p = "model.decoder.layers." + std::to_string(i) + ".", x = param::decoder_layer(i);
    linear(p, x + schema::kSelfAttentionQkv.name, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"});
    linear(p, x + schema::kSelfAttentionOutput.name, {"self_attn.out_proj"});
    norm(p + "self_attn_layer_norm", x + schema::kSelfAttentionNorm.name);
    linear(p, x + schema::kCrossAttentionQuery.name, {"encoder_attn.q_proj"});
    linear(p, x + schema::kCrossAttentionKeyValue.name, {"encoder_attn.k_proj", "encoder_attn.v_proj"});
    linear(p, x + schema::kCrossAttentionOutput.name, {"encoder_attn.out_proj"});
    norm(p + "encoder_attn_layer_norm", x + schema::kCrossAttentionNorm.name);
    linear(p, x + schema::kFfnInner.name, {"fc1"});
    linear(p, x + schema::kFfnOuter.name, {"fc2"});
    norm(p + "final_layer_norm", x + schema::kFfnNorm.name);
  }
  model.metadata = {{"imported_from", "huggingface-marian"},
                    {"imported_from.path", directory}};
  // generate()'s own settings, so that xf decodes as transformers does: num_beams (absent:
  // transformers' 1, and xf keeps its own default); length_penalty, score / length^alpha
  // (absent: transformers' 1.0); max_length, which counts the decoder start token;
  // no_repeat_ngram_size.
  const auto given = [&](const char* key) { return generation.contains(key) && !generation[key].is_null(); };
  const auto origin = [&](const char* key) { return generation_path + ": key '" + key + "'"; };
  if (given("num_beams"))
    set_decoding_beam(model, config_value<int64_t>(generation, generation_path, "num_beams"), origin("num_beams"));
  set_decoding_power_normalization(model, config_value<double>(generation, generation_path, "length_penalty", 1.0),
                                   origin("length_penalty"));
  if (given("max_length")) {
    const int64_t max_length = config_value<int64_t>(generation, generation_path, "max_length");
    if (max_length < 2)
      throw Error(origin("max_length") + " is " + std::to_string(max_length) +
                  ", not a length from 2 (it counts the decoder start token)");
    set_decoding_integer(model, "max_decoding_length", max_length - 1, 1, origin("max_length"));
  }
  if (given("no_repeat_ngram_size"))
    set_decoding_integer(model, "no_repeat_ngram_size",
                         config_value<int64_t>(generation, generation_path, "no_repeat_ngram_size"), 0,
                         origin("no_repeat_ngram_size"));
  write_imported_model(model, output, options);
}

}  // namespace xf::importers
