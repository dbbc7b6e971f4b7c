// Marian's transformer (src/models/transformer.h): linear maps stored [in, out], q/k/v separate,
// layer norms after each sub-layer (postprocess "dan") or before it (preprocess "n": names end
// in "_pre", and a final "_top" norm on each stack) with epsilon 1e-6, sinusoids of sines then
// cosines at Marian's own frequencies,
// the decoder's first input a zero vector, a joint or per-side vocabulary .yml over SentencePiece
// pieces (or the .spm itself).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <sentencepiece_processor.h>

#include "foreign_tensors.h"
#include "imported_model.h"
#include "xf/error.h"
#include "xf/format/parameters.h"
#include "xf/format/schema.h"
#include "xf/format/shortlist.h"
#include "xf/importers/importers.h"

namespace xf::importers {
namespace {

namespace fs = std::filesystem;

YAML::Node parse_yaml(const std::string& text, const std::string& label) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error(label + ": not valid YAML (" + e.msg + ")");
  }
}

// Where the files are: the model, its vocabularies (source, target) and tokenizers.
struct MarianFiles {
  fs::path model;
  fs::path source_vocabulary, target_vocabulary;
  fs::path source_spm, target_spm;
  // decoder.yml's beam-size, the beam marian-decoder translates with (the training config
  // embedded in the .npz has one too, for validation only: Marian does not decode with it).
  std::optional<int64_t> beam_size;
  std::string beam_size_origin;
  // decoder.yml's normalize: marian-decoder divides a score by length^normalize (default 0).
  double normalize = 0.0;
  std::string normalize_origin = "Marian's default normalize";
  // decoder.yml's allow-unk: marian-decoder never outputs <unk> unless it is true (default false).
  bool allow_unk = false;
  // decoder.yml's shortlist: the file, then (a text one) Marian's first, best and threshold.
  std::vector<std::string> shortlist;
  std::string shortlist_origin;
};

fs::path existing(const fs::path& path, const std::string& what) {
  if (!fs::exists(path)) throw Error(path.string() + ": missing " + what);
  return path;
}

