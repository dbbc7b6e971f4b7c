#pragma once
// The Translator: a model plus a memory plan sized, once, for the limits given at construction.
//
//   auto model = xf::Model::open("enfr.xfm");
//   xf::Translator translator(model, {xf::Device::cpu, /*max_batch=*/32, /*max_source_len=*/256,
//                                     /*max_beam=*/4, /*threads=*/2});
//   auto results = translator.translate({"Hello world."});
//   results[0].hypotheses[0].text
//
// All working memory (activations, the decoder's K/V caches, search bookkeeping) is taken when
// the Translator is built. The token-level translate_ids() allocates nothing after its first
// call; the text-level translate() adds SentencePiece tokenization and result strings, which do.
// Threads: a Model may be shared by any number of Translators on any threads. A Translator's
// translate() and translate_ids() may be called from any thread; calls from several threads at
// once are serialized by a mutex inside (each waits for the one before), so for parallel
// translation use one Translator per thread.
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "xf/model.h"
#include "xf/sentences.h"
#include "xf/translation_types.h"

namespace xf {

// The library's release, "MAJOR.MINOR.PATCH" (xf_version() in the C API).
XF_API const char* version();

namespace runtime {
class AsyncQueue;
class Backend;
struct MemoryPlan;
class Search;
class OutputShortlist;
}  // namespace runtime

class XF_API Translator {
 public:
  // Throws xf::Error when an option is out of range or the device is not available.
  Translator(std::shared_ptr<const Model> model, const TranslatorOptions& options = {});
  ~Translator();
  Translator(const Translator&) = delete;
  Translator& operator=(const Translator&) = delete;

  // Translates any number of texts (each split into sentences unless
  // options.disable_sentence_splitting; the sentences decoded in batches of max_batch, sorted by
  // length); results come back in input order. An empty line gives one empty hypothesis.
  // Throws xf::Error naming the sentence when one is not valid UTF-8 or exceeds the plan.
  // target_prefix: empty, or one text per source that its translations start with.
  std::vector<TranslationResult> translate(const std::vector<std::string>& sources,
                                           const TranslateOptions& options = {},
                                           const std::vector<std::string>& target_prefix = {});

  // translate() on the Translator's one worker thread (started by the first call): returns at
  // once, the future holds the results (or the xf::Error). Calls queue and run one at a time in
  // the order they were made; destroying the Translator first finishes the queued ones. With
  // options.callback set, tokens stream from that thread while the caller's goes on.
  std::future<std::vector<TranslationResult>> translate_async(std::vector<std::string> sources,
                                                              TranslateOptions options = {},
                                                              std::vector<std::string> target_prefix = {});

  // The same over token ids: each source is SentencePiece piece ids without EOS (appended
  // here). results is resized to sources.size(); reusing it between calls keeps its storage,
  // so that steady-state translation performs no heap allocation.
  // target_prefix: empty, or one entry per source: target ids (no EOS) every hypothesis of that
  // sentence starts with (forced, scored, and part of the output); an empty entry forces nothing.
  void translate_ids(const std::vector<std::vector<int32_t>>& sources,
                     const TranslateOptions& options, std::vector<TokenTranslation>& results,
                     const std::vector<std::vector<int32_t>>& target_prefix = {});

  // The log-probabilities of given translations (teacher forcing): targets[i], piece ids without
  // EOS, as the translation of sources[i] (ids without EOS, as translate_ids takes them), EOS
  // scored last. Batched like translate_ids (options: max_batch_size and batch_type only).
  // Throws xf::Error naming the sentence when a source or target is beyond the plan (a target
  // with EOS longer than max_target_len()) or holds a bad id; on a device that keeps the logits
  // to itself (CUDA), that scoring is CPU only.
  void score_ids(const std::vector<std::vector<int32_t>>& sources, const std::vector<std::vector<int32_t>>& targets,
                 const TranslateOptions& options, std::vector<ScoringResult>& results);
  // The same over text: SentencePiece encodes both sides.
  std::vector<ScoringResult> score(const std::vector<std::string>& sources, const std::vector<std::string>& targets,
                                   const TranslateOptions& options = {});

  const Model& model() const { return *model_; }
  const TranslatorOptions& options() const { return options_; }
  // The plan's limits and size.
  int64_t max_target_len() const;
  size_t arena_bytes() const;
  // The device's memory and allocation counts (CUDA; nullopt on the CPU): xf-bench reports them,
  // and the CUDA allocation test checks that translating leaves the allocation count unchanged.
  std::optional<DeviceUsage> device_usage() const;
  // Batches the last translate_ids() call decoded (how max_batch_size/batch_type cut it).
  int64_t last_call_batches() const { return last_call_batches_; }

 private:
  std::shared_ptr<const Model> model_;
  TranslatorOptions options_;
  std::unique_ptr<runtime::MemoryPlan> plan_;
  std::unique_ptr<runtime::Backend> backend_;
  std::unique_ptr<runtime::OutputShortlist> shortlist_;  // null: none (declared before the search that uses it)
  std::unique_ptr<runtime::Search> search_;
  std::mutex mutex_;  // one translation at a time: the plan's buffers are shared by all calls
  std::vector<int32_t> order_;  // sentence indices sorted by length; grows on the first call
  // Text -> ids for translate() and score(): each source within the plan (only its head is
  // tokenized; a longer one is an xf::Error), each target (none when `targets` is empty);
  // errors name the sentence (or `targets_name` when the counts differ).
  void encode_texts(const std::vector<std::string>& sources, const std::vector<std::string>& targets,
                    const char* targets_name, std::vector<std::vector<int32_t>>& source_ids,
                    std::vector<std::vector<int32_t>>& target_ids) const;
  // Checks sources against the plan and the vocabulary (xf::Error naming the sentence).
  void check_sources(const std::vector<std::vector<int32_t>>& sources) const;
  // Sorts non-empty sources' indices into order_ (longest first) and cuts them into batches under
  // the plan and options.max_batch_size/batch_type; stages each batch's sources (and targets, as
  // target prefixes, when given) into the search and calls run(count, source_len, indices).
  template <typename Run>
  void run_batches(const std::vector<std::vector<int32_t>>& sources, const std::vector<std::vector<int32_t>>& targets,
                   bool skip_empty, const TranslateOptions& options, Run&& run);

  std::vector<TokenTranslation*> batch_results_;  // [max_batch] where a batch's results go
  std::vector<ScoringResult*> batch_scores_;      // [max_batch] where a batch's scores go
  int64_t last_call_batches_ = 0;
  std::once_flag async_started_;
  std::unique_ptr<runtime::AsyncQueue> async_;  // translate_async's worker and queue
};

// Each text's results from its sentences' (translate_ids over paragraphs.sentences()'s ids):
// their text joined with the paragraph's spacing (TranslateOptions::disable_sentence_splitting
// says how n-best lists join). What translate() returns; for interfaces that tokenize themselves.
// A model without a tokenizer gives empty texts (the ids are joined all the same).
XF_API std::vector<TranslationResult> join_translations(const Model& model, const Paragraphs& paragraphs,
                                                        const std::vector<TokenTranslation>& sentences);

}  // namespace xf
