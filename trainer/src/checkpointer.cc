// The training loop's checkpoints (checkpointer.h).
#include "xf/trainer/checkpointer.h"

#include <string_view>

#include "xf/error.h"

namespace xf::trainer {

void Checkpointer::check_ranks_agree() const {
  if (run_.ranks.size() == 1 || run_.options.device != "cpu") return;
  const TransformerModel& model = *run_.model;
  uint64_t hash = fnv1a_64(std::string_view(reinterpret_cast<const char*>(model.parameters()),
                                            model.parameter_count() * sizeof(float)));
  uint64_t root_hash = hash;
  run_.ranks.broadcast(&root_hash, sizeof(root_hash), 0);
  if (hash != root_hash) {
    throw Error("rank " + std::to_string(run_.ranks.rank()) +
                ": parameters differ from rank 0's at step " + std::to_string(run_.state.step) +
                " (the ranks no longer train the same model)");
  }
}

void Checkpointer::save() {
  run_.state.data = run_.batches->position();
  check_ranks_agree();
  if (run_.root) {
    run_.sync_host();
    last_checkpoint_ = save_checkpoint(run_.options.out_dir, run_.checkpoint(), run_.options.keep);
  }
  last_saved_step_ = run_.state.step;
}

void Checkpointer::save_best() {
  run_.state.data = run_.batches->position();
  if (run_.root) save_best_checkpoint(run_.options.out_dir, run_.checkpoint());
}

}  // namespace xf::trainer
