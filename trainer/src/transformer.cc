// The CPU model: initialization, and the forward and backward passes of
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
