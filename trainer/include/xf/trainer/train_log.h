#pragma once
// The training run's logs: the progress lines users read ("step ... | ETA ...", "valid step
// ..."), rank 0's metrics.csv (a row a step, written as the step ends, a row a validation) and
// TensorBoard event file (the same numbers, tensorboard_events.h). The line formats are
// functions of their numbers, tested alone.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>

#include "xf/trainer/batch.h"
#include "xf/trainer/tensorboard_events.h"
#include "xf/trainer/train_schedule.h"

namespace xf::trainer {

inline constexpr const char* kMetricsCsv = "metrics.csv";
inline constexpr const char* kMetricsHeader =
    "kind,step,epoch,loss,ppl,lr,tokens_per_second,bleu,elapsed_seconds\n";

// "1h05m" from an hour on, else "4m07s"; "?" for a negative or non-finite time.
std::string format_duration(double seconds);

// Seconds left: (target_steps - step) steps at step_seconds each (when target_steps > 0), at
// most what --max-minutes leaves of run_seconds (when max_minutes > 0); -1 when neither bounds.
double eta_seconds(int64_t target_steps, int64_t step, double step_seconds, double max_minutes,
                   double run_seconds);

// "step 20 | epoch 1.50 | loss 5.1234 | ppl 98.21 | lr 0.000123 | 1234 tok/s | ETA 4m07s\n";
// eta < 0 prints "-".
std::string progress_line(int64_t step, double epoch, double loss, double ppl, double lr,
                          double tokens_per_second, double eta);

// "valid step 20 | loss 4.0000 | ppl 54.60 | bleu 12.34 | best\n" (" | best" when improved).
std::string validation_line(int64_t step, double loss, double bleu, bool improved);

// metrics.csv keeps only its rows up to `step` (a resumed run rewrites what came after its
// checkpoint); a missing file becomes the header alone.
void truncate_metrics_csv(const std::string& path, int64_t step);

// The epoch as a fraction: `position`'s epoch plus the share of its batches taken.
inline double epoch_fraction(const DataPosition& position, size_t batches_per_epoch) {
  return static_cast<double>(position.epoch) +
         static_cast<double>(position.batch_index) / static_cast<double>(batches_per_epoch);
}

// What one step did, as the logs see it (the whole batch's numbers, summed over the ranks).
struct StepLosses {
  LossSums sums;             // label-smoothed and plain NLL sums, scored tokens
  int64_t batch_tokens = 0;  // source + target tokens
  double lr = 0;             // the learning rate of the update
  double loss() const { return sums.loss_sum / std::max<int64_t>(1, sums.token_count); }
  double ppl() const { return std::exp(sums.nll_sum / std::max<int64_t>(1, sums.token_count)); }
};

// The progress lines (to `progress`) and, on rank 0 (`write_files`), metrics.csv in out_dir
// (truncated to first_step on opening) and a TensorBoard event file beside it, with the scalars
// train/loss (label-smoothed), train/nll, train/lr and train/tokens_per_second (with each
// progress line) per step, valid/nll and valid/bleu per validation. Throws xf::Error when
// either cannot be opened.
class TrainLog {
 public:
  TrainLog(std::ostream& progress, const std::string& out_dir, bool write_files,
           int64_t first_step, double elapsed_before, const RunClock& clock,
           int64_t target_steps, double max_minutes);
  // After a step: its CSV row and, when `line_due`, the progress line over the steps since the
  // last one (their losses, tokens per second, ETA). elapsed_seconds: training time so far.
  void step(int64_t step, double epoch, const StepLosses& losses, double elapsed_seconds,
            bool line_due);
  void validation(int64_t step, double epoch, double loss, double bleu, bool improved,
                  double elapsed_seconds);
  // Closes the CSV and flushes the events (rank 0).
  void finish();

 private:
  std::ostream& progress_;
  std::string csv_path_;
  bool write_files_;
  std::ofstream csv_;  // rank 0's; writes elsewhere go nowhere
  std::unique_ptr<TensorBoardWriter> events_;  // rank 0's
  int64_t first_step_;
  double elapsed_before_;
  const RunClock& clock_;
  int64_t target_steps_;
  double max_minutes_;
  // Since the last progress line.
  std::chrono::steady_clock::time_point interval_start_ = std::chrono::steady_clock::now();
  int64_t interval_tokens_ = 0;
  double interval_loss_ = 0, interval_nll_ = 0;
  int64_t interval_scored_ = 0;
};

}  // namespace xf::trainer
