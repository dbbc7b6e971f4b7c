// xf-convert CHECKPOINT... -o MODEL.xfm [--dtype f32|f16|int8] [--metadata KEY=VALUE]...
// Averages the checkpoints (element-wise mean of their parameters) and writes a flat model file
// with the SentencePiece model and a training summary in its metadata.
#include <iostream>

#include "xf/error.h"
#include "xf/trainer/checkpoint.h"

namespace {

constexpr const char* kUsage =
    "usage: xf-convert CHECKPOINT... -o MODEL.xfm [--dtype f32|f16|int8] [--metadata KEY=VALUE]...\n"
    "Writes a flat model file from one training checkpoint directory, or from the average of\n"
    "several (same config and tokenizer). Matrices take --dtype (default f32); biases and\n"
    "LayerNorm stay f32. --metadata adds or replaces a metadata entry (repeatable).\n";

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> checkpoints;
    std::string output;
    xf::DType dtype = xf::DType::f32;
    std::map<std::string, std::string> extra;
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
    std::vector<xf::trainer::Checkpoint> loaded;
    for (const auto& path : checkpoints) {
      std::cerr << "reading " << path << "\n";
      loaded.push_back(xf::trainer::read_checkpoint(path));
    }
    xf::trainer::Checkpoint averaged = xf::trainer::average_checkpoints(loaded, checkpoints);
    loaded.clear();
    auto metadata = xf::trainer::model_metadata(averaged, checkpoints, extra);
    xf::trainer::write_model_file(averaged, dtype, metadata, output);
    std::cerr << "wrote " << output << " (" << xf::dtype_name(dtype) << ", "
              << averaged.parameters.size() << " parameters, " << checkpoints.size()
              << " checkpoint" << (checkpoints.size() > 1 ? "s averaged" : "") << ")\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "xf-convert: " << e.what() << "\n";
    return 1;
  }
}
