// The CPU model: batches, initialization, and the forward and backward passes of
// transformer_graph.h over CpuTrainingOps.
#include "xf/trainer/transformer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "xf/error.h"
#include "xf/format/schema.h"
#include "xf/trainer/cpu_training_ops.h"
#include "xf/trainer/transformer_graph.h"

namespace xf::trainer {

// ---- Batch -------------------------------------------------------------------------------------

void Batch::validate(const ModelConfig& config) const {
  auto fail = [](const std::string& what) { throw Error("invalid batch: " + what); };
  if (batch_size < 1) fail("batch_size must be >= 1");
  if (source_len < 1 || target_len < 1) fail("source_len and target_len must be >= 1");
  const size_t b = static_cast<size_t>(batch_size);
  if (source_ids.size() != b * source_len) fail("source_ids size is not batch_size * source_len");
  if (target_input_ids.size() != b * target_len || target_output_ids.size() != b * target_len)
    fail("target ids size is not batch_size * target_len");
  if (source_lengths.size() != b || target_lengths.size() != b) fail("lengths size != batch_size");
  if (static_cast<uint64_t>(std::max(source_len, target_len)) > config.max_positions)
    fail("sequence length " + std::to_string(std::max(source_len, target_len)) +
         " exceeds max_positions " + std::to_string(config.max_positions));
  int64_t src_tokens = 0, tgt_tokens = 0;
  for (size_t i = 0; i < b; ++i) {
    if (source_lengths[i] < 1 || source_lengths[i] > source_len)
      fail("source_lengths[" + std::to_string(i) + "] out of 1..source_len");
    if (target_lengths[i] < 1 || target_lengths[i] > target_len)
      fail("target_lengths[" + std::to_string(i) + "] out of 1..target_len");
    src_tokens += source_lengths[i];
    tgt_tokens += target_lengths[i];
  }
  auto check_ids = [&](const std::vector<int32_t>& ids, uint32_t vocab, const char* name) {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || static_cast<uint32_t>(ids[i]) >= vocab)
        fail(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
             " is outside the vocabulary of " + std::to_string(vocab));
  };
  check_ids(source_ids, config.source_vocab_size, "source_ids");
  check_ids(target_input_ids, config.target_vocab_size, "target_input_ids");
  check_ids(target_output_ids, config.target_vocab_size, "target_output_ids");
  if (src_tokens != source_tokens || tgt_tokens != target_tokens)
    fail("source_tokens/target_tokens disagree with the lengths");
}

Batch make_batch(const ModelConfig& config, const std::vector<std::vector<int32_t>>& sources,
                 const std::vector<std::vector<int32_t>>& targets, int64_t min_source_len,
                 int64_t min_target_len) {
  if (sources.size() != targets.size() || sources.empty())
    throw Error("make_batch: need as many targets as sources, at least one");
  Batch batch;
  batch.batch_size = static_cast<int64_t>(sources.size());
  batch.source_len = min_source_len;
  batch.target_len = min_target_len;
  for (size_t i = 0; i < sources.size(); ++i) {
    batch.source_len = std::max<int64_t>(batch.source_len, sources[i].size() + 1);
    batch.target_len = std::max<int64_t>(batch.target_len, targets[i].size() + 1);
  }
  const size_t b = sources.size();
  batch.source_ids.assign(b * batch.source_len, config.pad_id);
  batch.target_input_ids.assign(b * batch.target_len, config.pad_id);
  batch.target_output_ids.assign(b * batch.target_len, config.pad_id);
  for (size_t i = 0; i < b; ++i) {
    int32_t* src = &batch.source_ids[i * batch.source_len];
    std::copy(sources[i].begin(), sources[i].end(), src);
    src[sources[i].size()] = config.eos_id;
    int32_t* in = &batch.target_input_ids[i * batch.target_len];
    int32_t* out = &batch.target_output_ids[i * batch.target_len];
    in[0] = config.bos_id;
    std::copy(targets[i].begin(), targets[i].end(), in + 1);
    std::copy(targets[i].begin(), targets[i].end(), out);
    out[targets[i].size()] = config.eos_id;
    batch.source_lengths.push_back(static_cast<int32_t>(sources[i].size() + 1));
    batch.target_lengths.push_back(static_cast<int32_t>(targets[i].size() + 1));
    batch.source_tokens += batch.source_lengths.back();
    batch.target_tokens += batch.target_lengths.back();
  }
  return batch;
}

// ---- The model ---------------------------------------------------------------------------------

// The CPU model is the graph (transformer_graph.h) over CpuTrainingOps: the ops come first so
// that they exist when the graph is built on them.
template <typename T>
struct CpuOpsOwner {
  CpuTrainingOps<T> cpu_ops;
};

