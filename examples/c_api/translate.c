/* Translates one sentence through xf's C API: translate_c MODEL.xfm "sentence" */
#include <stdio.h>

#include "xf/xf.h"

int main(int argc, char** argv) {
  xf_model* model = NULL;
  xf_translator* translator = NULL;
  xf_results* results = NULL;
  xf_translator_options options;
  const char* sources[1];
  int status = 1;

  if (argc != 3) {
    fprintf(stderr, "usage: translate_c MODEL.xfm SENTENCE\n");
    return 2;
  }
  sources[0] = argv[2];
  xf_translator_options_init(&options); /* CPU, beam 4, as xf-run's defaults */
  if (xf_model_open(argv[1], &model) == XF_OK && xf_translator_create(model, &options, &translator) == XF_OK &&
      xf_translate(translator, sources, 1, NULL, &results) == XF_OK) {
    printf("%s\n", xf_results_text(results, 0, 0));
    status = 0;
  } else {
    fprintf(stderr, "translate_c: %s\n", xf_last_error());
  }
  xf_results_free(results);
  xf_translator_free(translator);
  xf_model_free(model);
  return status;
}
