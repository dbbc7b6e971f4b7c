// xf-convert CHECKPOINT... -o MODEL.xfm [--dtype f32|f16|int8] [--metadata KEY=VALUE]...
//            [--target-vocabulary-from CORPUS]
// Averages the checkpoints (element-wise mean of their parameters) and writes a flat model file
// with the SentencePiece model and a training summary in its metadata; or rewrites one model
// file (another dtype, a pruned target vocabulary) keeping its metadata.
#include <filesystem>
#include <iostream>

#include "xf/error.h"
#include "xf/trainer/checkpoint.h"

namespace {

constexpr const char* kUsage =
    "usage: xf-convert CHECKPOINT... -o MODEL.xfm [--dtype f32|f16|int8] [--metadata KEY=VALUE]...\n"
    "Writes a flat model file from one training checkpoint directory, or from the average of\n"
    "several (same config and tokenizer). Matrices take --dtype (default f32); biases and\n"
    "LayerNorm stay f32. --metadata adds or replaces a metadata entry (repeatable).\n"
    "       xf-convert MODEL.xfm -o OUT.xfm [the same options]\n"
    "rewrites one model file, its metadata kept. --target-vocabulary-from CORPUS keeps on the\n"
    "target side only the pieces that CORPUS's target sentences use (give the training data,\n"
    "TSV or CSV): a smaller output layer, so faster decoding, and the same translations wherever\n"
    "the full model chose those pieces.\n";

// A model file as a checkpoint to rewrite: weights widened to f32, the shared tokenizer.
xf::trainer::Checkpoint checkpoint_from_model_file(const xf::ModelFile& file) {
  if (file.target_tokenizer() != file.source_tokenizer()) {
    throw xf::Error(file.path() + ": has its own target vocabulary already");
  }
  xf::trainer::Checkpoint checkpoint;
  checkpoint.config = file.config();
  checkpoint.parameters = xf::trainer::parameters_from_model_file(file);
  checkpoint.tokenizer_model = std::string(file.source_tokenizer());
  return checkpoint;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> checkpoints;
    std::string output;
    xf::DType dtype = xf::DType::f32;
    std::map<std::string, std::string> extra;
    std::string target_corpus;
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw xf::Error(arg + " needs a value");
        return argv[++i];
      };
      if (arg == "--help" || arg == "-h") {
        std::cout << kUsage;
        return 0;
      } else if (arg == "-o" || arg == "--output") {
        output = value();
      } else if (arg == "--dtype") {
        std::string name = value();
        if (name != "f32" && name != "f16" && name != "int8") {
          throw xf::Error("--dtype: '" + name + "' is not one of f32|f16|int8");
        }
        dtype = xf::parse_dtype(name);
      } else if (arg == "--target-vocabulary-from") {
        target_corpus = value();
      } else if (arg == "--metadata") {
        std::string entry = value();
        size_t eq = entry.find('=');
        if (eq == std::string::npos || eq == 0) {
          throw xf::Error("--metadata: expected KEY=VALUE, got '" + entry + "'");
        }
        extra[entry.substr(0, eq)] = entry.substr(eq + 1);
      } else if (arg.rfind("-", 0) == 0) {
        throw xf::Error("unknown option " + arg + " (see --help)");
      } else {
        checkpoints.push_back(arg);
      }
    }
    if (checkpoints.empty() || output.empty()) {
      std::cerr << kUsage;
      throw xf::Error("need at least one CHECKPOINT and -o MODEL.xfm");
    }
    xf::trainer::Checkpoint checkpoint;
    std::map<std::string, std::string> metadata;
    if (checkpoints.size() == 1 && std::filesystem::is_regular_file(checkpoints[0])) {
      std::cerr << "reading model file " << checkpoints[0] << "\n";
      auto file = xf::ModelFile::open(checkpoints[0]);
      checkpoint = checkpoint_from_model_file(*file);
      for (const auto& [key, value] : file->metadata()) metadata[key] = value;
      for (const auto& [key, value] : extra) metadata[key] = value;
    } else {
      std::vector<xf::trainer::Checkpoint> loaded;
      for (const auto& path : checkpoints) {
        std::cerr << "reading " << path << "\n";
        loaded.push_back(xf::trainer::read_checkpoint(path));
      }
      checkpoint = xf::trainer::average_checkpoints(loaded, checkpoints);
      loaded.clear();
      metadata = xf::trainer::model_metadata(checkpoint, checkpoints, extra);
    }
    std::string target_tokenizer;
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
    xf::trainer::write_model_file(checkpoint, dtype, metadata, output, target_tokenizer);
    std::cerr << "wrote " << output << " (" << xf::dtype_name(dtype) << ", "
              << checkpoint.parameters.size() << " parameters, " << checkpoints.size()
              << " input" << (checkpoints.size() > 1 ? "s averaged" : "") << ")\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "xf-convert: " << e.what() << "\n";
    return 1;
  }
}