template <typename T>
struct BasicTransformerModel<T>::Impl : CpuOpsOwner<T>, TransformerGraph<T> {
  Impl(const ModelConfig& config, const TrainingOptions& options, int threads)
      : CpuOpsOwner<T>{CpuTrainingOps<T>(checked_parameter_count(config), threads)},
        TransformerGraph<T>(config, options, this->cpu_ops),
        threads(threads) {}

  static size_t checked_parameter_count(const ModelConfig& config) {
    validate_config(config);
    const std::vector<ParameterSlot> slots = parameter_slots(config);
    return slots.back().offset + slots.back().size;
  }

  int threads = 1;
};

template <typename T>
BasicTransformerModel<T>::BasicTransformerModel(const ModelConfig& config,
                                                const TrainingOptions& options, int threads)
    : impl_(std::make_unique<Impl>(config, options, threads)) {}

template <typename T>
BasicTransformerModel<T>::~BasicTransformerModel() = default;

template <typename T>
const ModelConfig& BasicTransformerModel<T>::config() const { return impl_->config; }
template <typename T>
const TrainingOptions& BasicTransformerModel<T>::options() const { return impl_->options; }
template <typename T>
void BasicTransformerModel<T>::set_bf16_products(bool enabled) {
  impl_->cpu_ops.set_bf16_products(enabled);
}
template <typename T>
bool BasicTransformerModel<T>::bf16_products() const { return impl_->cpu_ops.bf16_products(); }
template <typename T>
void BasicTransformerModel<T>::set_options(const TrainingOptions& options) {
  validate_training_options(options);
  impl_->options = options;  // every forward pass plans its arenas anew from these
}
template <typename T>
int BasicTransformerModel<T>::threads() const { return impl_->threads; }
template <typename T>
const std::vector<ParameterSlot>& BasicTransformerModel<T>::slots() const { return impl_->slots; }
template <typename T>
const ParameterSlot& BasicTransformerModel<T>::slot(const std::string& name) const {
  return impl_->slots[impl_->find(name)];
}
template <typename T>
size_t BasicTransformerModel<T>::parameter_count() const {
  return impl_->slots.back().offset + impl_->slots.back().size;
}
template <typename T>
T* BasicTransformerModel<T>::parameters() { return impl_->cpu_ops.parameters(); }
template <typename T>
const T* BasicTransformerModel<T>::parameters() const { return impl_->cpu_ops.parameters(); }
template <typename T>
T* BasicTransformerModel<T>::gradients() { return impl_->cpu_ops.gradients(); }
template <typename T>
const T* BasicTransformerModel<T>::gradients() const { return impl_->cpu_ops.gradients(); }
template <typename T>
const T* BasicTransformerModel<T>::last_logits() const { return impl_->last_logits(); }

template <typename T>
void BasicTransformerModel<T>::initialize(uint64_t seed) {
  Impl& m = *impl_;
  std::mt19937_64 rng(seed);
  const std::string source = param::source_embedding(m.config),
                    target = param::target_embedding(m.config);
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (const ParameterSlot& slot : m.slots) {
    T* p = parameters() + slot.offset;
    const std::string& name = slot.spec.name;
    if (name == source || name == target || name == schema::kOutputWeight) {
      std::normal_distribution<double> normal(0.0, 1.0 / std::sqrt(double(m.config.d_model)));
      for (size_t i = 0; i < slot.size; ++i) p[i] = static_cast<T>(normal(rng));
    } else if (slot.spec.shape.size() == 2) {
      const double fan_out = double(slot.spec.shape[0]), fan_in = double(slot.spec.shape[1]);
      const double limit = std::sqrt(6.0 / (fan_in + fan_out));
      std::uniform_real_distribution<double> uniform(-limit, limit);
      for (size_t i = 0; i < slot.size; ++i) p[i] = static_cast<T>(uniform(rng));
    } else {
      std::fill(p, p + slot.size, ends_with(name, schema::kGamma) ? T(1) : T(0));
    }
  }
}

template <typename T>
void BasicTransformerModel<T>::zero_gradients() {
  std::fill(gradients(), gradients() + parameter_count(), T(0));
}

template <typename T>
LossSums BasicTransformerModel<T>::forward_backward(const Batch& batch, uint64_t dropout_seed) {
  omp_set_num_threads(impl_->threads);  // oneDNN's sgemm runs on this pool
  return impl_->forward_backward(batch, dropout_seed);
}

template <typename T>
LossSums BasicTransformerModel<T>::evaluate(const Batch& batch) {
  omp_set_num_threads(impl_->threads);
  return impl_->evaluate(batch);
}

template class BasicTransformerModel<float>;
template class BasicTransformerModel<double>;

}  // namespace xf::trainer