MarianFiles locate(const std::string& input) {
  const fs::path given(input);
  if (!fs::exists(given)) throw Error(input + ": no such file or directory");
  MarianFiles files;
  const fs::path dir = fs::is_directory(given) ? given : given.parent_path().empty() ? fs::path(".") : given.parent_path();
  // decoder.yml names the model and the vocabularies (relative to its folder).
  // (or the config given itself: Firefox Translations ships config.intgemm8bit.yml and the like).
  std::optional<fs::path> decoder_yml;
  const bool config_given = given.extension() == ".yml" && fs::is_regular_file(given);
  for (const fs::path& candidate : {config_given ? given : fs::path(input + ".decoder.yml"), dir / "decoder.yml"})
    if (fs::is_regular_file(candidate)) {
      decoder_yml = candidate;
      break;
    }
  std::vector<fs::path> vocabularies;
  if (decoder_yml) {
    const YAML::Node yml = parse_yaml(read_whole_file(decoder_yml->string(), "decoder.yml"), decoder_yml->string());
    try {
      if (!fs::is_directory(given) && !config_given) {
        files.model = given;
      } else if (yml["models"] && yml["models"].size() > 0) {
        files.model = dir / fs::path(yml["models"][0].as<std::string>()).filename();
      }
      if (yml["vocabs"])
        for (const auto& v : yml["vocabs"]) vocabularies.push_back(dir / fs::path(v.as<std::string>()).filename());
    } catch (const YAML::Exception& e) {
      throw Error(decoder_yml->string() + ": malformed 'models' or 'vocabs' (" + e.msg + ")");
    }
    if (yml["shortlist"] && !yml["shortlist"].IsNull()) {
      files.shortlist_origin = decoder_yml->string() + ": key 'shortlist'";
      try {
        if (yml["shortlist"].IsSequence())
          for (const auto& v : yml["shortlist"]) files.shortlist.push_back(v.as<std::string>());
        else
          files.shortlist.push_back(yml["shortlist"].as<std::string>());
      } catch (const YAML::Exception&) {
        throw Error(files.shortlist_origin + " is not a list of scalars");
      }
      if (files.shortlist.empty()) throw Error(files.shortlist_origin + " names no file");
      files.shortlist[0] = (dir / fs::path(files.shortlist[0]).filename()).string();
    }
    files.beam_size_origin = decoder_yml->string() + ": key 'beam-size'";
    if (yml["beam-size"] && !yml["beam-size"].IsNull()) try {
        files.beam_size = yml["beam-size"].as<int64_t>();
      } catch (const YAML::Exception&) {
        throw Error(files.beam_size_origin + " is not an integer");
      }
    if (yml["allow-unk"] && !yml["allow-unk"].IsNull()) try {
        files.allow_unk = yml["allow-unk"].as<bool>();
      } catch (const YAML::Exception&) {
        throw Error(decoder_yml->string() + ": key 'allow-unk' is not true or false");
      }
    if (yml["normalize"] && !yml["normalize"].IsNull()) {
      files.normalize_origin = decoder_yml->string() + ": key 'normalize'";
      try {
        files.normalize = yml["normalize"].as<double>();
      } catch (const YAML::Exception&) {
        throw Error(files.normalize_origin + " is not a number");
      }
    }
  } else if (!fs::is_directory(given)) {
    files.model = given;
  }
  if (files.model.empty()) throw Error(input + ": no decoder.yml naming the model (give the .npz or .bin)");
  existing(files.model, "model (.npz or .bin)");
  if (vocabularies.empty()) {
    // The usual names beside the model.
    if (fs::exists(dir / "vocab.src.yml") || fs::exists(dir / "vocab.trg.yml"))
      vocabularies = {dir / "vocab.src.yml", dir / "vocab.trg.yml"};
    else
      vocabularies = {dir / "vocab.yml", dir / "vocab.yml"};
  }
  if (vocabularies.size() != 2)
    throw Error((decoder_yml ? decoder_yml->string() : input) + ": 'vocabs' lists " +
                std::to_string(vocabularies.size()) + " vocabularies (source and target expected)");
  files.source_vocabulary = existing(vocabularies[0], "vocabulary (decoder.yml 'vocabs')");
  files.target_vocabulary = existing(vocabularies[1], "vocabulary (decoder.yml 'vocabs')");
  auto spm_for = [&](const fs::path& vocabulary, const char* usual) {
    return vocabulary.extension() == ".spm" ? vocabulary : existing(dir / usual, std::string("SentencePiece model"));
  };
  files.source_spm = spm_for(files.source_vocabulary, "source.spm");
  files.target_spm = spm_for(files.target_vocabulary, "target.spm");
  return files;
}

// A vocabulary: a .yml (or .json) mapping each piece to the model's id, or a SentencePiece model
// whose ids are the model's (then `pieces` stays empty).
struct Vocabulary {
  std::vector<std::string> pieces;  // the piece of each id; empty for an .spm
  std::string spm;                  // the SentencePiece model proto
  int32_t size = 0, eos_id = -1, unk_id = -1;
};

Vocabulary read_vocabulary(const fs::path& path, const fs::path& spm_path) {
  Vocabulary v;
  v.spm = read_whole_file(spm_path.string(), "the SentencePiece model");
  if (path.extension() == ".spm") {
    sentencepiece::SentencePieceProcessor processor;
    if (!processor.LoadFromSerializedProto(v.spm).ok())
      throw Error(spm_path.string() + ": not a SentencePiece model");
    v.size = processor.GetPieceSize();
    v.eos_id = processor.PieceToId("</s>");
    v.unk_id = processor.unk_id();
    return v;
  }
  const YAML::Node yml = parse_yaml(read_whole_file(path.string(), "the vocabulary"), path.string());
  if (!yml.IsMap() || yml.size() == 0) throw Error(path.string() + ": not a piece -> id map");
  v.pieces.resize(yml.size());
  for (const auto& entry : yml) {
    std::string piece;
    int64_t id = -1;
    try {
      piece = entry.first.as<std::string>();
      id = entry.second.as<int64_t>();
    } catch (const YAML::Exception&) {
      throw Error(path.string() + ": an entry is not piece: id");
    }
    if (id < 0 || id >= static_cast<int64_t>(v.pieces.size()) || !v.pieces[id].empty())
      throw Error(path.string() + ": the ids are not 0.." + std::to_string(v.pieces.size() - 1) +
                  " each once (piece '" + piece + "')");
    v.pieces[id] = piece;
  }
  v.size = static_cast<int32_t>(v.pieces.size());
  for (int32_t id = 0; id < v.size; ++id) {
    if (v.pieces[id] == "</s>") v.eos_id = id;
    if (v.pieces[id] == "<unk>") v.unk_id = id;
  }
  if (v.eos_id < 0 || v.unk_id < 0) throw Error(path.string() + ": the vocabulary lacks </s> or <unk>");
  return v;
}

