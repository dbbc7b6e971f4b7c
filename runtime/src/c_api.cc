// The C API over the C++ one: every entry point catches everything and turns it into a status.
#include "xf/xf.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <future>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "xf/translator.h"

struct xf_model {
  std::shared_ptr<const xf::Model> model;
};
struct xf_translator {
  std::unique_ptr<xf::Translator> translator;
};
struct xf_results {
  std::vector<xf::TranslationResult> results;
};
struct xf_pending {
  std::future<std::vector<xf::TranslationResult>> done;  // from Translator::translate_async
};

namespace {

thread_local std::string last_error;

// An argument the API's contract rules out (XF_ERROR_INVALID_ARGUMENT).
struct InvalidArgument : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

xf_status fail(xf_status status, const std::string& message) {
  last_error = message;
  return status;
}

template <typename Body>
xf_status guarded(Body&& body) {
  try {
    last_error.clear();
    body();
    return XF_OK;
  } catch (const InvalidArgument& e) {
    return fail(XF_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const xf::Error& e) {
    return fail(XF_ERROR, e.what());
  } catch (const std::bad_alloc&) {
    return fail(XF_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(XF_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(XF_ERROR_INTERNAL, "internal error");
  }
}

// The smallest struct_size of each option struct: its fields in the first release of xf.h that
// had struct_size. Later releases append fields; these stay.
constexpr size_t kFirstTranslatorOptionsSize = offsetof(xf_translator_options, max_len_b) + sizeof(int);
constexpr size_t kFirstTranslateOptionsSize = offsetof(xf_translate_options, max_len_b) + sizeof(int);

// Writes the defaults over the first struct_size bytes of an app's struct (all of them when the
// app knows fewer fields than this library, zeros past this library's fields when it knows more).
template <typename Options>
void init_sized(Options* options, size_t struct_size, const Options& defaults) {
  if (options == nullptr || struct_size < sizeof(size_t)) return;
  Options filled = defaults;
  filled.struct_size = struct_size;
  const size_t known = std::min(struct_size, sizeof(Options));
  std::memcpy(options, &filled, known);
  if (struct_size > known) std::memset(reinterpret_cast<char*>(options) + known, 0, struct_size - known);
}

// Reads an app's option struct written against any release of xf.h (the rule of Linux's
// extensible system call structs): the fields it has, the defaults for the others; fields past
// this library's must be zero. Returns an empty string or what is wrong.
template <typename Options>
std::string read_sized(const Options* in, size_t first_size, const Options& defaults, Options& out) {
  const size_t size = in->struct_size;
  if (size < first_size)
    return "struct_size " + std::to_string(size) + " is smaller than any release of xf.h (" +
           std::to_string(first_size) + "): initialize the options with their _init function";
  out = defaults;
  std::memcpy(&out, in, std::min(size, sizeof(Options)));
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  for (size_t i = sizeof(Options); i < size; ++i)
    if (bytes[i] != 0)
      return "sets a field (byte " + std::to_string(i) + " of " + std::to_string(size) +
             ") that this xf " + std::string(xf::version()) + " does not know";
  out.struct_size = sizeof(Options);
  return {};
}

constexpr size_t kFirstModelOptionsSize = offsetof(xf_model_options, mmap) + sizeof(int);

xf_model_options model_defaults() {
  xf_model_options c{};
  c.struct_size = sizeof(c);
  c.mmap = 1;
  return c;
}

xf_translator_options translator_defaults() {
  const xf::TranslatorOptions cpp;
  xf_translator_options c{};
  c.struct_size = sizeof(c);
  c.device = XF_DEVICE_CPU;
  c.max_batch = cpp.max_batch;
  c.max_source_len = cpp.max_source_len;
  c.max_beam = cpp.max_beam;
  c.threads = cpp.threads;
  c.max_len_a = cpp.max_len_a;
  c.max_len_b = cpp.max_len_b;
  c.shortlist = nullptr;
  c.shortlist_first = cpp.shortlist_first;
  c.shortlist_best = cpp.shortlist_best;
  c.shortlist_threshold = cpp.shortlist_threshold;
  return c;
}

xf_translate_options translate_defaults() {
  const xf::TranslateOptions cpp;
  xf_translate_options c{};
  c.struct_size = sizeof(c);
  c.beam = cpp.beam;
  c.n_best = cpp.n_best;
  c.length_penalty = NAN;  // the model's (or xf's default)
  c.max_len_a = cpp.max_len_a;
  c.max_len_b = cpp.max_len_b;
  c.max_decoding_length = cpp.max_decoding_length;
  c.min_decoding_length = cpp.min_decoding_length;
  c.disable_unk = cpp.disable_unk;
  c.max_batch_size = cpp.max_batch_size;
  c.batch_type = XF_BATCH_EXAMPLES;
  c.sampling_topk = cpp.sampling_topk;
  c.sampling_topp = cpp.sampling_topp;
  c.sampling_temperature = cpp.sampling_temperature;
  c.seed = cpp.seed;
  c.repetition_penalty = NAN;
  c.no_repeat_ngram_size = -1;
  c.length_normalization = XF_LENGTH_NORMALIZATION_MODEL;
  return c;  // no target prefixes
}

// The app's options as this library's struct (null: the defaults). Throws InvalidArgument.
xf_translate_options read_translate_options(const xf_translate_options* in) {
  if (in == nullptr) return translate_defaults();
  xf_translate_options c;
  const std::string problem = read_sized(in, kFirstTranslateOptionsSize, translate_defaults(), c);
  if (!problem.empty()) throw InvalidArgument("xf_translate_options: " + problem);
  return c;
}

xf::TranslateOptions to_cpp(const xf_translate_options& c) {
  if (c.batch_type != XF_BATCH_EXAMPLES && c.batch_type != XF_BATCH_TOKENS)
    throw InvalidArgument("xf_translate_options: unknown batch_type " + std::to_string(c.batch_type));
  xf::TranslateOptions cpp;
  cpp.beam = c.beam;
  cpp.n_best = c.n_best;
  if (!std::isnan(c.length_penalty)) cpp.length_penalty = c.length_penalty;
  cpp.max_len_a = c.max_len_a;
  cpp.max_len_b = c.max_len_b;
  cpp.max_decoding_length = c.max_decoding_length;
  cpp.min_decoding_length = c.min_decoding_length;
  cpp.disable_unk = c.disable_unk != 0;
  cpp.disable_loop_guard = c.disable_loop_guard != 0;
  cpp.disable_sentence_splitting = c.disable_sentence_splitting != 0;
  cpp.max_batch_size = c.max_batch_size;
  cpp.batch_type = c.batch_type == XF_BATCH_TOKENS ? xf::BatchType::tokens : xf::BatchType::examples;
  cpp.sampling_topk = c.sampling_topk;
  cpp.sampling_topp = c.sampling_topp;
  cpp.sampling_temperature = c.sampling_temperature;
  cpp.seed = c.seed;
  if (c.callback != nullptr) {
    const xf_token_callback callback = c.callback;
    void* const data = c.callback_data;
    cpp.callback = [callback, data](const xf::StreamStep& step) {
      callback(data, step.index, step.sentence, step.id, step.length);
    };
  }
  if (!std::isnan(c.repetition_penalty)) cpp.repetition_penalty = c.repetition_penalty;
  if (c.no_repeat_ngram_size != -1) cpp.no_repeat_ngram_size = c.no_repeat_ngram_size;
  if (c.length_normalization == XF_LENGTH_NORMALIZATION_GNMT) cpp.length_normalization = xf::LengthNormalization::gnmt;
  else if (c.length_normalization == XF_LENGTH_NORMALIZATION_POWER) cpp.length_normalization = xf::LengthNormalization::power;
  else if (c.length_normalization != XF_LENGTH_NORMALIZATION_MODEL)
    throw InvalidArgument("xf_translate_options: unknown length_normalization " +
                          std::to_string(static_cast<int>(c.length_normalization)));
  return cpp;
}

const xf::Hypothesis* find_hypothesis(const xf_results* results, size_t sentence, size_t hypothesis) {
  if (results == nullptr || sentence >= results->results.size()) return nullptr;
  const auto& hypotheses = results->results[sentence].hypotheses;
  return hypothesis < hypotheses.size() ? &hypotheses[hypothesis] : nullptr;
}

}  // namespace

extern "C" {

const char* xf_version(void) { return xf::version(); }

const char* xf_last_error(void) { return last_error.c_str(); }

xf_status xf_model_open(const char* path, xf_model** model) {
  const xf_model_options options = model_defaults();
  return xf_model_open_with_options(path, &options, model);
}

void xf_model_options_init_sized(xf_model_options* options, size_t struct_size) {
  init_sized(options, struct_size, model_defaults());
}

xf_status xf_model_open_with_options(const char* path, const xf_model_options* options,
                                     xf_model** model) {
  if (path == nullptr || options == nullptr || model == nullptr)
    return fail(XF_ERROR_INVALID_ARGUMENT, "xf_model_open: null argument");
  *model = nullptr;
  return guarded([&] {
    xf_model_options c;
    const std::string problem = read_sized(options, kFirstModelOptionsSize, model_defaults(), c);
    if (!problem.empty()) throw InvalidArgument("xf_model_options: " + problem);
    const xf::FileAccess access = c.mmap ? xf::FileAccess::map : xf::FileAccess::read;
    *model = new xf_model{xf::Model::open(path, access)};
  });
}

void xf_model_free(xf_model* model) { delete model; }

void xf_translator_options_init_sized(xf_translator_options* options, size_t struct_size) {
  init_sized(options, struct_size, translator_defaults());
}

xf_status xf_translator_create(const xf_model* model, const xf_translator_options* options,
                               xf_translator** translator) {
  if (model == nullptr || options == nullptr || translator == nullptr)
    return fail(XF_ERROR_INVALID_ARGUMENT, "xf_translator_create: null argument");
  *translator = nullptr;
  xf_translator_options known;
  const std::string problem = read_sized(options, kFirstTranslatorOptionsSize, translator_defaults(), known);
  if (!problem.empty()) return fail(XF_ERROR_INVALID_ARGUMENT, "xf_translator_create: options " + problem);
  options = &known;
  if (options->device != XF_DEVICE_CPU && options->device != XF_DEVICE_CUDA)
    return fail(XF_ERROR_INVALID_ARGUMENT, "xf_translator_create: unknown device");
  return guarded([&] {
    xf::TranslatorOptions cpp;
    cpp.device = options->device == XF_DEVICE_CUDA ? xf::Device::cuda : xf::Device::cpu;
    cpp.max_batch = options->max_batch;
    cpp.max_source_len = options->max_source_len;
    cpp.max_beam = options->max_beam;
    cpp.threads = options->threads;
    cpp.max_len_a = options->max_len_a;
    cpp.max_len_b = options->max_len_b;
    if (options->shortlist != nullptr) cpp.shortlist = options->shortlist;
    cpp.shortlist_first = options->shortlist_first;
    cpp.shortlist_best = options->shortlist_best;
    cpp.shortlist_threshold = options->shortlist_threshold;
    *translator = new xf_translator{std::make_unique<xf::Translator>(model->model, cpp)};
  });
}

void xf_translator_free(xf_translator* translator) { delete translator; }

void xf_translate_options_init_sized(xf_translate_options* options, size_t struct_size) {
  init_sized(options, struct_size, translate_defaults());
}

}  // extern "C"

namespace {

// xf_translate's arguments as the C++ call takes them (copies). Throws InvalidArgument.
struct TextCall {
  std::vector<std::string> lines, prefixes;
  xf::TranslateOptions options;
};

TextCall read_text_call(const xf_translator* translator, const char* const* sources, size_t count,
                        const xf_translate_options* options, const char* function) {
  for (size_t i = 0; i < count; ++i)
    if (sources[i] == nullptr)
      throw InvalidArgument(std::string(function) + ": source " + std::to_string(i + 1) + " is null");
  TextCall call;
  const xf_translate_options c = read_translate_options(options);
  for (size_t i = 0; c.target_prefix != nullptr && i < count; ++i) {
    if (c.target_prefix[i] == nullptr)
      throw InvalidArgument(std::string(function) + ": target prefix " + std::to_string(i + 1) + " is null");
    call.prefixes.emplace_back(c.target_prefix[i]);
  }
  // Of each source, only what the plan can use is copied (and tokenized): a huge source
  // costs no memory and is refused by translate() as longer than max_source_len.
  const xf::Translator& t = *translator->translator;
  const size_t most_bytes = t.model().source_bytes_for(static_cast<size_t>(t.options().max_source_len));
  call.lines.resize(count);
  for (size_t i = 0; i < count; ++i) call.lines[i].assign(sources[i], ::strnlen(sources[i], most_bytes));
  call.options = to_cpp(c);
  return call;
}

}  // namespace

extern "C" {

xf_status xf_translate(xf_translator* translator, const char* const* sources, size_t count,
                       const xf_translate_options* options, xf_results** results) {
  if (translator == nullptr || results == nullptr || (sources == nullptr && count > 0))
    return fail(XF_ERROR_INVALID_ARGUMENT, "xf_translate: null argument");
  *results = nullptr;
  return guarded([&] {
    const TextCall call = read_text_call(translator, sources, count, options, "xf_translate");
    auto out = std::make_unique<xf_results>();
    out->results = translator->translator->translate(call.lines, call.options, call.prefixes);
    *results = out.release();
  });
}

xf_status xf_translate_async(xf_translator* translator, const char* const* sources, size_t count,
                             const xf_translate_options* options, xf_pending** pending) {
  if (translator == nullptr || pending == nullptr || (sources == nullptr && count > 0))
    return fail(XF_ERROR_INVALID_ARGUMENT, "xf_translate_async: null argument");
  *pending = nullptr;
  return guarded([&] {
    auto handle = std::make_unique<xf_pending>();
    TextCall call = read_text_call(translator, sources, count, options, "xf_translate_async");
    handle->done = translator->translator->translate_async(std::move(call.lines), std::move(call.options),
                                                           std::move(call.prefixes));
    *pending = handle.release();
  });
}

int xf_pending_ready(const xf_pending* pending) {
  return pending != nullptr &&
         (!pending->done.valid() || pending->done.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
}

xf_status xf_pending_wait(xf_pending* pending, xf_results** results) {
  if (pending == nullptr || results == nullptr) return fail(XF_ERROR_INVALID_ARGUMENT, "xf_pending_wait: null argument");
  *results = nullptr;
  if (!pending->done.valid()) return fail(XF_ERROR_INVALID_ARGUMENT, "xf_pending_wait: its results were already taken");
  return guarded([&] {  // the translation's xf::Error, if any, is thrown here: this thread's message
    auto out = std::make_unique<xf_results>();
    out->results = pending->done.get();
    *results = out.release();
  });
}

void xf_pending_free(xf_pending* pending) {
  if (pending == nullptr) return;
  if (pending->done.valid()) pending->done.wait();  // the call runs to its end either way
  delete pending;
}

xf_status xf_translate_ids(xf_translator* translator, const int32_t* const* sources,
                           const size_t* lengths, size_t count, const xf_translate_options* options,
                           xf_results** results) {
  if (translator == nullptr || results == nullptr || (count > 0 && (sources == nullptr || lengths == nullptr)))
    return fail(XF_ERROR_INVALID_ARGUMENT, "xf_translate_ids: null argument");
  *results = nullptr;
  for (size_t i = 0; i < count; ++i)
    if (sources[i] == nullptr && lengths[i] > 0)
      return fail(XF_ERROR_INVALID_ARGUMENT, "xf_translate_ids: source " + std::to_string(i + 1) + " is null");
  return guarded([&] {
    const xf_translate_options c = read_translate_options(options);
    const bool has_prefix = c.target_prefix_ids != nullptr;
    if (has_prefix && c.target_prefix_lengths == nullptr)
      throw InvalidArgument("xf_translate_ids: target_prefix_lengths is null");
    std::vector<std::vector<int32_t>> ids(count), prefixes(has_prefix ? count : 0);
    for (size_t i = 0; i < count; ++i) ids[i].assign(sources[i], sources[i] + lengths[i]);
    for (size_t i = 0; i < prefixes.size(); ++i) {
      if (c.target_prefix_ids[i] == nullptr && c.target_prefix_lengths[i] > 0)
        throw InvalidArgument("xf_translate_ids: target prefix " + std::to_string(i + 1) + " is null");
      if (c.target_prefix_lengths[i] > 0)
        prefixes[i].assign(c.target_prefix_ids[i], c.target_prefix_ids[i] + c.target_prefix_lengths[i]);
    }
    std::vector<xf::TokenTranslation> tokens;
    translator->translator->translate_ids(ids, to_cpp(c), tokens, prefixes);
    auto out = std::make_unique<xf_results>();
    out->results.resize(count);
    for (size_t i = 0; i < count; ++i)
      for (const auto& h : tokens[i].hypotheses)
        out->results[i].hypotheses.push_back({std::string(), h.ids, h.score, h.log_prob});
    *results = out.release();
  });
}

size_t xf_results_count(const xf_results* results) {
  return results == nullptr ? 0 : results->results.size();
}

size_t xf_results_hypotheses(const xf_results* results, size_t sentence) {
  if (results == nullptr || sentence >= results->results.size()) return 0;
  return results->results[sentence].hypotheses.size();
}

const char* xf_results_text(const xf_results* results, size_t sentence, size_t hypothesis) {
  const xf::Hypothesis* h = find_hypothesis(results, sentence, hypothesis);
  return h == nullptr ? nullptr : h->text.c_str();
}

const int32_t* xf_results_ids(const xf_results* results, size_t sentence, size_t hypothesis,
                              size_t* length) {
  const xf::Hypothesis* h = find_hypothesis(results, sentence, hypothesis);
  if (length != nullptr) *length = h == nullptr ? 0 : h->ids.size();
  return h == nullptr ? nullptr : h->ids.data();
}

float xf_results_score(const xf_results* results, size_t sentence, size_t hypothesis) {
  const xf::Hypothesis* h = find_hypothesis(results, sentence, hypothesis);
  return h == nullptr ? NAN : h->score;
}

void xf_results_free(xf_results* results) { delete results; }

}  // extern "C"
