#pragma once
// The per-device half of the Translator. A backend owns its arena (sized from the MemoryPlan at
// construction), the prepared weights and whatever its kernels need; it runs the encoder and one
// decoder step at a time. The search (greedy, beam) runs on the host over the few numbers a step
// returns (top-k candidates per row), so a GPU backend moves only those across the bus.
//
// Rows: a decoding batch of `sentences` sentences with `beam` hypotheses each has
// sentences * beam rows, row = sentence * beam + hypothesis.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "xf/format/config.h"
#include "xf/format/model_file.h"
#include "xf/translation_types.h"

namespace xf {
class Model;
struct TensorView;
}

namespace xf::runtime {

struct MemoryPlan;

class Backend {
 public:
  virtual ~Backend() = default;

  // Runs the encoder and computes every decoder layer's cross-attention K/V, once per batch.
  // source_ids: [sentences, source_len], padded with pad_id after each sentence's length.
  // source_lengths: [sentences], each in 1..source_len. Sizes within the plan.
  virtual void encode(const int32_t* source_ids, const int32_t* source_lengths, int64_t sentences,
                      int64_t source_len) = 0;

  // One decoder step for the batch last encoded: every row feeds tokens[row] at position
  // `step` (0 for BOS) and writes its self-attention K/V at that position; computes the logits.
  // tokens: [sentences * beam]. live (may be null: every row): [sentences], each in 0..beam:
  // only the first live[s] rows of sentence s are computed (a beam's finished hypotheses cost
  // nothing); the other rows' K/V at `step` and top_k() values are then left undefined, and
  // host_logits() holds the computed rows only, in order.
  virtual void decode_step(const int32_t* tokens, int64_t beam, int64_t step,
                           const int32_t* live = nullptr) = 0;

  // On the last step's logits: per row, log_softmax + row_offsets[row] (may be null), then the
  // k best values (descending) and their token ids. values, ids: [rows, k], host memory.
  virtual void top_k(const float* row_offsets, int64_t k, float* values, int32_t* ids) = 0;
  // Whether top_k() also takes k = max_beam + 1: a spare candidate a row, for a search that
  // skips a token after the softmax (the unknown token, DecodingDefaults::allow_unk); a
  // Translator for a model that needs it refuses a plan without it.
  virtual bool top_k_has_spare() const { return false; }

  // The last step's logits [rows, target_vocab] in host memory, writable: the search adjusts
  // them before top_k() (repetition penalty, n-gram bans) and reads them for sampling and forced
  // target prefixes. Null when the logits stay on the device: those options are then refused.
  virtual float* host_logits() { return nullptr; }
  // Whether host_logits() gives the logits (without computing anything).
  virtual bool logits_on_host() const { return false; }

  // A lexical shortlist for the batch last encoded (output_shortlist.h): the steps that follow
  // compute the output layer over these target ids alone (ascending, `count` of them; count 0:
  // the whole vocabulary again; encode() resets it), softmax and top_k() over them, and top_k()
  // gives token ids. sentence_targets (null: none): [the batch's sentences, target vocab], 1
  // where an id is in that sentence's own shortlist: each row's softmax and top-k then run over
  // its sentence's own ids alone, so that a sentence decodes as it would alone.
  // host_logits() then spreads them over whole rows, the other ids at -inf. ids and
  // sentence_targets must stay valid until the next encode(). Needs a plan with output_shortlist;
  // a device without it throws.
  virtual void restrict_output(const int32_t* ids, int64_t count, const uint8_t* sentence_targets = nullptr);

  // Reorders the self-attention caches after a beam step: row i continues from row parents[i]
  // (positions 0..step). parents: [rows].
  virtual void reorder_cache(const int32_t* parents, int64_t step) = 0;

  // Drops the finished sentences of the batch last encoded, so that later steps compute only
  // the others: new sentence i is old sentence kept[i] (kept ascending, count >= 1). Moves the
  // cross-attention K/V and source lengths; the self-attention caches move with the
  // reorder_cache() that follows, whose parents index the rows as they were before.
  // A backend that cannot returns false from can_drop_sentences(); the search then keeps
  // finished sentences' rows until the batch ends.
  virtual bool can_drop_sentences() const { return false; }
  virtual void keep_sentences(const int32_t* kept, int64_t count);

  // Bytes of working memory the backend took at construction.
  virtual size_t arena_bytes() const = 0;
  // Device memory and allocation counts (Translator::device_usage); nullopt without a device.
  virtual std::optional<DeviceUsage> device_usage() const { return std::nullopt; }
  // (Test-only reads of intermediate values: backend_probe.h.)
};

// threads: CPU threads for kernels and oneDNN. matrix_dtype: f32 or int8 to convert the weight
// matrices to at load; unset: as stored (f16/bf16 widened to f32).
std::unique_ptr<Backend> make_cpu_backend(const Model& model, const MemoryPlan& plan, int threads,
                                          std::optional<DType> matrix_dtype = std::nullopt);

// Makes the backends of a device other than the CPU: what a device module's interface() is for
// the runtime (xf/modules/module.h). weight_dtype as TranslatorOptions::weight_dtype.
class BackendFactory {
 public:
  virtual ~BackendFactory() = default;
  virtual std::unique_ptr<Backend> make(const Model& model, const MemoryPlan& plan,
                                        std::optional<DType> weight_dtype) const = 0;
};

// The backend registry (backend_registry.cc): the CPU is built in; another device uses the
// factory registered for it, else its module, loaded on first use (libxf_cuda_runtime.so for
// cuda) and called through an adapter. Throws a one-line xf::Error naming the device and what is
// missing (xf built without it, the module, a library the module needs, the device itself).
std::unique_ptr<Backend> make_backend(Device device, const Model& model, const MemoryPlan& plan,
                                      int threads, std::optional<DType> weight_dtype);
// Makes `device` use `factory` instead of its module (tests that link a backend, e.g. over a
// host emulation, register it). The factory must outlive its use.
void register_backend_factory(Device device, const BackendFactory* factory);
// Wraps a backend made by a module for the runtime: each call goes through
// modules::call_module (what the module throws becomes this copy's xf::Error).
std::unique_ptr<Backend> adapt_module_backend(std::unique_ptr<Backend> inner);

// The CUDA backend (cuda_backend.cc, in libxf_cuda_runtime.so and the CUDA tests).
// compute_dtype: f32 or f16 (f16 storage, f32 accumulation); unset: f16 when the model's
// matrices are stored in f16/bf16, else f32. Throws xf::Error for another dtype, when no CUDA
// device is available or when the plan exceeds a CUDA kernel's limit.
std::unique_ptr<Backend> make_cuda_backend(const Model& model, const MemoryPlan& plan,
                                           std::optional<DType> compute_dtype = std::nullopt);
const BackendFactory& cuda_backend_factory();

}  // namespace xf::runtime
