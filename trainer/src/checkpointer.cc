// The training loop's checkpoints (checkpointer.h).
#include "xf/trainer/checkpointer.h"

#include <string_view>

#include "xf/error.h"

namespace xf::trainer {

void Checkpointer::check_ranks_agree() const {
  if (ranks_.size() == 1 || !model_.steps_on_host) return;
  const TransformerModel& model = *model_.host;
  uint64_t hash = fnv1a_64(std::string_view(reinterpret_cast<const char*>(model.parameters()),
                                            model.parameter_count() * sizeof(float)));
  uint64_t root_hash = hash;
  ranks_.broadcast(&root_hash, sizeof(root_hash), 0);
  if (hash != root_hash) {
    throw Error("rank " + std::to_string(ranks_.rank()) +
                ": parameters differ from rank 0's at step " + std::to_string(state_.step) +
                " (the ranks no longer train the same model)");
  }
}

Checkpoint Checkpointer::checkpoint() const {
  const TransformerModel& model = *model_.host;
  Checkpoint c;
  c.config = model_.config;
  c.options = saved_options_;
  c.parameters.assign(model.parameters(), model.parameters() + model.parameter_count());
  c.adam = model_.adam->state();
  c.progress = state_;
  c.tokenizer_model = tokenizer_.model_proto();
  return c;
}

void Checkpointer::save() {
  state_.data = batches_.position();
  check_ranks_agree();
  if (ranks_.rank() == 0) {
    model_.sync_host();
    last_checkpoint_ = save_checkpoint(options_.out_dir, checkpoint(), options_.keep);
  }
  last_saved_step_ = state_.step;
}

void Checkpointer::save_best() {
  state_.data = batches_.position();
  if (ranks_.rank() == 0) save_best_checkpoint(options_.out_dir, checkpoint());
}

}  // namespace xf::trainer
