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
 * Versions: XF_VERSION_* is the release this header belongs to, xf_version() the library's.
 * XF_ABI_VERSION is the SONAME's number (libxf.so.XF_ABI_VERSION); it changes only when an app
 * must be rebuilt. Option structs begin with struct_size, which xf_*_options_init sets to the
 * size the app was compiled with: fields are only ever appended, so a newer library reads the
 * fields an older app knows and gives the others their defaults, and an older library accepts
 * a newer app's struct as long as the fields it does not know are zero (what init leaves them).
 *
 * Threads: a model may be shared by any number of translators on any threads. A translator
 * may be called from any thread; calls to one translator from several threads at once are
 * serialized (each waits for the one before), so for parallel translation create one
 * translator per thread. Results are owned by the caller and independent of each other.
 * Freeing a handle while another thread still uses it is undefined.
 *
 * Signals: the library installs no handler. An app that installs one (SIGINT, SIGTERM, ...) must
 * block those signals before the first xf call, in main() before any thread starts (xf's
 * OpenMP workers inherit the mask), and take them in a thread of its own with sigwait() or a
 * signalfd: a handler run on a thread inside oneDNN's AVX-512 GEMM corrupts the heap
 * (runtime/README.md, "Signals: what an embedding app must do").
 */
#ifndef XF_XF_H_
#define XF_XF_H_

#include <stddef.h>
#include <stdint.h>

#include "xf/export.h"

/* Valid C89, C99 and later, and C++. C89 has no `inline`: there, GCC and Clang take their
 * __inline__, other compilers plain static functions. */
#if defined(__cplusplus) || (defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L)
#define XF_INLINE static inline
#elif defined(__GNUC__)
#define XF_INLINE static __inline__
#else
#define XF_INLINE static
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* CMakeLists.txt reads the release and ABI numbers from these lines. */
#define XF_VERSION_MAJOR 0
#define XF_VERSION_MINOR 1
#define XF_VERSION_PATCH 0
#define XF_ABI_VERSION 1


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
typedef struct xf_pending xf_pending;

/* Streaming (xf::StreamStep): called on the translating thread with each token of a sentence's
 * output as soon as it is final (greedy search: as chosen; beam search: the best hypothesis once
 * the sentence's search has ended), then with id -1 and `length`, the output's tokens (the loop
 * guard may have cut some streamed ones), when it is complete. index: the source in the call;
 * sentence: the sentence of that source (sentence splitting; 0 for xf_translate_ids). It must
 * not call xf on the same translator. */
typedef void (*xf_token_callback)(void* user_data, size_t index, size_t sentence, int32_t id,
                                  size_t length);

typedef enum xf_device { XF_DEVICE_CPU = 0, XF_DEVICE_CUDA = 1 } xf_device;

typedef struct xf_translator_options {
  size_t struct_size; /* sizeof(xf_translator_options) as the app compiled it: set by init */
  xf_device device;
  int max_batch;
  int max_source_len;
  int max_beam; /* the widest beam; 0 (the default): the model's decoding.beam, else 4 */
  int threads;
  float max_len_a;
  int max_len_b;
  /* A lexical shortlist (Marian's; TranslatorOptions::shortlist): NULL or "" (init): the model
   * file's own, if it has one; "none": never; else a file, Marian's binary lex.*.s2t.bin or its
   * text lex.s2t pruned to shortlist_best candidates per source piece (init: 100), ids below
   * shortlist_first always in (init: 100), each with a probability above shortlist_threshold.
   * The string is read by xf_translator_create only. CPU only. */
  const char* shortlist;
  int shortlist_first;
  int shortlist_best;
  float shortlist_threshold;
} xf_translator_options;

typedef enum xf_batch_type { XF_BATCH_EXAMPLES = 0, XF_BATCH_TOKENS = 1 } xf_batch_type;

/* A score is log_prob / ((5 + length) / 6)^alpha (GNMT) or log_prob / length^alpha (POWER:
 * Marian's normalize, transformers' length_penalty); length counts EOS. MODEL (0, what init
 * sets): the model's decoding.length_normalization, else GNMT. */
typedef enum xf_length_normalization {
  XF_LENGTH_NORMALIZATION_MODEL = 0,
  XF_LENGTH_NORMALIZATION_GNMT = 1,
  XF_LENGTH_NORMALIZATION_POWER = 2
} xf_length_normalization;

/* The fields of xf::TranslateOptions (translator.h says what each one does). The fields marked
 * "model's" default to the model's own setting (its decoding.* metadata, else xf's default):
 * init leaves them NAN or -1, which mean "not given"; any other value wins over the model's. */
