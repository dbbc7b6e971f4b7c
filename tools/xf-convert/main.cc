// xf-convert CHECKPOINT... -o MODEL.xfm [--dtype f32|f16|int8] [--layout rows|panels] [--metadata KEY=VALUE]...
//            [--target-vocabulary-from CORPUS] [--keep-encoder-layers LIST]
//            [--keep-decoder-layers LIST] [--shared-vocabulary]
// Averages the checkpoints (element-wise mean of their parameters, or weighted by --weights; model
// files may be among them) and writes a flat model file
// with the SentencePiece model and a training summary in its metadata; or rewrites one model
// file (another dtype, a pruned target vocabulary, fewer layers, the vocabulary shared again)
// keeping its metadata.
// xf-convert --from marian|hf PATH -o MODEL.xfm [--dtype ...] [--layout ...] [--metadata KEY=VALUE]...
// Imports a model made by Marian or Hugging Face transformers (importers/).
#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>

#include "../xf-run/translator_cli.h"
#include "tool_main.h"
#include "xf/error.h"
#include "xf/format/model_file.h"
#include "xf/format/schema.h"
#include "xf/kernels/matmul.h"  // kernel_weight_layout: what --layout panels writes
#include "xf/importers/importers.h"
#include "xf/model.h"
#include "xf/trainer/checkpoint.h"

