#pragma once
// The Translator's option and result types (translator.h), apart from the class that uses them,
// so that the runtime's inner parts (memory plan, search, backends) include these without
// including the Translator.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "xf/dtype.h"
#include "xf/export.h"

namespace xf {

struct DecodingDefaults;  // xf/model.h: the model file's decoding.* settings

enum class Device { cpu, cuda };
XF_API const char* device_name(Device device);      // "cpu", "cuda"
XF_API Device parse_device(const std::string& name);  // throws xf::Error on an unknown name

struct TranslatorOptions {
  Device device = Device::cpu;
  int max_batch = 32;        // sentences decoded together
  int max_source_len = 256;  // source tokens, EOS included
  int max_beam = 0;          // the widest beam a call may ask for; 0: the model's decoding.beam
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
  // A lexical shortlist (Marian's): the output layer of each batch covers only the target ids
  // its source can translate to (runtime/src/output_shortlist.h). "": the model file's own, when
  // it has one; "none": never; else a file beside the model: Marian's binary lex.*.s2t.bin
  // (marian-conv; its own counts) or text lex.s2t (extract_lex), pruned as Marian's
  // `--shortlist FILE FIRST BEST THRESHOLD`: ids [0, shortlist_first) always in, at most
  // shortlist_best candidates per source piece, each with a probability above the threshold.
  // CPU only; forced scoring (score_ids) always uses the full vocabulary.
  std::string shortlist;
  int shortlist_first = 100;
  int shortlist_best = 100;
  float shortlist_threshold = 0.0f;

  // These options with max_beam given its value when 0: the model's decoding.beam (xf's
  // default when the file sets none). The one place of that rule; the memory plan is the one
  // place that checks the limit (make_memory_plan: 1 up to the target vocabulary).
  TranslatorOptions with_defaults(const DecodingDefaults& defaults) const;
};

// How a call cuts its sentences into batches (CTranslate2's batch_type).
enum class BatchType { examples, tokens };
XF_API const char* batch_type_name(BatchType type);         // "examples", "tokens"
XF_API BatchType parse_batch_type(const std::string& name);  // throws xf::Error on an unknown name

// How a finished hypothesis's log-probability is normalized by its length (tokens, EOS
// included) with the length penalty alpha: gnmt divides by ((5 + length) / 6)^alpha (GNMT, xf's
// own models); power by length^alpha (Marian's normalize, transformers' length_penalty), so that
// a model imported from either ranks its beam as its own engine does.
enum class LengthNormalization { gnmt, power };
XF_API const char* length_normalization_name(LengthNormalization normalization);  // "gnmt", "power"
// Throws xf::Error on an unknown name.
XF_API LengthNormalization parse_length_normalization(const std::string& name);
// The divisor of a hypothesis's log-probability: its score is log_prob / length_normalizer(...).
XF_API float length_normalizer(LengthNormalization normalization, int64_t length, float alpha);

// One step of a streamed translation (TranslateOptions::callback).
struct StreamStep {
  size_t index = 0;     // the source in the call (translate(): the text)
  size_t sentence = 0;  // translate(): the sentence of that text (sentence splitting); else 0
  int32_t id = -1;      // the output's next token id, or -1: that sentence's output is complete
  // With id -1: the output's tokens, those streamed before unless the loop guard cut the end of
  // them (greedy search streams tokens before the guard can see a loop).
  size_t length = 0;
};
using StreamCallback = std::function<void(const StreamStep&)>;

// Per-call decoding options; names follow CTranslate2's where the meaning is the same.
// An option left unset (std::nullopt) takes the model's value (its DecodingDefaults: the
// file's decoding.* metadata), else xf's default written beside it.
struct TranslateOptions {
  int beam = 0;                 // 0: the Translator's max_beam. 1: greedy search.
  int n_best = 1;               // hypotheses returned per sentence, <= beam
  // The length penalty alpha (default 0.6) of length_normalization (default gnmt).
  std::optional<float> length_penalty;
  std::optional<LengthNormalization> length_normalization;
  // A sentence's longest output: max_len_a * source_tokens + max_len_b (source tokens with EOS,
  // output tokens with EOS), capped by the plan.
  float max_len_a = 1.0f;
  int max_len_b = 50;
  // A cap on every sentence's output, in generated tokens (EOS and target prefix included);
  // 0: the model's decoding.max_decoding_length, else only the rule above.
  int max_decoding_length = 0;
  // At least this many tokens before EOS (target prefix included): EOS is banned until then,
  // unless the length limits above end the output first (0: none; CTranslate2's default is 1).
  int min_decoding_length = 0;
  // The unknown token (the model's unk_id) is never generated.
  bool disable_unk = false;
  // The loop guard, on unless disabled: a hypothesis already longer than its source (tokens with
  // EOS) whose last 4 tokens occur for the third time ends there, cut back to where the 4-gram
  // began its second time (a model in a loop repeats a phrase to the length limit). Normal
  // outputs are rarely longer than the source and never repeat a 4-gram three times, so it
  // leaves them as they are. The hypothesis keeps the log-probability of all it decoded.
  bool disable_loop_guard = false;
  // Text only (translate(), xf_translate, Python's text sources, xf-run without --ids): each text
  // is a paragraph, split into sentences (xf/sentences.h) that are translated as one batch with
  // the call's other sentences and joined back with the text's own spacing. On by default: a
  // one-sentence text is translated exactly as without splitting, and a paragraph far better
  // (docs/BENCHMARKS.md). A text's n-best hypothesis i joins each sentence's hypothesis i (its
  // last when it has fewer), its ids, score and log_prob are theirs concatenated and summed; a
  // target prefix starts the first sentence.
  bool disable_sentence_splitting = false;

  // Streaming: called on the translating thread with each output token as soon as it is final,
  // then with id -1 when the sentence's output is complete. Greedy search: each token as it is
  // chosen (within the decoder step that chose it). Beam search: the best hypothesis's tokens
  // once the sentence's search has ended (its ranking is only final then). The tokens of a
  // sentence come in order; sentences decoded in the same batch interleave. It must not call
  // the Translator. Calling it allocates nothing (std::function; the options, and so the
  // callable, are copied at each call: one of more than two pointers may allocate there).
  StreamCallback callback;

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
  float score = 0.0f;        // log_prob / length_normalizer(length with EOS)
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

}  // namespace xf
