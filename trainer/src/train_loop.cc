// The training loop: setup, then steps with their side work (logs, validation, checkpoints)
// until the stop rule or a stop request ends it. Each part lives in its own file (train_loop.h).
#include "xf/trainer/train_loop.h"

#include "xf/trainer/checkpointer.h"
#include "xf/trainer/communicator.h"
#include "xf/trainer/train_log.h"
#include "xf/trainer/train_schedule.h"
#include "xf/trainer/train_setup.h"
#include "xf/trainer/train_step.h"
#include "xf/trainer/validation.h"

namespace xf::trainer {
namespace {

// What a step reads of the run.
StepInputs step_inputs(TrainingRun& run) {
  return {*run.model.device, *run.batches, run.state,           run.model.config,
          run.schedule,       run.ranks,    run.options.clip_norm, run.elapsed_before};
}

// Where the run ended: its step, the scores and the wall time.
void record_end(const TrainingProgress& state, const RunClock& clock, TrainSummary& summary) {
  summary.final_step = state.step;
  summary.last_valid_loss = state.last_valid_loss;
  summary.last_valid_bleu = state.last_valid_bleu;
  summary.best_valid_loss = state.best_valid_loss;
  summary.best_valid_bleu = state.best_valid_bleu;
  summary.seconds = clock.seconds();
}

}  // namespace

TrainSummary run_training(const TrainOptions& options, std::ostream& progress,
                          const std::atomic<bool>* stop_requested, const DeviceTraining* devices,
                          Communicator* comm, int gpu) {
  const RunClock clock;
  SingleProcess one_process;
  Communicator& ranks = comm != nullptr ? *comm : one_process;
  std::ostream silent(nullptr);
  std::ostream& log = ranks.rank() == 0 ? progress : silent;  // rank 0 prints the progress
  TrainingRun run(options, log, devices, ranks, gpu);
  TrainingProgress& state = run.state;
  const TrainSchedule schedule(options);
  const StopRule stop_rule(options, static_cast<int64_t>(run.batches->batches_per_epoch()));
  TrainLog train_log(log, options.out_dir, run.root, state.step, run.elapsed_before, clock,
                     stop_rule.target_steps(), options.max_minutes);
  Checkpointer checkpoints(options, run.model, state, *run.batches, *run.data.tokenizer,
                           run.saved_options, ranks);
  Validator validator(run.data.dev.get(), *run.data.tokenizer, options, run.model, state, ranks,
                      checkpoints, train_log);
  TrainSummary summary;
  summary.first_step = state.step;
  double root_run_seconds = 0;  // rank 0's clock decides --max-minutes for every rank

  while (!stop_rule.finished(state.step, run.batches->position(),
                             (ranks.size() == 1 ? clock.seconds() : root_run_seconds) / 60)) {
    const StepResult step = train_step(step_inputs(run), clock, stop_requested);
    root_run_seconds = step.root_run_seconds;
    summary.step_losses.push_back(step.losses.loss());
    train_log.step(state.step, run.epoch(), step.losses, state.elapsed_seconds,
                   schedule.log_due(state.step));
    if (schedule.validation_due(state.step)) {
      validator.run(run.epoch());
      if (stop_rule.early_stop(state.validations_without_improvement)) {
        log << "early stop: " << options.early_stop << " validations without improvement\n";
        summary.early_stopped = true;
        break;
      }
    }
    if (schedule.save_due(state.step)) checkpoints.save();
    // A stop request (Ctrl-C, SIGTERM) ends the run after this step; with several ranks, when
    // any rank asked (the votes come with the step's sums, so all ranks agree).
    if (ranks.size() == 1 ? stop_requested && stop_requested->load() : step.stop_votes > 0) {
      summary.interrupted = true;
      break;
    }
  }

  if (TrainSchedule::final_validation_due(summary.interrupted, state.step, summary.first_step,
                                          validator.last_validated_step())) {
    validator.run(run.epoch());
  }
  if (TrainSchedule::final_save_due(state.step, checkpoints.last_saved_step())) checkpoints.save();
  summary.last_checkpoint = checkpoints.last_checkpoint();
  if (summary.interrupted) {
    log << "interrupted at step " << state.step << "; checkpoint saved to "
        << summary.last_checkpoint << "\n";
  }
  train_log.finish();

  record_end(state, clock, summary);
  return summary;
}

}  // namespace xf::trainer
