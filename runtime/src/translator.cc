#include "xf/translator.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <numeric>
#include <string>
#include <thread>

#include "async_queue.h"
#include "backend.h"
#include "memory_plan.h"
#include "output_shortlist.h"
#include "search.h"
#include "xf/error.h"
#include "xf/sentences.h"

namespace xf {

const char* version() { return XF_VERSION_STRING; }

const char* device_name(Device device) { return device == Device::cuda ? "cuda" : "cpu"; }

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  throw Error("unknown device '" + name + "' (expected cpu or cuda)");
}

const char* batch_type_name(BatchType type) { return type == BatchType::tokens ? "tokens" : "examples"; }

BatchType parse_batch_type(const std::string& name) {
  if (name == "examples") return BatchType::examples;
  if (name == "tokens") return BatchType::tokens;
  throw Error("unknown batch type '" + name + "' (expected examples or tokens)");
}

const char* length_normalization_name(LengthNormalization normalization) {
  return normalization == LengthNormalization::power ? "power" : "gnmt";
}

LengthNormalization parse_length_normalization(const std::string& name) {
  if (name == "gnmt") return LengthNormalization::gnmt;
  if (name == "power") return LengthNormalization::power;
  throw Error("unknown length normalization '" + name + "' (expected gnmt or power)");
}

float length_normalizer(LengthNormalization normalization, int64_t length, float alpha) {
  const float base = normalization == LengthNormalization::power ? static_cast<float>(length)
                                                                 : (5.0f + static_cast<float>(length)) / 6.0f;
  return std::pow(base, alpha);
}

namespace {

void check_options(const TranslateOptions& options, int64_t beam) {
  if (options.n_best < 1 || options.n_best > beam)
    throw Error("n_best " + std::to_string(options.n_best) + " must be between 1 and the beam " +
                std::to_string(beam));
  if (!(std::isfinite(*options.length_penalty) && *options.length_penalty >= 0.0f))
    throw Error("length_penalty must be a finite number, 0 or more");
  if (!std::isfinite(options.max_len_a) || options.max_len_a < 0.0f)
    throw Error("max_len_a must be a non-negative number");
  if (options.max_decoding_length < 0)
    throw Error("max_decoding_length must be 0 (no cap) or more, got " + std::to_string(options.max_decoding_length));
  if (options.min_decoding_length < 0)
    throw Error("min_decoding_length must be 0 (none) or more, got " + std::to_string(options.min_decoding_length));
  if (options.max_decoding_length > 0 && options.min_decoding_length > options.max_decoding_length)
    throw Error("min_decoding_length " + std::to_string(options.min_decoding_length) + " is more than max_decoding_length " +
                std::to_string(options.max_decoding_length));
  if (options.max_batch_size < 0)
    throw Error("max_batch_size must be 0 (the translator's max_batch) or more, got " +
                std::to_string(options.max_batch_size));
  if (options.sampling_topk < 0)
    throw Error("sampling_topk must be 0 (the whole vocabulary) or more, got " + std::to_string(options.sampling_topk));
  if (!(options.sampling_topp > 0.0f && options.sampling_topp <= 1.0f))
    throw Error("sampling_topp must be in (0, 1], got " + std::to_string(options.sampling_topp));
  if (!(std::isfinite(options.sampling_temperature) && options.sampling_temperature > 0.0f))
    throw Error("sampling_temperature must be a positive number, got " + std::to_string(options.sampling_temperature));
  if (options.sampling() && beam != 1)
    throw Error("sampling (sampling_topk " + std::to_string(options.sampling_topk) +
                ") needs greedy search (beam 1), got beam " + std::to_string(beam));
  if (!(std::isfinite(*options.repetition_penalty) && *options.repetition_penalty > 0.0f))
    throw Error("repetition_penalty must be a positive number, got " + std::to_string(*options.repetition_penalty));
  if (*options.no_repeat_ngram_size < 0)
    throw Error("no_repeat_ngram_size must be 0 (off) or more, got " + std::to_string(*options.no_repeat_ngram_size));
}

}  // namespace

TranslatorOptions TranslatorOptions::with_defaults(const DecodingDefaults& defaults) const {
  TranslatorOptions full = *this;
  if (full.max_beam == 0) full.max_beam = defaults.beam;
  return full;
}

