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
  int beam = 4;              // the widest beam a call may ask for
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
struct TranslateOptions {
  int beam = 0;                 // 0: the Translator's beam. 1: greedy search.
  int n_best = 1;               // hypotheses returned per sentence, <= beam
  float length_penalty = 0.6f;  // GNMT alpha: score = log_prob / ((5 + length) / 6)^alpha
  // A sentence's longest output: max_len_a * source_tokens + max_len_b (source tokens with EOS,
  // output tokens with EOS), capped by the plan.
  float max_len_a = 1.0f;
  int max_len_b = 50;
  // A cap on every sentence's output, in generated tokens (EOS and target prefix included);
  // 0: only the rule above.
  int max_decoding_length = 0;

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
  // repetition_penalty when positive, multiplied when negative (1: off; CTRL's rule).
  float repetition_penalty = 1.0f;
  // A token that would repeat an n-gram of this size already in the hypothesis is banned (0: off).
  int no_repeat_ngram_size = 0;

  // Whether an option needs the raw logits on the host (the CPU backend; CUDA refuses these).
  bool sampling() const { return sampling_topk != 1; }
  bool adjusts_logits() const { return repetition_penalty != 1.0f || no_repeat_ngram_size > 0; }
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
  std::vector<TokenTranslation*> batch_results_;  // [max_batch] where a batch's results go
  int64_t last_call_batches_ = 0;
};

}  // namespace xf