// A piece's id in `v` (an unknown piece: <unk>'s, as Marian's vocabularies give it).
std::function<uint32_t(std::string_view)> id_of(const Vocabulary& v) {
  if (v.pieces.empty()) {
    auto processor = std::make_shared<sentencepiece::SentencePieceProcessor>();
    if (!processor->LoadFromSerializedProto(v.spm).ok()) throw Error("internal: the SentencePiece model does not load");
    return [processor](std::string_view piece) { return static_cast<uint32_t>(processor->PieceToId(piece)); };
  }
  auto ids = std::make_shared<std::map<std::string, uint32_t, std::less<>>>();
  for (size_t id = 0; id < v.pieces.size(); ++id) ids->emplace(v.pieces[id], static_cast<uint32_t>(id));
  const auto unk = static_cast<uint32_t>(v.unk_id);
  return [ids, unk](std::string_view piece) {
    const auto it = ids->find(piece);
    return it == ids->end() ? unk : it->second;
  };
}

// decoder.yml's shortlist: Marian's binary one (marian-conv's lex.*.s2t.bin; its further values
// only ask Marian to check it, which reading it here does), or its text one (extract_lex's
// "target source probability" lines) pruned as Marian prunes it: `shortlist: [FILE, FIRST, BEST,
// THRESHOLD]`, Marian's defaults 100, 100, 0.
LexicalShortlist read_marian_shortlist(const MarianFiles& files, const Vocabulary& source, const Vocabulary& target) {
  const std::string& path = existing(files.shortlist[0], "shortlist (" + files.shortlist_origin + ")").string();
  if (is_binary_shortlist(path)) return read_binary_shortlist(path);
  TextShortlistOptions options;
  auto value = [&](size_t i, auto parse) {
    try {
      size_t used = 0;
      const auto parsed = parse(files.shortlist[i], &used);
      if (used != files.shortlist[i].size() || parsed < 0) throw std::invalid_argument("");
      return parsed;
    } catch (const std::exception&) {
      throw Error(files.shortlist_origin + ": '" + files.shortlist[i] + "' is not a non-negative number");
    }
  };
  auto integer = [](const std::string& t, size_t* used) { return std::stoll(t, used); };
  auto real = [](const std::string& t, size_t* used) { return std::stof(t, used); };
  if (files.shortlist.size() > 1) options.first_num = static_cast<uint32_t>(value(1, integer));
  if (files.shortlist.size() > 2) options.best_num = static_cast<uint32_t>(value(2, integer));
  if (files.shortlist.size() > 3) options.threshold = value(3, real);
  return read_text_shortlist(path, id_of(source), id_of(target), static_cast<uint32_t>(source.size), options);
}

}  // namespace

