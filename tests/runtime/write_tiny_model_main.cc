// Writes a random model (tests/common/tiny_model.h):
//   xf_test_write_tiny_model PATH
//     the tiny model with a SentencePiece tokenizer, for ctest fixtures that run programs;
//   xf_test_write_tiny_model PATH D_MODEL HEADS D_FF LAYERS VOCAB f32|f16 [SEED [DECODER]]
//     a model of any size without a tokenizer, for xf-bench runs on a GPU machine that has no
//     numpy (scripts/gpu_check.sh falls back to it when scripts/bench/make_random_xfm.py cannot);
//     DECODER self_attention (the default) or ssru (Marian's SSRU decoder layers).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include "tiny_model.h"

namespace {

uint32_t positive(const char* text, const char* what) {
  char* end = nullptr;
  const unsigned long value = std::strtoul(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value == 0 || value > (1ul << 24))
    throw std::runtime_error(std::string(what) + " must be a positive integer, got '" + text + "'");
  return static_cast<uint32_t>(value);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && (argc < 8 || argc > 10)) {
    std::fprintf(stderr,
                 "usage: xf_test_write_tiny_model PATH [D_MODEL HEADS D_FF LAYERS VOCAB f32|f16 [SEED "
                 "[self_attention|ssru]]]\n");
    return 2;
  }
  try {
    xf::test::TinyModelOptions options;
    if (argc > 2) {
      options.with_tokenizer = false;
      options.d_model = positive(argv[2], "D_MODEL");
      options.num_heads = positive(argv[3], "HEADS");
      options.d_ff = positive(argv[4], "D_FF");
      options.layers = positive(argv[5], "LAYERS");
      options.vocab_size = positive(argv[6], "VOCAB");
      const std::string dtype = argv[7];
      if (dtype != "f32" && dtype != "f16") throw std::runtime_error("dtype must be f32 or f16, got '" + dtype + "'");
      options.matrix_dtype = dtype == "f16" ? xf::DType::f16 : xf::DType::f32;
      options.seed = argc >= 9 ? positive(argv[8], "SEED") : 1;
      const std::string decoder = argc == 10 ? argv[9] : "self_attention";
      if (decoder != "self_attention" && decoder != "ssru")
        throw std::runtime_error("DECODER must be self_attention or ssru, got '" + decoder + "'");
      options.decoder_layer_kind =
          decoder == "ssru" ? xf::DecoderLayerKind::ssru : xf::DecoderLayerKind::self_attention;
      options.max_positions = 1024;
    }
    xf::test::write_tiny_model(argv[1], options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xf_test_write_tiny_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