TranslateOptions TranslateOptions::with_defaults(const DecodingDefaults& defaults) const {
  TranslateOptions full = *this;
  if (!full.length_penalty) full.length_penalty = defaults.length_penalty;
  if (!full.length_normalization) full.length_normalization = defaults.length_normalization;
  if (full.max_decoding_length == 0) full.max_decoding_length = defaults.max_decoding_length;
  if (!full.repetition_penalty) full.repetition_penalty = defaults.repetition_penalty;
  if (!full.no_repeat_ngram_size) full.no_repeat_ngram_size = defaults.no_repeat_ngram_size;
  return full;
}

Translator::Translator(std::shared_ptr<const Model> model, const TranslatorOptions& options)
    : model_(std::move(model)) {
  if (!model_) throw Error("Translator: no model");
  options_ = options.with_defaults(model_->decoding_defaults());
  if (options_.threads < 0)
    throw Error("threads must be 0 (every core) or more, got " + std::to_string(options_.threads));
  if (options_.threads == 0) options_.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  plan_ = std::make_unique<runtime::MemoryPlan>(runtime::make_memory_plan(model_->config(), options_));
  if (options_.shortlist_first < 0)
    throw Error("shortlist_first must be 0 or more, got " + std::to_string(options_.shortlist_first));
  if (options_.shortlist_best < 1)
    throw Error("shortlist_best must be 1 or more, got " + std::to_string(options_.shortlist_best));
  if (!std::isfinite(options_.shortlist_threshold))
    throw Error("shortlist_threshold must be a finite number");
  // A model's own shortlist serves the CPU; a shortlist file asked for elsewhere is refused.
  if (options_.device == Device::cpu || (!options_.shortlist.empty() && options_.shortlist != "none"))
    shortlist_ = runtime::load_output_shortlist(*model_, options_);
  if (shortlist_ && options_.device != Device::cpu)
    throw Error(std::string("shortlist: the ") + device_name(options_.device) +
                " device computes the whole output layer; a shortlist runs on the CPU (shortlist none)");
  plan_->output_shortlist = shortlist_ != nullptr;
  backend_ = runtime::make_backend(options_.device, *model_, *plan_, options_.threads, options_.weight_dtype);
  search_ = std::make_unique<runtime::Search>(*plan_, model_->config());
  search_->shortlist = shortlist_.get();
  search_->allow_unk = model_->decoding_defaults().allow_unk;
  // The search skips the unknown token through a spare top-k candidate a row (top_k_has_spare);
  // without one it would come out.
  if (!search_->allow_unk && !backend_->top_k_has_spare())
    throw Error(std::string("device ") + device_name(options_.device) + ": beam " + std::to_string(plan_->max_beam) +
                " leaves no spare top-k candidate to skip the unknown token (the model's decoding.allow_unk is 0): use a smaller beam");
  batch_results_.resize(plan_->max_sentences);
  batch_scores_.resize(plan_->max_sentences);
}

Translator::~Translator() {
  async_.reset();  // first: queued calls still use the plan, backend and search
}

int64_t Translator::max_target_len() const { return plan_->max_target_len; }
size_t Translator::arena_bytes() const { return backend_->arena_bytes(); }
std::optional<DeviceUsage> Translator::device_usage() const { return backend_->device_usage(); }