void import_marian(const std::string& input, const std::string& output, const ImportOptions& options) {
  const MarianFiles files = locate(input);
  const std::string npz = files.model.string();  // the .npz or Marian's binary .bin
  ForeignTensors weights = files.model.extension() == ".bin" ? read_marian_bin(npz) : read_npz(npz);
  const auto yml_item = weights.find("special:model.yml");
  if (yml_item == weights.end() || yml_item->second.bytes.empty())
    throw Error(npz + ": no special:model.yml (not a Marian model)");
  std::string yml_text = yml_item->second.bytes;
  yml_text.erase(std::find(yml_text.begin(), yml_text.end(), '\0'), yml_text.end());
  const YAML::Node yml = parse_yaml(yml_text, npz + ": special:model.yml");
  const std::string label = npz + ": special:model.yml";

  // Each key the importer reads, with what it must be where xf cannot compute the alternative.
  auto text = [&](const char* key, const std::string& fallback) {
    const YAML::Node node = yml[key];
    if (!node || node.IsNull()) return fallback;
    try {
      return node.as<std::string>();
    } catch (const YAML::Exception&) {
      throw Error(label + ": key '" + key + "' is not a scalar");
    }
  };
  auto number = [&](const char* key, int64_t fallback) {
    const std::string value = text(key, std::to_string(fallback));
    try {
      return static_cast<int64_t>(std::stoll(value));
    } catch (const std::exception&) {
      throw Error(label + ": key '" + key + "' is '" + value + "', not a number");
    }
  };
  auto flag = [&](const char* key) {
    const std::string value = text(key, "false");
    return value == "true" || value == "1";
  };
  auto refuse_unless = [&](bool ok, const char* key, const std::string& value, const char* supported) {
    if (!ok) throw Error(label + ": " + key + ": " + (value.empty() ? "\"\"" : value) + " is not supported (" + supported + ")");
  };
  const std::string type = text("type", "");
  refuse_unless(type == "transformer", "type", type, "transformer only");
  // The decoder layers' first sub-layer: self-attention, or (Firefox Translations' students)
  // Marian's SSRU, a recurrent cell without its own layer norm.
  const std::string autoreg = text("transformer-decoder-autoreg", "self-attention");
  refuse_unless(autoreg == "self-attention" || autoreg == "rnn", "transformer-decoder-autoreg", autoreg,
                "self-attention, or rnn with dec-cell ssru");
  const bool ssru = autoreg == "rnn";
  if (ssru) {
    const std::string cell = text("dec-cell", "gru");
    refuse_unless(cell == "ssru", "dec-cell", cell, "ssru with transformer-decoder-autoreg rnn");
    refuse_unless(!flag("layer-normalization"), "layer-normalization", "true", "false with an SSRU decoder");
  }
  const std::string activation = text("transformer-ffn-activation", "swish");
  refuse_unless(activation == "swish" || activation == "relu", "transformer-ffn-activation", activation, "swish or relu");
  const std::string preprocess = text("transformer-preprocess", ""), postprocess = text("transformer-postprocess", "dan"),
                    top = text("transformer-postprocess-top", ""), emb = text("transformer-postprocess-emb", "d");
  // Post-norm ("", "dan", "") or pre-norm ("n", "da", "n": a final layer norm on each stack), the
  // two layouts Marian's transformers are trained in; dropout ("d") does nothing at inference.
  const bool pre_norm = preprocess == "n";
  refuse_unless(!(ssru && pre_norm), "transformer-preprocess", preprocess, "\"\" (post-norm) with an SSRU decoder");
  refuse_unless(pre_norm || preprocess == "" || preprocess == "d", "transformer-preprocess", preprocess,
                "\"\" (post-norm) or n (pre-norm)");
  refuse_unless(postprocess == (pre_norm ? "da" : "dan"), "transformer-postprocess", postprocess,
                pre_norm ? "da with transformer-preprocess n" : "dan with transformer-preprocess \"\"");
  refuse_unless(top == (pre_norm ? "n" : ""), "transformer-postprocess-top", top,
                pre_norm ? "n with transformer-preprocess n" : "\"\" with transformer-preprocess \"\"");
  refuse_unless(emb.find('n') == std::string::npos, "transformer-postprocess-emb", emb, "no layer norm on embeddings");
  refuse_unless(number("transformer-ffn-depth", 2) == 2, "transformer-ffn-depth", text("transformer-ffn-depth", "2"), "2");
  const int64_t decoder_ffn_depth = number("transformer-decoder-ffn-depth", 0);
  refuse_unless(decoder_ffn_depth == 0 || decoder_ffn_depth == 2, "transformer-decoder-ffn-depth",
                std::to_string(decoder_ffn_depth), "0 or 2");
  const int64_t dim_ffn = number("transformer-dim-ffn", 2048), decoder_dim_ffn = number("transformer-decoder-dim-ffn", 0);
  refuse_unless(decoder_dim_ffn == 0 || decoder_dim_ffn == dim_ffn, "transformer-decoder-dim-ffn",
                std::to_string(decoder_dim_ffn), "0 or transformer-dim-ffn");
  for (const char* key : {"transformer-no-projection", "transformer-no-bias", "transformer-no-affine",
                          "transformer-train-position-embeddings", "transformer-disable-position-embeddings",
                          "transformer-alibi-shift", "transformer-alibi-trainable", "transformer-pool", "right-left",
                          "ulr", "output-omit-bias"})
    refuse_unless(!flag(key), key, "true", "false only");
  refuse_unless(number("factors-dim-emb", 0) == 0, "factors-dim-emb", text("factors-dim-emb", "0"), "0: no factors");
  refuse_unless(number("lemma-dim-emb", 0) == 0, "lemma-dim-emb", text("lemma-dim-emb", "0"), "0");
  const std::string mask = text("transformer-attention-mask", "default");
  refuse_unless(mask == "default", "transformer-attention-mask", mask, "default");
  if (yml["transformer-tied-layers"] && yml["transformer-tied-layers"].size() > 0)
    refuse_unless(false, "transformer-tied-layers", "a list", "[]");

  ImportedModel model;
  ModelConfig& c = model.config;
  c.d_model = static_cast<uint32_t>(number("dim-emb", 512));
  c.num_heads = static_cast<uint32_t>(number("transformer-heads", 8));
  c.d_ff = static_cast<uint32_t>(dim_ffn);
  c.encoder_layers = static_cast<uint32_t>(number("enc-depth", 6));
  c.decoder_layers = static_cast<uint32_t>(number("dec-depth", 6));
  c.max_positions = 1024;
  c.norm_position = pre_norm ? NormPosition::pre : NormPosition::post;
  c.activation = activation == "relu" ? Activation::relu : Activation::swish;
  c.layer_norm_epsilon = 1e-6f;
  c.scale_embeddings = true;
  c.position_encoding = PositionEncoding::marian_sin_then_cos;
  c.zero_start_embedding = true;
  c.output_bias = true;
  c.decoder_layer_kind = ssru ? DecoderLayerKind::ssru : DecoderLayerKind::self_attention;

  const Vocabulary source = read_vocabulary(files.source_vocabulary, files.source_spm);
  const Vocabulary target = read_vocabulary(files.target_vocabulary, files.target_spm);
  if (source.eos_id != target.eos_id || source.unk_id != target.unk_id)
    throw Error(files.target_vocabulary.string() + ": </s> and <unk> have other ids than in the source vocabulary");
  c.source_vocab_size = static_cast<uint32_t>(source.size);
  c.target_vocab_size = static_cast<uint32_t>(target.size);
  c.eos_id = source.eos_id;
  c.unk_id = source.unk_id;
  c.pad_id = c.bos_id = source.unk_id;  // Marian has neither: pad is masked, the start is a zero vector
  model.source_vocabulary = source.pieces;
  model.target_vocabulary = target.pieces;
  if (source.pieces.empty() != target.pieces.empty())
    throw Error(input + ": one vocabulary is a .yml and the other an .spm (both of one kind are imported)");
  model.source_tokenizer = source.spm;
  model.target_tokenizer = target.spm;
  if (!files.shortlist.empty()) model.shortlist = read_marian_shortlist(files, source, target);

  // Weights: [in, out] matrices transposed, [1, n] rows flattened.
  auto take = [&](const std::string& name, bool transpose) -> ImportedTensor {
    const auto it = weights.find(name);
    if (it == weights.end() || it->second.values.empty()) throw Error(npz + ": no float tensor '" + name + "'");
    const ForeignTensor& original = it->second;
    ImportedTensor t{original.shape, original.values, name, {}, {}};
    if (t.shape.size() == 2 && t.shape[0] == 1) t.shape = {t.shape[1]};
    if (transpose) {
      if (t.shape.size() != 2) throw Error(npz + ": tensor '" + name + "' is not a matrix");
      t.values = transposed(t.values, t.shape[0], t.shape[1]);
      std::swap(t.shape[0], t.shape[1]);
      if (original.intgemm8_multiplier > 0) {  // its bytes are already the transposed rows
        t.int8_values.assign(original.bytes.begin(), original.bytes.end());
        t.int8_row_scales.assign(t.shape[0], 1.0f / original.intgemm8_multiplier);
      }
    }
    return t;
  };
  const bool tied_all = flag("tied-embeddings-all"), tied_src = flag("tied-embeddings-src"),
             tied_output = flag("tied-embeddings") || tied_all;
  c.shared_embeddings = tied_all || tied_src;
  c.tied_output = tied_output;
  if (c.shared_embeddings) {
    if (source.pieces != target.pieces || c.source_vocab_size != c.target_vocab_size)
      throw Error(label + ": tied-embeddings-all/src needs one vocabulary for both sides");
    model.tensors[param::source_embedding(c)] = take("Wemb", false);
  } else {
    model.tensors[param::source_embedding(c)] = take("encoder_Wemb", false);
    model.tensors[param::target_embedding(c)] = take("decoder_Wemb", false);
  }
  if (!c.tied_output)
    model.tensors[param::output_projection(c)] =
        weights.count("decoder_ff_logit_out_Wt") ? take("decoder_ff_logit_out_Wt", false)
                                                 : take("decoder_ff_logit_out_W", true);
  model.tensors[schema::kOutputBias] = take("decoder_ff_logit_out_b", false);

  auto linear = [&](const std::string& prefix, const std::string& xf_name, const std::vector<std::string>& parts) {
    std::vector<ImportedTensor> weights_of, biases_of;
    for (const std::string& part : parts) {
      weights_of.push_back(take(prefix + "_W" + part, true));  // [in, out]
      biases_of.push_back(take(prefix + "_b" + part, false));
    }
    add_linear(model, xf_name, weights_of, biases_of);
  };
  // Marian names a layer norm applied before its sub-layer "..._pre".
  auto norm = [&](const std::string& prefix, const std::string& xf_name, const char* suffix) {
    model.tensors[xf_name + schema::kGamma] = take(prefix + "_ln_scale" + suffix, false);
    model.tensors[xf_name + schema::kBeta] = take(prefix + "_ln_bias" + suffix, false);
  };
  const char* layer_norm_suffix = pre_norm ? "_pre" : "";
  auto self_attention = [&](const std::string& p, const std::string& x) {
    linear(p + "_self", x + schema::kSelfAttentionQkv.name, {"q", "k", "v"});
    linear(p + "_self", x + schema::kSelfAttentionOutput.name, {"o"});
    norm(p + "_self_Wo", x + schema::kSelfAttentionNorm.name, layer_norm_suffix);
  };
  auto ffn = [&](const std::string& p, const std::string& x) {
    linear(p + "_ffn", x + schema::kFfnInner.name, {"1"});
    linear(p + "_ffn", x + schema::kFfnOuter.name, {"2"});
    norm(p + "_ffn_ffn", x + schema::kFfnNorm.name, layer_norm_suffix);
  };
  // Marian's SSRU (rnn/cells.h): the candidate x W (no bias) and the forget gate x Wf + bf, one
  // fused product in xf; its post-norm is named after the layer's "_ffn" post-processing.
  auto ssru_layer = [&](const std::string& p, const std::string& x) {
    const ImportedTensor candidate = take(p + "_rnn_W", true);
    const ImportedTensor no_bias{{candidate.shape[0]}, std::vector<float>(candidate.shape[0], 0.0f),
                                 p + "_rnn_W's bias (none: 0)", {}, {}};
    add_linear(model, x + schema::kSsruInputForget.name, {candidate, take(p + "_rnn_Wf", true)},
               {no_bias, take(p + "_rnn_bf", false)});
    norm(p + "_rnn_ffn", x + schema::kSsruNorm.name, "");
  };
  for (uint32_t i = 0; i < c.encoder_layers; ++i) {
    self_attention("encoder_l" + std::to_string(i + 1), param::encoder_layer(i));
    ffn("encoder_l" + std::to_string(i + 1), param::encoder_layer(i));
  }
  for (uint32_t i = 0; i < c.decoder_layers; ++i) {
    const std::string p = "decoder_l" + std::to_string(i + 1), x = param::decoder_layer(i);
    if (ssru)
      ssru_layer(p, x);
    else
      self_attention(p, x);
    ffn(p, x);
    linear(p + "_context", x + schema::kCrossAttentionQuery.name, {"q"});
    linear(p + "_context", x + schema::kCrossAttentionKeyValue.name, {"k", "v"});
    linear(p + "_context", x + schema::kCrossAttentionOutput.name, {"o"});
    norm(p + "_context_Wo", x + schema::kCrossAttentionNorm.name, layer_norm_suffix);
  }
  if (pre_norm) {
    norm("encoder_top", schema::kEncoderFinalNorm.name, "");
    norm("decoder_top", schema::kDecoderFinalNorm.name, "");
  }
  model.metadata = {{"imported_from", "marian"}, {"imported_from.path", input},
                    {"imported_from.version", text("version", "")}};
  // marian-decoder's beam, normalize and allow-unk (its max-length-factor is the Translator's max_len_a,
  // not a setting an .xfm stores).
  if (files.beam_size) set_decoding_beam(model, *files.beam_size, files.beam_size_origin);
  set_decoding_power_normalization(model, files.normalize, files.normalize_origin);
  model.metadata["decoding.allow_unk"] = files.allow_unk ? "1" : "0";
  write_imported_model(model, output, options);
}

}  // namespace xf::importers
