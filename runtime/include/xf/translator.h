#pragma once
// The Translator: a model plus a memory plan sized, once, for the limits given at construction.
//
//   auto model = xf::Model::open("enfr.xfm");
//   xf::Translator translator(model, {xf::Device::cpu, /*max_batch=*/32, /*max_source_len=*/256,
//                                     /*beam=*/4, /*threads=*/2});
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
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "xf/model.h"

namespace xf {

// The library's release, "MAJOR.MINOR.PATCH" (xf_version() in the C API).
XF_API const char* version();

enum class Device { cpu, cuda };
XF_API const char* device_name(Device device);      // "cpu", "cuda"
XF_API Device parse_device(const std::string& name);  // throws xf::Error on an unknown name

struct TranslatorOptions {
  Device device = Device::cpu;
  int max_batch = 32;        // sentences decoded together
  int max_source_len = 256;  // source tokens, EOS included
  int beam = 0;              // the widest beam a call may ask for; 0: the model's decoding.beam
                             // (DecodingDefaults, model.h), else 4
  int threads = 1;           // CPU threads for the kernels; 0: every core
  // Weight matrices converted at load: f32 (widens f16/bf16/int8) or int8 (per-row symmetric
  // quantization of f32/f16/bf16). Unset: as stored, with f16/bf16 widened to f32 on the CPU.
  // On CUDA this is the compute type: f32, or f16 (f32 accumulation); int8 is CPU-only; unset
  // computes in f16 when the matrices are stored in f16/bf16, else in f32.
  std::optional<DType> weight_dtype;
  // The plan's longest output, in generated tokens (EOS included):
  // max_len_a * max_source_len + max_len_b, capped by the model's max_positions.
  float max_len_a = 1.0f;
  int max_len_b = 50;
};

// How a call cuts its sentences into batches (CTranslate2's batch_type).
enum class BatchType { examples, tokens };
XF_API const char* batch_type_name(BatchType type);         // "examples", "tokens"
XF_API BatchType parse_batch_type(const std::string& name);  // throws xf::Error on an unknown name

// Per-call decoding options; names follow CTranslate2's where the meaning is the same.
// An option left unset (std::nullopt) takes the model's value (its DecodingDefaults: the
// file's decoding.* metadata), else xf's default written beside it.
struct TranslateOptions {
  int beam = 0;                 // 0: the Translator's beam. 1: greedy search.
  int n_best = 1;               // hypotheses returned per sentence, <= beam
  // GNMT alpha: score = log_prob / ((5 + length) / 6)^alpha (default 0.6).
  std::optional<float> length_penalty;
  // A sentence's longest output: max_len_a * source_tokens + max_len_b (source tokens with EOS,
  // output tokens with EOS), capped by the plan.
  float max_len_a = 1.0f;
  int max_len_b = 50;
  // A cap on every sentence's output, in generated tokens (EOS and target prefix included);
  // 0: only the rule above.
  int max_decoding_length = 0;
  // At least this many tokens before EOS (target prefix included): EOS is banned until then,
  // unless the length limits above end the output first (0: none; CTranslate2's default is 1).
  int min_decoding_length = 0;
  // The unknown token (the model's unk_id) is never generated.
  bool disable_unk = false;

  // Batches: at most max_batch_size sentences (batch_type examples) or sentences x padded
  // source length tokens (batch_type tokens; a longer sentence still makes a batch alone);
  // 0: the Translator's max_batch. Never more sentences than the Translator's max_batch.
  int max_batch_size = 0;
  BatchType batch_type = BatchType::examples;

  // Random sampling, greedy search only (beam 1): a sentence's next token is drawn from the
  // sampling_topk most likely tokens (0: the whole vocabulary; 1: no sampling, the argmax),
  // cut to the smallest set whose probability reaches sampling_topp, with the probabilities
  // raised to 1 / sampling_temperature. Reproducible: each sentence draws from its own stream,
  // seeded from seed and its index in the call, so the same call gives the same outputs.
  int sampling_topk = 1;
  float sampling_topp = 1.0f;
  float sampling_temperature = 1.0f;
  uint64_t seed = 0;

  // The logits of tokens already in a hypothesis (target prefix included) are divided by
  // repetition_penalty when positive, multiplied when negative (default 1: off; CTRL's rule).
  std::optional<float> repetition_penalty;
  // A token that would repeat an n-gram of this size already in the hypothesis is banned
  // (default 0: off).
  std::optional<int> no_repeat_ngram_size;

  // Whether an option needs the raw logits on the host (the CPU backend; CUDA refuses these).
  bool sampling() const { return sampling_topk != 1; }
  bool adjusts_logits() const {
    return repetition_penalty.value_or(1.0f) != 1.0f || no_repeat_ngram_size.value_or(0) > 0 ||
           min_decoding_length > 0 || disable_unk;
  }
  // These options with every unset one given its value: the model's, else xf's default.
  TranslateOptions with_defaults(const DecodingDefaults& defaults) const;
};

struct TokenHypothesis {
  std::vector<int32_t> ids;  // target ids, without BOS and EOS
  float score = 0.0f;        // log_prob with the length penalty applied
  float log_prob = 0.0f;     // sum of the token log-probabilities, EOS included when produced
};

struct TokenTranslation {
  std::vector<TokenHypothesis> hypotheses;  // best first, n_best of them
};

struct Hypothesis {
  std::string text;
  std::vector<int32_t> ids;
  float score = 0.0f;
  float log_prob = 0.0f;
};

// Device memory in use (cudaMemGetInfo: every context on the device, the CUDA context included)
// and the device and pinned-host allocation calls xf's CUDA code made since the process started.
struct DeviceUsage {
  size_t used_bytes = 0;
  uint64_t allocations = 0;
};

struct TranslationResult {
  std::vector<Hypothesis> hypotheses;  // best first, n_best of them
};

// A given translation scored by the model (CTranslate2's score_batch): each target token's
// log-probability given the source and the tokens before it.
struct ScoringResult {
  std::vector<int32_t> ids;      // the target ids, then EOS
  std::vector<float> log_probs;  // one per id
  float log_prob() const;        // their sum: the translation's log-probability
};

namespace runtime {
class Backend;
struct MemoryPlan;
class Search;
}  // namespace runtime

class XF_API Translator {
 public:
  // Throws xf::Error when an option is out of range or the device is not available.
  Translator(std::shared_ptr<const Model> model, const TranslatorOptions& options = {});
  ~Translator();
  Translator(const Translator&) = delete;
  Translator& operator=(const Translator&) = delete;

  // Translates any number of sentences (decoded in batches of max_batch, sorted by length);
  // results come back in input order. An empty line gives one empty hypothesis.
  // Throws xf::Error naming the sentence when one is not valid UTF-8 or exceeds the plan.
  // target_prefix: empty, or one text per source that its translations start with.
  std::vector<TranslationResult> translate(const std::vector<std::string>& sources,
                                           const TranslateOptions& options = {},
                                           const std::vector<std::string>& target_prefix = {});

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
};

}  // namespace xf