typedef struct xf_translate_options {
  size_t struct_size; /* sizeof(xf_translate_options) as the app compiled it: set by init */
  int beam; /* 0: the translator's max_beam */
  int n_best;
  float length_penalty; /* model's: NAN; else alpha (xf's default 0.6) */
  float max_len_a;
  int max_len_b;
  int max_decoding_length; /* 0: no cap beyond max_len_a/b */
  int max_batch_size;      /* 0: the translator's max_batch */
  xf_batch_type batch_type;
  int sampling_topk; /* 1: no sampling; 0: the whole vocabulary (beam must be 1) */
  float sampling_topp;
  float sampling_temperature;
  uint64_t seed;
  float repetition_penalty; /* model's: NAN; 1: off (xf's default) */
  int no_repeat_ngram_size; /* model's: -1; 0: off (xf's default) */
  /* NULL, or one target prefix per source: xf_translate reads target_prefix[i] (text, "" for
   * none); xf_translate_ids reads target_prefix_ids[i] with target_prefix_lengths[i] ids. */
  const char* const* target_prefix;
  const int32_t* const* target_prefix_ids;
  const size_t* target_prefix_lengths;
  int min_decoding_length; /* 0: none */
  int disable_unk;         /* 1: never generate the unknown token */
  /* Fields appended after the first release default to 0, so that an older library takes a
   * newer app's struct as long as the app leaves them alone. */
  xf_length_normalization length_normalization; /* how length_penalty divides a score */
  int disable_loop_guard; /* 1: no loop guard (translation_types.h) */
  int disable_sentence_splitting; /* 1: xf_translate translates each source whole, not by sentence */
  xf_token_callback callback;     /* NULL: no streaming */
  void* callback_data;            /* the callback's user_data */
} xf_translate_options;

/* The library's release, "MAJOR.MINOR.PATCH". */
XF_API const char* xf_version(void);

/* The message of this thread's last failure ("" when none). Valid until the next xf call. */
XF_API const char* xf_last_error(void);

/* Opens a model file by memory-mapping it: the file must not be overwritten in place while it is
 * open (replace it by renaming a new file over it; xf_model_options.mmap = 0 reads it instead). */
XF_API xf_status xf_model_open(const char* path, xf_model** model);

typedef struct xf_model_options {
  size_t struct_size; /* sizeof(xf_model_options) as the app compiled it: set by init */
  int mmap; /* 1 (default): map the file; 0: read it into memory, so it may change or go */
} xf_model_options;
XF_API void xf_model_options_init_sized(xf_model_options* options, size_t struct_size);
XF_INLINE void xf_model_options_init(xf_model_options* options) {
  xf_model_options_init_sized(options, sizeof(*options));
}
XF_API xf_status xf_model_open_with_options(const char* path, const xf_model_options* options,
                                            xf_model** model);
XF_API void xf_model_free(xf_model* model);

/* Fills the first struct_size bytes of *options with the defaults and sets struct_size.
 * Call it through xf_translator_options_init, which passes the app's sizeof. */
XF_API void xf_translator_options_init_sized(xf_translator_options* options, size_t struct_size);
XF_INLINE void xf_translator_options_init(xf_translator_options* options) {
  xf_translator_options_init_sized(options, sizeof(*options));
}
/* XF_ERROR_INVALID_ARGUMENT when options->struct_size is not one a release of xf.h had, or
 * sets a field this library does not know. */
XF_API xf_status xf_translator_create(const xf_model* model, const xf_translator_options* options,
                                      xf_translator** translator);
XF_API void xf_translator_free(xf_translator* translator);

XF_API void xf_translate_options_init_sized(xf_translate_options* options, size_t struct_size);
XF_INLINE void xf_translate_options_init(xf_translate_options* options) {
  xf_translate_options_init_sized(options, sizeof(*options));
}
/* options may be NULL (defaults). */
XF_API xf_status xf_translate(xf_translator* translator, const char* const* sources, size_t count,
                              const xf_translate_options* options, xf_results** results);
/* Token ids: sources[i] holds lengths[i] piece ids, without EOS. */
XF_API xf_status xf_translate_ids(xf_translator* translator, const int32_t* const* sources,
                                  const size_t* lengths, size_t count,
                                  const xf_translate_options* options, xf_results** results);

/* xf_translate without waiting: the sources, target prefixes and options are read (and copied)
 * here, the translation is queued for the translator's one worker thread (Translator::
 * translate_async); *pending is its handle. Calls to one translator run one at a time, in the
 * order they were made. */
XF_API xf_status xf_translate_async(xf_translator* translator, const char* const* sources,
                                    size_t count, const xf_translate_options* options,
                                    xf_pending** pending);
/* 1 when the translation is done (xf_pending_wait will not block), else 0. */
XF_API int xf_pending_ready(const xf_pending* pending);
/* Waits for the translation; its status and results as xf_translate gives them (once: a second
 * call is XF_ERROR_INVALID_ARGUMENT). */
XF_API xf_status xf_pending_wait(xf_pending* pending, xf_results** results);
/* Waits for the translation if still running, then frees the handle (and unclaimed results).
 * The translator must not be freed before. */
XF_API void xf_pending_free(xf_pending* pending);

XF_API size_t xf_results_count(const xf_results* results);
XF_API size_t xf_results_hypotheses(const xf_results* results, size_t sentence);
/* NULL when the index is out of range. Text is "" for results of xf_translate_ids. */
XF_API const char* xf_results_text(const xf_results* results, size_t sentence, size_t hypothesis);
XF_API const int32_t* xf_results_ids(const xf_results* results, size_t sentence,
                                     size_t hypothesis, size_t* length);
XF_API float xf_results_score(const xf_results* results, size_t sentence, size_t hypothesis);
XF_API void xf_results_free(xf_results* results);

#ifdef __cplusplus
}
#endif

#endif /* XF_XF_H_ */
