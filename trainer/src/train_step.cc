// The training loop's step (train_step.h).
#include "xf/trainer/train_step.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "xf/error.h"

namespace xf::trainer {

uint64_t dropout_seed_for_step(uint64_t rng_seed, int64_t step) {
  SplitMix64 mix(rng_seed ^ (static_cast<uint64_t>(step) * 0xd1b54a32d192ed03ull));
  return mix.next();
}

namespace {

// This rank's rows of a global batch, with the global batch's padded lengths: padded to them,
// the rows draw one process's dropout masks.
struct RankRows {
  std::vector<std::vector<int32_t>> sources, targets;
  int64_t global_source_len = 0, global_target_len = 0;
  int64_t row_offset = 0;  // the first row's index in the global batch
};

RankRows rank_rows(const BatchIndices& global_batch, const TokenizedCorpus& examples,
                   const Communicator& ranks) {
  RankRows rows;
  const BatchIndices indices = rank_share(global_batch, ranks.rank(), ranks.size());
  for (uint32_t i : global_batch) {
    rows.global_source_len =
        std::max<int64_t>(rows.global_source_len, padded_source_length(examples, i));
    rows.global_target_len =
        std::max<int64_t>(rows.global_target_len, padded_target_length(examples, i));
  }
  rows.sources.reserve(indices.size());
  rows.targets.reserve(indices.size());
  for (uint32_t i : indices) {
    rows.sources.emplace_back(examples.source(i), examples.source(i) + examples.source_length(i));
    rows.targets.emplace_back(examples.target(i), examples.target(i) + examples.target_length(i));
  }
  rows.row_offset =
      static_cast<int64_t>(share_begin(global_batch.size(), ranks.rank(), ranks.size()));
  return rows;
}

// Adds the step's loss sums and tokens over the ranks, with the ranks' stop votes and rank 0's
// wall time.
void sum_over_ranks(StepResult& result, bool stop_here, double root_seconds,
                    Communicator& ranks) {
  StepLosses& step = result.losses;
  LossSums& sums = step.sums;
  double totals[] = {sums.loss_sum,
                     sums.nll_sum,
                     static_cast<double>(sums.token_count),
                     static_cast<double>(step.batch_tokens),
                     stop_here ? 1.0 : 0.0,
                     root_seconds};
  ranks.all_reduce_sum(totals, std::size(totals));
  sums.loss_sum = totals[0];
  sums.nll_sum = totals[1];
  sums.token_count = static_cast<int64_t>(totals[2]);
  step.batch_tokens = static_cast<int64_t>(totals[3]);
  result.stop_votes = static_cast<int>(totals[4]);
  result.root_run_seconds = totals[5];
}

}  // namespace

StepResult train_step(const StepInputs& run, const RunClock& clock,
                      const std::atomic<bool>* stop_requested) {
  Communicator& ranks = run.ranks;
  TrainingProgress& state = run.state;
  DeviceModel& device_model = run.model;
  // The global batch, cut as in one process; this rank trains on its share of the rows.
  const BatchIndices& global_batch = run.batches.next();
  const TokenizedCorpus& examples = run.batches.corpus();  // this epoch's (joined) examples
  const RankRows rows = rank_rows(global_batch, examples, ranks);
  const uint64_t dropout_seed = dropout_seed_for_step(state.rng_seed, state.step + 1);
  StepResult result;
  StepLosses& step = result.losses;
  step.lr = run.schedule.at(state.step + 1);
  device_model.zero_gradients();
  if (!rows.sources.empty()) {  // a batch of fewer rows than ranks leaves some ranks idle
    Batch batch = make_batch(run.config, rows.sources, rows.targets, rows.global_source_len,
                             rows.global_target_len);
    batch.row_offset = rows.row_offset;
    step.sums = device_model.forward_backward(batch, dropout_seed);  // this rank's share
    step.batch_tokens = batch.source_tokens + batch.target_tokens;
  }
  if (ranks.size() > 1) {
    device_model.all_reduce_gradients(ranks);
    const bool stop_here = stop_requested && stop_requested->load();
    sum_over_ranks(result, stop_here, ranks.rank() == 0 ? clock.seconds() : 0, ranks);
  }
  // Adam with clipping (on a GPU, a mixed-precision overflow skips the step).
  device_model.adam_step(step.lr,
                         1.0 / static_cast<double>(std::max<int64_t>(1, step.sums.token_count)),
                         run.clip_norm);
  ++state.step;
  state.data = run.batches.position();
  state.tokens_seen += step.batch_tokens;
  state.elapsed_seconds = run.elapsed_before + clock.seconds();
  if (!std::isfinite(step.loss())) {
    throw Error("training diverged at step " + std::to_string(state.step) +
                " (loss is not finite); lower --lr-scale or set --clip-norm");
  }
  return result;
}

}  // namespace xf::trainer