void Translator::translate_ids(const std::vector<std::vector<int32_t>>& sources,
                               const TranslateOptions& given_options,
                               std::vector<TokenTranslation>& results,
                               const std::vector<std::vector<int32_t>>& target_prefix) {
  std::lock_guard<std::mutex> lock(mutex_);
  const TranslateOptions options = given_options.with_defaults(model_->decoding_defaults());
  const ModelConfig& config = model_->config();
  const int64_t beam = options.beam == 0 ? plan_->max_beam : options.beam;
  if (beam < 1 || beam > plan_->max_beam)
    throw Error("beam " + std::to_string(options.beam) + " is outside the translator's 1.." +
                std::to_string(plan_->max_beam));
  check_options(options, beam);
  if (!target_prefix.empty() && target_prefix.size() != sources.size())
    throw Error("target_prefix has " + std::to_string(target_prefix.size()) + " entries for " +
                std::to_string(sources.size()) + " sources");
  const bool has_prefix = std::any_of(target_prefix.begin(), target_prefix.end(),
                                      [](const std::vector<int32_t>& p) { return !p.empty(); });
  if (!backend_->logits_on_host()) {
    const char* option = options.sampling()                  ? "sampling (sampling_topk != 1)"
                         : *options.repetition_penalty != 1.0f ? "repetition_penalty"
                         : *options.no_repeat_ngram_size > 0   ? "no_repeat_ngram_size"
                         : options.min_decoding_length > 0     ? "min_decoding_length"
                         : options.disable_unk                 ? "disable_unk"
                         : has_prefix                         ? "target_prefix"
                                                              : nullptr;
    if (option != nullptr)
      throw Error(std::string("device ") + device_name(options_.device) + ": " + option +
                  " is not implemented on this device (CPU only)");
  }
  for (size_t i = 0; i < target_prefix.size(); ++i) {
    const int64_t source_tokens = static_cast<int64_t>(sources[i].size()) + 1;
    const int64_t limit = runtime::max_output_length(*plan_, options, source_tokens);
    if (static_cast<int64_t>(target_prefix[i].size()) > limit)
      throw Error("sentence " + std::to_string(i + 1) + ": a target prefix of " +
                  std::to_string(target_prefix[i].size()) + " tokens is longer than its output limit of " +
                  std::to_string(limit));
    for (int32_t id : target_prefix[i])
      if (id < 0 || static_cast<uint32_t>(id) >= config.target_vocab_size || id == config.eos_id)
        throw Error("sentence " + std::to_string(i + 1) + ": target prefix token id " + std::to_string(id) +
                    (id == config.eos_id ? " is EOS" : " is outside the target vocabulary of " +
                                                           std::to_string(config.target_vocab_size)));
  }
  check_sources(sources);

  results.resize(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    if (!sources[i].empty()) continue;
    // An empty line translates to an empty line, without running the model.
    auto& hypotheses = results[i].hypotheses;
    hypotheses.resize(1);
    hypotheses[0].ids.clear();
    hypotheses[0].score = hypotheses[0].log_prob = 0.0f;
    if (options.callback) options.callback({i, 0, -1, 0});
  }
  run_batches(sources, target_prefix, /*skip_empty=*/true, options, [&](int64_t count, int64_t source_len, size_t first) {
    for (int64_t k = 0; k < count; ++k) batch_results_[k] = &results[order_[first + k]];
    search_->translate(*backend_, count, source_len, beam, options, batch_results_.data());
  });
}

void Translator::check_sources(const std::vector<std::vector<int32_t>>& sources) const {
  const ModelConfig& config = model_->config();
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
}

template <typename Run>
void Translator::run_batches(const std::vector<std::vector<int32_t>>& sources,
                             const std::vector<std::vector<int32_t>>& targets, bool skip_empty,
                             const TranslateOptions& options, Run&& run) {
  const ModelConfig& config = model_->config();
  // Longest first, so each batch pads little; equal lengths keep input order. (order_ keeps its
  // storage between calls.)
  order_.clear();
  for (size_t i = 0; i < sources.size(); ++i)
    if (!skip_empty || !sources[i].empty()) order_.push_back(static_cast<int32_t>(i));
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    if (sources[a].size() != sources[b].size()) return sources[a].size() > sources[b].size();
    return a < b;
  });
  last_call_batches_ = 0;
  // 0 leaves only the plan's limit; a tokens budget counts padded source tokens.
  const int64_t batch_limit = options.max_batch_size;
  auto batch_full = [&](int64_t count, int64_t source_len) {
    if (count >= plan_->max_sentences) return true;
    if (batch_limit == 0 || count == 0) return false;
    return options.batch_type == BatchType::examples ? count >= batch_limit
                                                     : (count + 1) * source_len > batch_limit;
  };
  size_t next = 0;
  while (next < order_.size()) {
    const int64_t source_len = static_cast<int64_t>(sources[order_[next]].size()) + 1;
    int32_t* staged = search_->source_ids();
    int32_t* lengths = search_->source_lengths();
    int64_t* indices = search_->sentence_indices();
    const std::vector<int32_t>** prefixes = search_->target_prefixes();
    const size_t first = next;
    int64_t count = 0;
    while (next < order_.size() && !batch_full(count, source_len)) {
      const int32_t index = order_[next];
      const auto& ids = sources[index];
      int32_t* row = staged + count * source_len;
      std::copy(ids.begin(), ids.end(), row);
      row[ids.size()] = config.eos_id;
      std::fill(row + ids.size() + 1, row + source_len, config.pad_id);
      lengths[count] = static_cast<int32_t>(ids.size() + 1);
      indices[count] = index;
      prefixes[count] = !targets.empty() && !targets[index].empty() ? &targets[index] : nullptr;
      ++count;
      ++next;
    }
    run(count, source_len, first);
    ++last_call_batches_;
  }
}

