// xf-inspect MODEL.xfm: prints the format version, config, metadata, decoding defaults,
// tokenizers and the tensor table of a flat model file. A file xf-run would refuse (the reader,
// its tokenizers, its decoding.* entries) gives one line on stderr, exit 1.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "tool_main.h"
#include "xf/error.h"
#include "xf/format/model_file.h"
#include "xf/model.h"

namespace {

constexpr const char* kUsage =
    "usage: xf-inspect MODEL.xfm\n"
    "Validates a flat model file (.xfm) as xf-run opens it: the format, each SentencePiece\n"
    "model (it must load and hold as many pieces as its vocabulary) and the decoding.* entries.\n"
    "Prints its format version, config, metadata, the decoding defaults (the model's decoding.*\n"
    "metadata, else xf's), tokenizers (bytes and pieces) and tensor table (name, dtype, shape,\n"
    "bytes, and for a matrix stored in another layout than rows \"in panels\", \"in 7-bit\n"
    "panels\" or \"in 7-bit rows\": format version 4, xf-convert --layout panels) with the total.\n"
    "Exit status: 0 when the file is valid, 1 when it is not (one line on stderr saying why) or\n"
    "when the output cannot be written, 2 on a bad command line.\n\n";

std::string shape_string(const xf::TensorView& t) {
  std::string s = "[";
  for (uint32_t i = 0; i < t.rank; ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
  return s + "]";
}

// The checkpoint's key=value text of each field (flags 0/1, norm_position pre/post).
void print_config(const xf::ModelConfig& config) {
  std::printf("config\n");
  for (const auto& [name, value] : xf::config_to_text(config)) {
    std::printf("  %-20s %s\n", name.c_str(), value.c_str());
  }
}

void print_model(const xf::Model& checked) {
  const xf::ModelFile& model = checked.file();
  std::printf("file %s (%zu bytes)\n", model.path().c_str(), model.file_size());
  std::printf("format version %u\n", model.format_version());
  print_config(model.config());

  std::printf("metadata\n");
  if (model.metadata().empty()) std::printf("  (none)\n");
  for (const auto& [key, value] : model.metadata()) {
    std::printf("  %-20s %s\n", key.c_str(), value.c_str());
  }

  // The settings every translation with the model starts from (an option given explicitly wins).
  const xf::DecodingDefaults& decoding = checked.decoding_defaults();  // checked at open
  std::printf("decoding defaults\n");
  for (const auto& [name, value] : decoding.to_text())
    std::printf("  %-20s %-8s %s\n", name.c_str(), value.c_str(),
                decoding.set_by_model(name) ? ("(the model's decoding." + name + ")").c_str() : "(xf's default)");
  std::printf("tokenizers\n");
  const auto source = model.source_tokenizer(), target = model.target_tokenizer();
  if (source.empty()) {
    std::printf("  source none\n");
  } else {
    std::printf("  source %zu bytes, %u pieces\n", source.size(), model.config().source_vocab_size);
  }
  if (target.empty()) {
    std::printf("  target none\n");
  } else if (target.data() == source.data()) {
    std::printf("  target shared with source\n");
  } else {
    std::printf("  target %zu bytes, %u pieces\n", target.size(), model.config().target_vocab_size);
  }

  // An imported model's own ids (format version 2): the piece of each, over the tokenizer.
  if (!model.source_vocabulary().empty()) {
    std::printf("vocabulary lists (model ids over the tokenizers' pieces)\n");
    std::printf("  source %zu pieces\n", model.source_vocabulary().size());
    if (model.target_vocabulary().data() == model.source_vocabulary().data())
      std::printf("  target shared with source\n");
    else
      std::printf("  target %zu pieces\n", model.target_vocabulary().size());
  }

  if (const auto& shortlist = model.shortlist()) {
    std::printf("lexical shortlist\n");
    std::printf("  first %u, best %u, %llu source ids, %zu candidates\n", shortlist->first_num, shortlist->best_num,
                static_cast<unsigned long long>(shortlist->source_ids()), shortlist->targets.size());
  }

  const auto& tensors = model.tensors();
  size_t name_width = 4;
  for (const auto& t : tensors) name_width = std::max(name_width, t.name.size());
  std::printf("tensors\n");
  std::printf("  %-*s %-5s %-14s %s\n", static_cast<int>(name_width), "name", "dtype", "shape",
              "bytes");
  uint64_t total_bytes = 0, total_scale_bytes = 0;
  for (const auto& t : tensors) {
    std::printf("  %-*.*s %-5s %-14s %zu%s%s\n", static_cast<int>(name_width),
                static_cast<int>(t.name.size()), t.name.data(), xf::dtype_name(t.dtype),
                shape_string(t).c_str(), t.bytes, t.layout == xf::WeightLayout::rows ? "" : " in ",
                t.layout == xf::WeightLayout::rows ? "" : xf::weight_layout_name(t.layout));
    total_bytes += t.bytes;
    if (t.row_scales) total_scale_bytes += t.rows() * sizeof(float);
  }
  std::printf("total: %zu tensors, %llu bytes", tensors.size(),
              static_cast<unsigned long long>(total_bytes));
  if (total_scale_bytes) {
    std::printf(" (+ %llu bytes of int8 row scales)",
                static_cast<unsigned long long>(total_scale_bytes));
  }
  std::printf("\n");
}

// Opening the file as the runtime does checks its tokenizers too (xf::Model loads them).
int run(int argc, char** argv) {
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.size() > 1 && arg[0] == '-') throw xf::cli::unknown_option(arg);
    if (!path.empty()) throw xf::cli::UsageError{"one model file at a time (try --help)"};
    path = arg;
  }
  if (path.empty()) throw xf::cli::UsageError{"no model file given (try --help)"};
  print_model(*xf::Model::open(path));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return xf::cli::tool_main("xf-inspect", kUsage, argc, argv, run); }
