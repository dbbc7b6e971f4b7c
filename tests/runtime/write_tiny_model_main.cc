// Writes a tiny random model with a SentencePiece tokenizer: xf_test_write_tiny_model PATH.
// For ctest fixtures that run programs (the installed-package example).
#include <cstdio>
#include <exception>

#include "tiny_model.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: xf_test_write_tiny_model PATH\n");
    return 2;
  }
  try {
    xf::test::write_tiny_model(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xf_test_write_tiny_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