float ScoringResult::log_prob() const { return std::accumulate(log_probs.begin(), log_probs.end(), 0.0f); }

void Translator::score_ids(const std::vector<std::vector<int32_t>>& sources,
                           const std::vector<std::vector<int32_t>>& targets, const TranslateOptions& options,
                           std::vector<ScoringResult>& results) {
  std::lock_guard<std::mutex> lock(mutex_);
  const ModelConfig& config = model_->config();
  if (targets.size() != sources.size())
    throw Error("targets has " + std::to_string(targets.size()) + " entries for " + std::to_string(sources.size()) +
                " sources");
  if (options.max_batch_size < 0)
    throw Error("max_batch_size must be 0 (the translator's max_batch) or more, got " +
                std::to_string(options.max_batch_size));
  if (!backend_->logits_on_host())
    throw Error(std::string("device ") + device_name(options_.device) +
                ": scoring is not implemented on this device (CPU only)");
  check_sources(sources);
  for (size_t i = 0; i < targets.size(); ++i) {
    if (static_cast<int64_t>(targets[i].size()) + 1 > plan_->max_target_len)
      throw Error("sentence " + std::to_string(i + 1) + ": a target of " + std::to_string(targets[i].size() + 1) +
                  " tokens with EOS is longer than the translator's longest output of " +
                  std::to_string(plan_->max_target_len));
    for (int32_t id : targets[i])
      if (id < 0 || static_cast<uint32_t>(id) >= config.target_vocab_size || id == config.eos_id)
        throw Error("sentence " + std::to_string(i + 1) + ": target token id " + std::to_string(id) +
                    (id == config.eos_id ? " is EOS" : " is outside the target vocabulary of " +
                                                           std::to_string(config.target_vocab_size)));
  }
  results.resize(sources.size());
  run_batches(sources, targets, /*skip_empty=*/false, options, [&](int64_t count, int64_t source_len, size_t first) {
    for (int64_t k = 0; k < count; ++k) batch_scores_[k] = &results[order_[first + k]];
    search_->score(*backend_, count, source_len, batch_scores_.data());
  });
}

void Translator::encode_texts(const std::vector<std::string>& sources, const std::vector<std::string>& targets,
                              const char* targets_name, std::vector<std::vector<int32_t>>& source_ids,
                              std::vector<std::vector<int32_t>>& target_ids) const {
  if (!targets.empty() && targets.size() != sources.size())
    throw Error(std::string(targets_name) + " has " + std::to_string(targets.size()) + " entries for " +
                std::to_string(sources.size()) + " sources");
  source_ids.assign(sources.size(), {});
  target_ids.assign(targets.size(), {});
  for (size_t i = 0; i < sources.size(); ++i) {
    try {
      // Only the head of a source that the plan can take is tokenized: a huge text costs
      // neither the memory nor the time of tokenizing all of it.
      bool longer = false;
      source_ids[i] = model_->encode_source(sources[i], static_cast<size_t>(plan_->max_source_len - 1), &longer);
      if (longer)
        throw Error("more than the translator's max_source_len " + std::to_string(plan_->max_source_len) +
                    " tokens with EOS");
      if (!targets.empty()) target_ids[i] = model_->encode_target(targets[i]);
    } catch (const Error& e) {
      throw Error("sentence " + std::to_string(i + 1) + ": " + e.what());
    }
  }
}

