/* xf C API: opaque handles and status codes; no C++ exception crosses it.
 *
 *   xf_model* model; xf_translator* translator; xf_results* results;
 *   if (xf_model_open("enfr.xfm", &model) != XF_OK) { puts(xf_last_error()); ... }
 *   xf_translator_options options; xf_translator_options_init(&options);
 *   xf_translator_create(model, &options, &translator);
 *   const char* lines[] = {"Hello world."};
 *   xf_translate(translator, lines, 1, NULL, &results);
 *   puts(xf_results_text(results, 0, 0));
 *   xf_results_free(results); xf_translator_free(translator); xf_model_free(model);
 *
 * Every function returning xf_status sets a message for xf_last_error() (per thread) when it
 * fails. Handles may be freed in any order: a translator keeps its model alive.
 *
 * Threads: a model may be shared by any number of translators on any threads. A translator
 * may be called from any thread; calls to one translator from several threads at once are
 * serialized (each waits for the one before), so for parallel translation create one
 * translator per thread. Results are owned by the caller and independent of each other.
 * Freeing a handle while another thread still uses it is undefined.
 */
#ifndef XF_XF_H_
#define XF_XF_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum xf_status {
  XF_OK = 0,
  XF_ERROR_INVALID_ARGUMENT = 1, /* a null pointer or an out-of-range option or index */
  XF_ERROR = 2,                  /* what xf reports: bad file, input beyond the plan, bad UTF-8 */
  XF_ERROR_OUT_OF_MEMORY = 3,
  XF_ERROR_INTERNAL = 4
} xf_status;

typedef struct xf_model xf_model;
typedef struct xf_translator xf_translator;
typedef struct xf_results xf_results;

typedef enum xf_device { XF_DEVICE_CPU = 0, XF_DEVICE_CUDA = 1 } xf_device;

typedef struct xf_translator_options {
  xf_device device;
  int max_batch;
  int max_source_len;
  int beam;
  int threads;
  float max_len_a;
  int max_len_b;
} xf_translator_options;

typedef struct xf_translate_options {
  int beam; /* 0: the translator's beam */
  int n_best;
  float length_penalty;
  float max_len_a;
  int max_len_b;
} xf_translate_options;

/* The message of this thread's last failure ("" when none). Valid until the next xf call. */
const char* xf_last_error(void);

/* Opens a model file by memory-mapping it: the file must not be overwritten in place while it is
 * open (replace it by renaming a new file over it; see xf_model_options for the alternative). */
xf_status xf_model_open(const char* path, xf_model** model);

typedef struct xf_model_options {
  int mmap; /* 1 (default): map the file; 0: read it into memory, so it may change or go */
} xf_model_options;
void xf_model_options_init(xf_model_options* options);
xf_status xf_model_open_with_options(const char* path, const xf_model_options* options,
                                     xf_model** model);
void xf_model_free(xf_model* model);

void xf_translator_options_init(xf_translator_options* options);
xf_status xf_translator_create(const xf_model* model, const xf_translator_options* options,
                               xf_translator** translator);
void xf_translator_free(xf_translator* translator);

void xf_translate_options_init(xf_translate_options* options);
/* options may be NULL (defaults). */
xf_status xf_translate(xf_translator* translator, const char* const* sources, size_t count,
                       const xf_translate_options* options, xf_results** results);
/* Token ids: sources[i] holds lengths[i] piece ids, without EOS. */
xf_status xf_translate_ids(xf_translator* translator, const int32_t* const* sources,
                           const size_t* lengths, size_t count, const xf_translate_options* options,
                           xf_results** results);

size_t xf_results_count(const xf_results* results);
size_t xf_results_hypotheses(const xf_results* results, size_t sentence);
/* NULL when the index is out of range. Text is "" for results of xf_translate_ids. */
const char* xf_results_text(const xf_results* results, size_t sentence, size_t hypothesis);
const int32_t* xf_results_ids(const xf_results* results, size_t sentence, size_t hypothesis,
                              size_t* length);
float xf_results_score(const xf_results* results, size_t sentence, size_t hypothesis);
void xf_results_free(xf_results* results);

#ifdef __cplusplus
}
#endif

#endif /* XF_XF_H_ */
