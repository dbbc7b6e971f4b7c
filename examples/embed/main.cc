// Translates one sentence with an installed xf: embed MODEL.xfm "sentence" [beam]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "xf/translator.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: embed MODEL.xfm SENTENCE [BEAM]\n");
    return 2;
  }
  try {
    auto model = xf::Model::open(argv[1]);
    xf::TranslatorOptions options;  // CPU, batches of 32, sources up to 256 tokens, beam 4
    if (argc == 4) options.max_beam = std::atoi(argv[3]);
    xf::Translator translator(model, options);
    const auto results = translator.translate({argv[2]});
    std::printf("%s\n", results[0].hypotheses[0].text.c_str());
    return 0;
  } catch (const xf::Error& e) {
    std::fprintf(stderr, "embed: %s\n", e.what());
    return 1;
  }
}
