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
// translation use one Translator per thread. backend() is for single-threaded tests.
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
  int threads = 1;           // CPU threads for the kernels
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

struct TranslateOptions {
  int beam = 0;                 // 0: the Translator's beam. 1: greedy search.
  int n_best = 1;               // hypotheses returned per sentence, <= beam
  float length_penalty = 0.6f;  // GNMT alpha: score = log_prob / ((5 + length) / 6)^alpha
  // A sentence's longest output: max_len_a * source_tokens + max_len_b (source tokens with EOS,
  // output tokens with EOS), capped by the plan.
  float max_len_a = 1.0f;
  int max_len_b = 50;
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
  std::vector<TranslationResult> translate(const std::vector<std::string>& sources,
                                           const TranslateOptions& options = {});

  // The same over token ids: each source is SentencePiece piece ids without EOS (appended
  // here). results is resized to sources.size(); reusing it between calls keeps its storage,
  // so that steady-state translation performs no heap allocation.
  void translate_ids(const std::vector<std::vector<int32_t>>& sources,
                     const TranslateOptions& options, std::vector<TokenTranslation>& results);

  const Model& model() const { return *model_; }
  const TranslatorOptions& options() const { return options_; }
  // The plan's limits and size.
  int64_t max_target_len() const;
  size_t arena_bytes() const;

  // The backend, for tests that compare intermediate values with a reference.
  runtime::Backend& backend() { return *backend_; }

 private:
  std::shared_ptr<const Model> model_;
  TranslatorOptions options_;
  std::unique_ptr<runtime::MemoryPlan> plan_;
  std::unique_ptr<runtime::Backend> backend_;
  std::unique_ptr<runtime::Search> search_;
  std::mutex mutex_;  // one translation at a time: the plan's buffers are shared by all calls
  std::vector<int32_t> order_;  // sentence indices sorted by length; grows on the first call
  std::vector<TokenTranslation*> batch_results_;  // [max_batch] where a batch's results go
};

}  // namespace xf
