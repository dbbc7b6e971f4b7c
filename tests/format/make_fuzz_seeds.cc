// Writes valid model files as a libFuzzer seed corpus: make_fuzz_seeds SEED_DIR [EMPTY_DIR...]
// (the extra directories are created empty, for the fuzzer's own finds).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "format_test_support.h"

namespace {

// Both parameter-list shapes (shared/tied/post and separate/untied/pre with bias) in every
// dtype: 8 files of 10-25 KB.
int write_seeds(const std::string& dir) {
  using xf::DType;
  xf::ModelConfig separate = xf::test::tiny_config();
  separate.shared_embeddings = false;
  separate.tied_output = false;
  separate.output_bias = true;
  separate.norm_position = xf::NormPosition::pre;
  int count = 0;
  for (const auto& config : {xf::test::tiny_config(), separate}) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::int8}) {
      const std::string path =
          dir + "/seed_" + std::to_string(count) + "_" + xf::dtype_name(dtype) + ".xfm";
      xf::test::write_bytes(path, xf::test::valid_model_bytes(config, dtype, count));
      ++count;
    }
  }
  return count;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds SEED_DIR [EMPTY_DIR...]\n");
    return 1;
  }
  try {
    for (int i = 1; i < argc; ++i) std::filesystem::create_directories(argv[i]);
    const int count = write_seeds(argv[1]);
    std::printf("wrote %d seed models to %s\n", count, argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
