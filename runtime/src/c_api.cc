// The C API over the C++ one: every entry point catches everything and turns it into a status.
#include "xf/xf.h"

#include <cmath>
#include <new>
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

namespace {

thread_local std::string last_error;

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

xf::TranslateOptions to_cpp(const xf_translate_options* options) {
  xf::TranslateOptions cpp;
  if (options != nullptr) {
    cpp.beam = options->beam;
    cpp.n_best = options->n_best;
    cpp.length_penalty = options->length_penalty;
    cpp.max_len_a = options->max_len_a;
    cpp.max_len_b = options->max_len_b;
  }
  return cpp;
}

const xf::Hypothesis* find_hypothesis(const xf_results* results, size_t sentence, size_t hypothesis) {
  if (results == nullptr || sentence >= results->results.size()) return nullptr;
  const auto& hypotheses = results->results[sentence].hypotheses;
  return hypothesis < hypotheses.size() ? &hypotheses[hypothesis] : nullptr;
}

}  // namespace

extern "C" {

const char* xf_last_error(void) { return last_error.c_str(); }

xf_status xf_model_open(const char* path, xf_model** model) {
  xf_model_options options;
  xf_model_options_init(&options);
  return xf_model_open_with_options(path, &options, model);
}

void xf_model_options_init(xf_model_options* options) {
  if (options != nullptr) options->mmap = 1;
}

xf_status xf_model_open_with_options(const char* path, const xf_model_options* options,
                                     xf_model** model) {
  if (path == nullptr || options == nullptr || model == nullptr)
    return fail(XF_ERROR_INVALID_ARGUMENT, "xf_model_open: null argument");
  *model = nullptr;
  const xf::FileAccess access = options->mmap ? xf::FileAccess::map : xf::FileAccess::read;
  return guarded([&] { *model = new xf_model{xf::Model::open(path, access)}; });
}

void xf_model_free(xf_model* model) { delete model; }

void xf_translator_options_init(xf_translator_options* options) {
  if (options == nullptr) return;
  const xf::TranslatorOptions defaults;
  options->device = XF_DEVICE_CPU;
  options->max_batch = defaults.max_batch;
  options->max_source_len = defaults.max_source_len;
  options->beam = defaults.beam;
  options->threads = defaults.threads;
  options->max_len_a = defaults.max_len_a;
  options->max_len_b = defaults.max_len_b;
}

xf_status xf_translator_create(const xf_model* model, const xf_translator_options* options,
                               xf_translator** translator) {
  if (model == nullptr || options == nullptr || translator == nullptr)
    return fail(XF_ERROR_INVALID_ARGUMENT, "xf_translator_create: null argument");
  *translator = nullptr;
  if (options->device != XF_DEVICE_CPU && options->device != XF_DEVICE_CUDA)
    return fail(XF_ERROR_INVALID_ARGUMENT, "xf_translator_create: unknown device");
  return guarded([&] {
    xf::TranslatorOptions cpp;
    cpp.device = options->device == XF_DEVICE_CUDA ? xf::Device::cuda : xf::Device::cpu;
    cpp.max_batch = options->max_batch;
    cpp.max_source_len = options->max_source_len;
    cpp.beam = options->beam;
    cpp.threads = options->threads;
    cpp.max_len_a = options->max_len_a;
    cpp.max_len_b = options->max_len_b;
    *translator = new xf_translator{std::make_unique<xf::Translator>(model->model, cpp)};
  });
}

void xf_translator_free(xf_translator* translator) { delete translator; }

void xf_translate_options_init(xf_translate_options* options) {
  if (options == nullptr) return;
  const xf::TranslateOptions defaults;
  options->beam = defaults.beam;
  options->n_best = defaults.n_best;
  options->length_penalty = defaults.length_penalty;
  options->max_len_a = defaults.max_len_a;
  options->max_len_b = defaults.max_len_b;
}

xf_status xf_translate(xf_translator* translator, const char* const* sources, size_t count,
                       const xf_translate_options* options, xf_results** results) {
  if (translator == nullptr || results == nullptr || (sources == nullptr && count > 0))
    return fail(XF_ERROR_INVALID_ARGUMENT, "xf_translate: null argument");
  *results = nullptr;
  for (size_t i = 0; i < count; ++i)
    if (sources[i] == nullptr)
      return fail(XF_ERROR_INVALID_ARGUMENT, "xf_translate: source " + std::to_string(i + 1) + " is null");
  return guarded([&] {
    std::vector<std::string> lines(sources, sources + count);
    auto out = std::make_unique<xf_results>();
    out->results = translator->translator->translate(lines, to_cpp(options));
    *results = out.release();
  });
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
    std::vector<std::vector<int32_t>> ids(count);
    for (size_t i = 0; i < count; ++i) ids[i].assign(sources[i], sources[i] + lengths[i]);
    std::vector<xf::TokenTranslation> tokens;
    translator->translator->translate_ids(ids, to_cpp(options), tokens);
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