namespace {

using xf::cli::UsageError;

constexpr const char* kUsage =
    "usage: xf-convert CHECKPOINT... -o MODEL.xfm [--dtype f32|f16|int8] [--layout rows|panels] [--metadata KEY=VALUE]...\n"
    "Writes a flat model file from one training checkpoint directory, or from the average of\n"
    "several (same config and tokenizer). Matrices take --dtype (default f32); biases and\n"
    "LayerNorm stay f32. --metadata adds or replaces a metadata entry (repeatable).\n"
    "--weights W,W,... (one positive number per input) averages with those weights instead,\n"
    "sum(w p) / sum(w): an interpolation of two models' weights (WiSE-FT). An input may also be a\n"
    "model file of the same config and tokenizer (its vocabulary shared again if pruned), such as\n"
    "the file a run started from (--init-from): e.g. INIT.xfm run/step-N --weights 1,2.\n"
    "       xf-convert MODEL.xfm -o OUT.xfm [the same options]\n"
    "rewrites one model file, its metadata kept. --target-vocabulary-from CORPUS keeps on the\n"
    "target side only the pieces that CORPUS's target sentences use (give the training data,\n"
    "TSV or CSV): a smaller output layer, so faster decoding, and the same translations wherever\n"
    "the full model chose those pieces. --keep-encoder-layers and --keep-decoder-layers LIST\n"
    "(ascending indices, \"0,1,3\") keep only those layers of a stack, renumbered from 0.\n"
    "--shared-vocabulary (a model file pruned by --target-vocabulary-from) makes its source\n"
    "vocabulary the shared one again, as before pruning, so that xf-train --init-from can\n"
    "continue it.\n"
    "--shortlist LEX stores a lexical shortlist in the file (Marian's text lex.s2t, as xf-shortlist\n"
    "writes it, read for the written vocabularies), pruned as Marian's --shortlist LEX FIRST BEST:\n"
    "--shortlist-first N (default 100) target ids always in, --shortlist-best K (default 100)\n"
    "candidates per source piece; the runtime then computes the output layer over those rows.\n"
    "--layout panels stores each layer's matrices (not the embeddings or the output layer) in the\n"
    "layout the CPU's matrix products read at this machine's instruction set (ONEDNN_MAX_CPU_ISA\n"
    "caps it), so that xf-run reads them where the file is mapped and copies nothing at load:\n"
    "int8 panels at AVX-512 VNNI, 7-bit panels at AVX-512 and AVX2, 7-bit rows at SSE4.1 and\n"
    "AVX; f32 panels at AVX2 and AVX-VNNI; rows elsewhere (format version 4, which xf before it\n"
    "refuses). A 7-bit file holds the weights those levels compute with (each int8 value halved,\n"
    "its row scale doubled): the same outputs there, AVX2's elsewhere. At another level xf-run\n"
    "lays the panels out as it needs (a copy, as for a rows file). --layout rows (the default)\n"
    "writes rows, also from a panels file.\n"
    "       xf-convert --from marian DIR|MODEL|CONFIG.yml -o MODEL.xfm [--dtype ...] [--layout ...] [--metadata KEY=VALUE]...\n"
    "       xf-convert --from hf DIR -o MODEL.xfm [--dtype ...] [--layout ...] [--metadata KEY=VALUE]...\n"
    "imports a Marian transformer (the .npz or Marian's binary .bin, or its folder with\n"
    "decoder.yml, the vocabulary .yml and source.spm/target.spm, as OPUS-MT publishes them, or a\n"
    "decoder config naming the model, the .spm vocabularies and a shortlist, as Firefox\n"
    "Translations does; with --dtype int8 an intgemm8 .bin keeps Marian's int8 values and an\n"
    "SSRU decoder and the shortlist are kept) or a Hugging Face MarianMTModel folder\n"
    "(config.json, model.safetensors or pytorch_model.bin, vocab.json, source.spm, target.spm;\n"
    "read without PyTorch): one .xfm that xf-run translates from text. The model's beam size\n"
    "(decoder.yml beam-size, num_beams) becomes its decoding.beam. What xf cannot compute is\n"
    "refused with one line naming the key. --metadata int8.arithmetic=marian-intgemm-avx2 (or\n"
    "-avx512bw, -avx512vnni: the intgemm kernel Marian runs on the CPU whose outputs you want)\n"
    "makes the CPU compute the int8 products as Marian's intgemm8 does (one activation scale a\n"
    "product, intgemm's sums: Marian's outputs, slower, and a sentence's depends on its batch;\n"
    "--max-batch 1 gives Marian's --mini-batch 1); int8.arithmetic=xf, the default, is xf's own.\n"
    "Before anything is written, the SentencePiece model(s) must load and hold as many pieces as\n"
    "the vocabulary. Progress on stderr. Exit status: 0 on success, 1 on bad input or a failed\n"
    "write, 2 on a bad command line.\n\n";

// "0,1,3" -> {0, 1, 3}; `option` names the flag in errors.
std::vector<int> parse_layer_list(const std::string& option, const std::string& text) {
  const std::vector<int64_t> layers = xf::cli::integer_list(
      text, 9999, option + ": '" + text + "' is not a list of layer indices like 0,1,3");
  return std::vector<int>(layers.begin(), layers.end());
}

// A model file averaged with checkpoints: its weights in f32 with one shared vocabulary, as a
// checkpoint of step 0 (a file pruned by --target-vocabulary-from is shared again first).
xf::trainer::Checkpoint averaging_input_from_model_file(const std::string& path) {
  auto file = xf::ModelFile::open(path);
  const bool pruned = file->target_tokenizer() != file->source_tokenizer();
  return pruned ? xf::trainer::checkpoint_with_shared_vocabulary(*file)
                : xf::trainer::checkpoint_from_model_file(*file);
}

int run(int argc, char** argv) {
  std::vector<std::string> checkpoints;
  std::string output;
  xf::DType dtype = xf::DType::f32;
  std::map<std::string, std::string> extra;
  std::string target_corpus;
  std::vector<int> encoder_layers, decoder_layers;
  bool shared_vocabulary = false;
  std::string import_from;
  std::string shortlist_path;
  xf::TextShortlistOptions shortlist_options;
  bool panels = false;
  std::vector<double> weights;  // --weights: one per input (empty: the plain mean)
  std::string weights_text;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&] { return xf::cli::option_value(argc, argv, i); };
    if (arg == "-o" || arg == "--output") {
      output = value();
    } else if (arg == "--dtype") {
      const std::string name = value();
      if (name != "f32" && name != "f16" && name != "int8") {
        throw UsageError{"--dtype: '" + name + "' is not one of f32|f16|int8"};
      }
      dtype = xf::parse_dtype(name);
    } else if (arg == "--layout") {
      const std::string name = value();
      if (name != "rows" && name != "panels") throw UsageError{"--layout: '" + name + "' is not one of rows|panels"};
      panels = name == "panels";
    } else if (arg == "--target-vocabulary-from") {
      target_corpus = value();
    } else if (arg == "--keep-encoder-layers") {
      encoder_layers = parse_layer_list(arg, value());
    } else if (arg == "--keep-decoder-layers") {
      decoder_layers = parse_layer_list(arg, value());
    } else if (arg == "--from") {
      import_from = value();
      if (import_from != "marian" && import_from != "hf")
        throw UsageError{"--from: '" + import_from + "' is not one of marian|hf"};
    } else if (arg == "--shortlist") {
      shortlist_path = value();
    } else if (arg == "--shortlist-first") {
      shortlist_options.first_num = static_cast<uint32_t>(xf::cli::parse_integer(arg, value(), 0, 1 << 24));
    } else if (arg == "--shortlist-best") {
      shortlist_options.best_num = static_cast<uint32_t>(xf::cli::parse_integer(arg, value(), 1, 1 << 24));
    } else if (arg == "--weights") {
      const std::string list = weights_text = value();
      weights.clear();
      size_t start = 0;
      while (start <= list.size()) {
        const size_t comma = std::min(list.find(',', start), list.size());
        weights.push_back(xf::cli::parse_positive_number(arg, list.substr(start, comma - start), 1e6f));
        start = comma + 1;
      }
    } else if (arg == "--shared-vocabulary") {
      shared_vocabulary = true;
    } else if (arg == "--metadata") {
      const std::string entry = value();
      const size_t eq = entry.find('=');
      if (eq == std::string::npos || eq == 0) {
        throw UsageError{"--metadata: expected KEY=VALUE, got '" + entry + "'"};
      }
      extra[entry.substr(0, eq)] = entry.substr(eq + 1);
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw xf::cli::unknown_option(arg);
    } else {
      checkpoints.push_back(arg);
    }
  }
  // decoding.* entries become the defaults of every translation with the model, int8.arithmetic
  // how its int8 products are computed: a bad one is refused here, not by the first program
  // that opens the file.
  xf::DecodingDefaults::from_metadata({extra.begin(), extra.end()});
  // Marian's arithmetic reads Marian's int8 values in rows: panels would be unpacked into a copy
  // at load, and 7-bit ones (AVX2, AVX-512 without VNNI) would no longer hold Marian's values.
  if (xf::int8_arithmetic_from_metadata({extra.begin(), extra.end()}) != xf::Int8Arithmetic::xf && panels)
    throw UsageError{"--layout panels and int8.arithmetic marian-intgemm-*: Marian's arithmetic reads the int8 "
                     "values in rows (give --layout rows)"};
  if (checkpoints.empty() || output.empty()) {
    throw UsageError{"need at least one CHECKPOINT and -o MODEL.xfm (try --help)"};
  }
  // --layout panels: the layers' own matrices (a table and the output layer are read by other
  // kernels too, in rows).
  const auto layer_matrix_layout = [](const std::string& name, xf::DType tensor_dtype) {
    const bool in_layer = name.rfind("encoder.layers.", 0) == 0 || name.rfind("decoder.layers.", 0) == 0;
    const std::string weight = xf::schema::kWeight;
    const bool matrix = name.size() > weight.size() && name.compare(name.size() - weight.size(), weight.size(), weight) == 0;
    return in_layer && matrix ? xf::cpu::kernel_weight_layout(tensor_dtype) : xf::WeightLayout::rows;
  };
  using LayoutOf = std::function<xf::WeightLayout(const std::string&, xf::DType)>;
  if (!import_from.empty()) {
    if (checkpoints.size() != 1)
      throw UsageError{"--from " + import_from + ": give one model (a folder or .npz), not " +
                       std::to_string(checkpoints.size())};
    if (!target_corpus.empty() || shared_vocabulary || !encoder_layers.empty() || !decoder_layers.empty() ||
        !shortlist_path.empty())
      throw UsageError{"--from takes only -o, --dtype, --layout and --metadata"};
    const xf::importers::ImportOptions options{dtype, extra, panels ? LayoutOf(layer_matrix_layout) : nullptr};
    std::cerr << "importing " << checkpoints[0] << " (" << import_from << ")\n";
    if (import_from == "hf")
      xf::importers::import_hugging_face(checkpoints[0], output, options);
    else
      xf::importers::import_marian(checkpoints[0], output, options);
    std::cerr << "wrote " << output << " (" << xf::dtype_name(dtype) << ")\n";
    return 0;
  }
  xf::trainer::Checkpoint checkpoint;
  std::string target_tokenizer;  // a pruned file's own (empty: the vocabulary is shared)
  std::map<std::string, std::string> metadata;
  if (!weights.empty() && weights.size() != checkpoints.size()) {
    throw UsageError{"--weights: " + std::to_string(weights.size()) + " given for " +
                     std::to_string(checkpoints.size()) + " inputs (one per input)"};
  }
  const bool from_model_file =
      checkpoints.size() == 1 && weights.empty() && std::filesystem::is_regular_file(checkpoints[0]);
  if (shared_vocabulary && !from_model_file) {
    throw xf::Error("--shared-vocabulary: give one model file (checkpoints share it already)");
  }
  if (shared_vocabulary && !target_corpus.empty()) {
    throw xf::Error("--shared-vocabulary and --target-vocabulary-from undo each other");
  }
  if (from_model_file) {
    std::cerr << "reading model file " << checkpoints[0] << "\n";
    auto file = xf::ModelFile::open(checkpoints[0]);
    checkpoint = shared_vocabulary ? xf::trainer::checkpoint_with_shared_vocabulary(*file)
                                   : xf::trainer::checkpoint_from_model_file(*file, &target_tokenizer);
    if (!target_tokenizer.empty() && !target_corpus.empty()) {
      throw xf::Error(checkpoints[0] + ": --target-vocabulary-from: the file's target vocabulary is "
                      "pruned already (prune a file with one shared vocabulary)");
    }
    for (const auto& [key, value] : file->metadata()) {
      // A vocabulary shared again has no pruning to describe.
      if (!(shared_vocabulary && key.rfind("target_vocabulary.", 0) == 0)) metadata[key] = value;
    }
    for (const auto& [key, value] : extra) metadata[key] = value;
  } else {
    std::vector<xf::trainer::Checkpoint> loaded;
    for (const auto& path : checkpoints) {
      std::cerr << "reading " << path << "\n";
      loaded.push_back(std::filesystem::is_regular_file(path) ? averaging_input_from_model_file(path)
                                                              : xf::trainer::read_checkpoint(path));
    }
    checkpoint = xf::trainer::average_checkpoints(loaded, checkpoints, weights);
    loaded.clear();
    std::map<std::string, std::string> with_weights = extra;
    if (!weights.empty()) with_weights.emplace("training.weights", weights_text);  // a given entry wins
    metadata = xf::trainer::model_metadata(checkpoint, checkpoints, with_weights);
  }
  xf::trainer::check_tokenizers(checkpoint, target_tokenizer, checkpoints[0]);
  if (!encoder_layers.empty() || !decoder_layers.empty()) {
    checkpoint = xf::trainer::keep_layers(checkpoint, encoder_layers, decoder_layers);
    std::cerr << "kept " << checkpoint.config.encoder_layers << " encoder and "
              << checkpoint.config.decoder_layers << " decoder layers\n";
  }
  if (!target_corpus.empty()) {
    xf::trainer::CorpusLanguages languages;
    auto language = [&](const char* key, const std::string& fallback) {
      auto it = metadata.find(key);
      return it == metadata.end() || it->second.empty() ? fallback : it->second;
    };
    languages.source = language("source_language", languages.source);
    languages.target = language("target_language", languages.target);
    auto tokenizer =
        xf::trainer::Tokenizer::from_model_proto(checkpoint.tokenizer_model, "model");
    const auto kept = xf::trainer::target_pieces_used(
        xf::trainer::read_parallel_corpus(target_corpus, languages), tokenizer);
    std::cerr << "target vocabulary: " << kept.size() << " of " << tokenizer.vocab_size()
              << " pieces (those the targets of " << target_corpus << " use)\n";
    metadata["target_vocabulary.kept"] =
        std::to_string(kept.size()) + " of " + std::to_string(tokenizer.vocab_size());
    metadata["target_vocabulary.from"] = target_corpus;
    for (const auto& [key, value] : extra) metadata[key] = value;  // given ones win
    auto pruned = xf::trainer::prune_target_vocabulary(checkpoint, kept);
    checkpoint = std::move(pruned.checkpoint);
    target_tokenizer = std::move(pruned.target_tokenizer);
  }
  std::optional<xf::LexicalShortlist> shortlist;
  if (!shortlist_path.empty()) {
    shortlist = xf::trainer::read_shortlist_for(checkpoint, target_tokenizer, shortlist_path, shortlist_options);
    std::cerr << "shortlist: " << shortlist->targets.size() << " candidates of " << shortlist->source_ids()
              << " source ids, the first " << shortlist->first_num << " target ids always in\n";
  }
  xf::trainer::write_model_file(checkpoint, dtype, metadata, output, target_tokenizer,
                                shortlist ? &*shortlist : nullptr, panels ? LayoutOf(layer_matrix_layout) : nullptr);
  std::cerr << "wrote " << output << " (" << xf::dtype_name(dtype) << ", "
            << checkpoint.parameters.size() << " parameters, " << checkpoints.size()
            << " input" << (checkpoints.size() > 1 ? "s averaged" : "") << ")\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return xf::cli::tool_main("xf-convert", kUsage, argc, argv, run); }
