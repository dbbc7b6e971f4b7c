#include "xf/translator.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "backend.h"
#include "memory_plan.h"
#include "search.h"
#include "xf/error.h"

namespace xf {

const char* version() { return XF_VERSION_STRING; }

const char* device_name(Device device) { return device == Device::cuda ? "cuda" : "cpu"; }

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  throw Error("unknown device '" + name + "' (expected cpu or cuda)");
}

Translator::Translator(std::shared_ptr<const Model> model, const TranslatorOptions& options)
    : model_(std::move(model)), options_(options) {
  if (!model_) throw Error("Translator: no model");
  plan_ = std::make_unique<runtime::MemoryPlan>(runtime::make_memory_plan(model_->config(), options_));
  switch (options_.device) {
    case Device::cpu: backend_ = runtime::make_cpu_backend(*model_, *plan_, options_.threads, options_.weight_dtype); break;
    case Device::cuda:
#ifdef XF_WITH_CUDA
      backend_ = runtime::make_cuda_backend(*model_, *plan_, options_.weight_dtype);
      break;
#else
      throw Error("device cuda: xf was built without CUDA");
#endif
  }
  search_ = std::make_unique<runtime::Search>(*plan_, model_->config());
  batch_results_.resize(plan_->max_sentences);
}

Translator::~Translator() = default;

int64_t Translator::max_target_len() const { return plan_->max_target_len; }
size_t Translator::arena_bytes() const { return backend_->arena_bytes(); }

void Translator::translate_ids(const std::vector<std::vector<int32_t>>& sources,
                               const TranslateOptions& options,
                               std::vector<TokenTranslation>& results) {
  std::lock_guard<std::mutex> lock(mutex_);
  const ModelConfig& config = model_->config();
  const int64_t beam = options.beam == 0 ? plan_->max_beam : options.beam;
  if (beam < 1 || beam > plan_->max_beam)
    throw Error("beam " + std::to_string(options.beam) + " is outside the translator's 1.." +
                std::to_string(plan_->max_beam));
  if (options.n_best < 1 || options.n_best > beam)
    throw Error("n_best " + std::to_string(options.n_best) + " must be between 1 and the beam " +
                std::to_string(beam));
  if (!std::isfinite(options.length_penalty))
    throw Error("length_penalty must be a finite number");
  if (!std::isfinite(options.max_len_a) || options.max_len_a < 0.0f)
    throw Error("max_len_a must be a non-negative number");
  for (size_t i = 0; i < sources.size(); ++i) {
    const auto& ids = sources[i];
    if (static_cast<int64_t>(ids.size()) + 1 > plan_->max_source_len)
      throw Error("sentence " + std::to_string(i + 1) + ": " + std::to_string(ids.size() + 1) +
                  " tokens with EOS, more than the translator's max_source_len " +
                  std::to_string(plan_->max_source_len));
    for (int32_t id : ids)
      if (id < 0 || static_cast<uint32_t>(id) >= config.source_vocab_size)
        throw Error("sentence " + std::to_string(i + 1) + ": token id " + std::to_string(id) +
                    " is outside the source vocabulary of " + std::to_string(config.source_vocab_size));
  }

  results.resize(sources.size());
  // Longest first, so each batch pads little; equal lengths keep input order.
  order_.resize(sources.size());
  std::iota(order_.begin(), order_.end(), 0);
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    if (sources[a].size() != sources[b].size()) return sources[a].size() > sources[b].size();
    return a < b;
  });

  TokenTranslation** batch_results = batch_results_.data();
  size_t next = 0;
  while (next < order_.size()) {
    if (sources[order_[next]].empty()) {
      // An empty line translates to an empty line, without running the model.
      auto& hypotheses = results[order_[next]].hypotheses;
      hypotheses.resize(1);
      hypotheses[0].ids.clear();
      hypotheses[0].score = hypotheses[0].log_prob = 0.0f;
      ++next;
      continue;
    }
    const int64_t source_len = static_cast<int64_t>(sources[order_[next]].size()) + 1;
    int32_t* staged = search_->source_ids();
    int32_t* lengths = search_->source_lengths();
    int64_t count = 0;
    while (next < order_.size() && count < plan_->max_sentences &&
           !sources[order_[next]].empty()) {
      const auto& ids = sources[order_[next]];
      int32_t* row = staged + count * source_len;
      std::copy(ids.begin(), ids.end(), row);
      row[ids.size()] = config.eos_id;
      std::fill(row + ids.size() + 1, row + source_len, config.pad_id);
      lengths[count] = static_cast<int32_t>(ids.size() + 1);
      batch_results[count] = &results[order_[next]];
      ++count;
      ++next;
    }
    search_->translate(*backend_, count, source_len, beam, options, batch_results);
  }
}

std::vector<TranslationResult> Translator::translate(const std::vector<std::string>& sources,
                                                     const TranslateOptions& options) {
  std::vector<std::vector<int32_t>> ids(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    try {
      ids[i] = model_->encode_source(sources[i]);
    } catch (const Error& e) {
      throw Error("sentence " + std::to_string(i + 1) + ": " + e.what());
    }
  }
  std::vector<TokenTranslation> tokens;
  translate_ids(ids, options, tokens);
  std::vector<TranslationResult> results(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    for (const TokenHypothesis& h : tokens[i].hypotheses) {
      Hypothesis out;
      out.text = model_->decode_target(h.ids.data(), h.ids.size());
      out.ids = h.ids;
      out.score = h.score;
      out.log_prob = h.log_prob;
      results[i].hypotheses.push_back(std::move(out));
    }
  }
  return results;
}

}  // namespace xf