std::vector<ScoringResult> Translator::score(const std::vector<std::string>& sources,
                                             const std::vector<std::string>& targets, const TranslateOptions& options) {
  if (targets.size() != sources.size())
    throw Error("targets has " + std::to_string(targets.size()) + " entries for " + std::to_string(sources.size()) +
                " sources");
  std::vector<std::vector<int32_t>> source_ids, target_ids;
  encode_texts(sources, targets, "targets", source_ids, target_ids);
  std::vector<ScoringResult> results;
  score_ids(source_ids, target_ids, options, results);
  return results;
}

std::vector<TranslationResult> Translator::translate(const std::vector<std::string>& sources,
                                                     const TranslateOptions& options,
                                                     const std::vector<std::string>& target_prefix) {
  const Paragraphs paragraphs(sources, !options.disable_sentence_splitting);
  // A text's target prefix starts its first sentence.
  std::vector<std::string> prefixes;
  if (!target_prefix.empty()) {
    if (target_prefix.size() != sources.size())
      throw Error("target_prefix has " + std::to_string(target_prefix.size()) + " entries for " +
                  std::to_string(sources.size()) + " sources");
    prefixes.resize(paragraphs.sentences().size());
    for (size_t i = 0; i < sources.size(); ++i) prefixes[paragraphs.first(i)] = target_prefix[i];
  }
  std::vector<std::vector<int32_t>> ids, prefix_ids;
  try {
    encode_texts(paragraphs.sentences(), prefixes, "target_prefix", ids, prefix_ids);
  } catch (const Error& e) {
    if (paragraphs.sentences().size() == sources.size()) throw;
    throw Error(std::string(e.what()) + " (sentences counted after splitting the texts)");
  }
  // The callback hears of texts and their sentences, not of the split sentences' list.
  TranslateOptions sentence_options = options;
  std::vector<size_t> text_of(paragraphs.sentences().size());
  for (size_t t = 0; t < paragraphs.texts(); ++t)
    for (size_t k = 0; k < paragraphs.count(t); ++k) text_of[paragraphs.first(t) + k] = t;
  if (options.callback)
    sentence_options.callback = [&](const StreamStep& step) {
      const size_t text = text_of[step.index];
      options.callback({text, step.index - paragraphs.first(text), step.id, step.length});
    };
  std::vector<TokenTranslation> tokens;
  translate_ids(ids, sentence_options, tokens, prefix_ids);
  return join_translations(*model_, paragraphs, tokens);
}

std::future<std::vector<TranslationResult>> Translator::translate_async(std::vector<std::string> sources,
                                                                        TranslateOptions options,
                                                                        std::vector<std::string> target_prefix) {
  auto task = std::make_shared<std::packaged_task<std::vector<TranslationResult>()>>(
      [this, sources = std::move(sources), options = std::move(options), target_prefix = std::move(target_prefix)] {
        return translate(sources, options, target_prefix);
      });
  auto result = task->get_future();
  std::call_once(async_started_, [this] { async_ = std::make_unique<runtime::AsyncQueue>(); });
  async_->push([task] { (*task)(); });
  return result;
}

std::vector<TranslationResult> join_translations(const Model& model, const Paragraphs& paragraphs,
                                                 const std::vector<TokenTranslation>& sentences) {
  std::vector<TranslationResult> results(paragraphs.texts());
  std::vector<std::string> texts(sentences.size());
  for (size_t t = 0; t < paragraphs.texts(); ++t) {
    size_t n_best = 0;
    for (size_t i = paragraphs.first(t); i < paragraphs.first(t) + paragraphs.count(t); ++i)
      n_best = std::max(n_best, sentences[i].hypotheses.size());
    for (size_t h = 0; h < n_best; ++h) {
      Hypothesis out;
      for (size_t i = paragraphs.first(t); i < paragraphs.first(t) + paragraphs.count(t); ++i) {
        const auto& hypotheses = sentences[i].hypotheses;
        const TokenHypothesis& part = hypotheses[std::min(h, hypotheses.size() - 1)];
        // Without a tokenizer there is no text (callers of ids, such as xf-run --ids, read .ids).
        if (model.has_tokenizer()) texts[i] = model.decode_target(part.ids.data(), part.ids.size());
        out.ids.insert(out.ids.end(), part.ids.begin(), part.ids.end());
        out.score += part.score;
        out.log_prob += part.log_prob;
      }
      out.text = paragraphs.join(t, texts);
      results[t].hypotheses.push_back(std::move(out));
    }
  }
  return results;
}

}  // namespace xf
