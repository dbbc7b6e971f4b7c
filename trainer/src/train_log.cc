// The training run's logs: progress lines, metrics.csv and TensorBoard events (train_log.h).
#include "xf/trainer/train_log.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "xf/error.h"
#include "xf/format/model_writer.h"

namespace xf::trainer {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = static_cast<long>(seconds + 0.5);
  char buffer[32];
  if (s >= 3600) {
    std::snprintf(buffer, sizeof(buffer), "%ldh%02ldm", s / 3600, (s / 60) % 60);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%ldm%02lds", s / 60, s % 60);
  }
  return buffer;
}

double eta_seconds(int64_t target_steps, int64_t step, double step_seconds, double max_minutes,
                   double run_seconds) {
  double eta = target_steps > 0 ? (target_steps - step) * step_seconds : -1;
  if (max_minutes > 0) {
    double left = max_minutes * 60 - run_seconds;
    eta = eta < 0 ? left : std::min(eta, left);
  }
  return eta;
}

std::string progress_line(int64_t step, double epoch, double loss, double ppl, double lr,
                          double tokens_per_second, double eta) {
  char line[320];
  std::snprintf(line, sizeof(line),
                "step %lld | epoch %.2f | loss %.4f | ppl %.2f | lr %.3g | %.0f tok/s | ETA %s\n",
                static_cast<long long>(step), epoch, loss, ppl, lr, tokens_per_second,
                eta < 0 ? "-" : format_duration(eta).c_str());
  return line;
}

std::string validation_line(int64_t step, double loss, double bleu, bool improved) {
  char line[256];
  std::snprintf(line, sizeof(line), "valid step %lld | loss %.4f | ppl %.2f | bleu %.2f%s\n",
                static_cast<long long>(step), loss, std::exp(loss), bleu,
                improved ? " | best" : "");
  return line;
}

void truncate_metrics_csv(const std::string& path, int64_t step) {
  std::ifstream in(path);
  std::string kept = kMetricsHeader, line;
  if (in) {
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      size_t comma = line.find(',');
      if (comma == std::string::npos) continue;
      int64_t row_step = std::atoll(line.c_str() + comma + 1);
      if (row_step <= step) kept += line + "\n";
    }
  }
  write_file_atomically(path, kept.data(), kept.size());
}

TrainLog::TrainLog(std::ostream& progress, const std::string& out_dir, bool write_files,
                   int64_t first_step, double elapsed_before, const RunClock& clock,
                   int64_t target_steps, double max_minutes)
    : progress_(progress),
      csv_path_(out_dir + "/" + kMetricsCsv),
      write_files_(write_files),
      first_step_(first_step),
      elapsed_before_(elapsed_before),
      clock_(clock),
      target_steps_(target_steps),
      max_minutes_(max_minutes) {
  if (!write_files_) return;
  truncate_metrics_csv(csv_path_, first_step);
  csv_.open(csv_path_, std::ios::app);
  if (!csv_) throw Error(csv_path_ + ": cannot open for appending");
  events_ = std::make_unique<TensorBoardWriter>(out_dir, first_step);
}

void TrainLog::step(int64_t step, double epoch, const StepLosses& losses, double elapsed_seconds,
                    bool line_due) {
  interval_tokens_ += losses.batch_tokens;
  interval_loss_ += losses.sums.loss_sum;
  interval_nll_ += losses.sums.nll_sum;
  interval_scored_ += losses.sums.token_count;
  csv_ << "train," << step << "," << epoch << "," << losses.loss() << "," << losses.ppl() << ","
       << losses.lr << ",";
  if (events_) {
    events_->scalar(step, "train/loss", static_cast<float>(losses.loss()));
    events_->scalar(step, "train/nll", static_cast<float>(std::log(losses.ppl())));
    events_->scalar(step, "train/lr", static_cast<float>(losses.lr));
  }
  if (line_due) {
    const auto now = std::chrono::steady_clock::now();
    double seconds = std::chrono::duration<double>(now - interval_start_).count();
    double tokens_per_second = seconds > 0 ? interval_tokens_ / seconds : 0;
    double step_seconds =
        (elapsed_seconds - elapsed_before_) / std::max<int64_t>(1, step - first_step_);
    double eta = eta_seconds(target_steps_, step, step_seconds, max_minutes_, clock_.seconds());
    progress_ << progress_line(step, epoch, interval_loss_ / std::max<int64_t>(1, interval_scored_),
                               std::exp(interval_nll_ / std::max<int64_t>(1, interval_scored_)),
                               losses.lr, tokens_per_second, eta)
              << std::flush;
    interval_start_ = std::chrono::steady_clock::now();
    interval_tokens_ = 0;
    interval_loss_ = interval_nll_ = 0;
    interval_scored_ = 0;
    csv_ << tokens_per_second;
    if (events_) events_->scalar(step, "train/tokens_per_second", static_cast<float>(tokens_per_second));
  }
  csv_ << ",," << elapsed_seconds << "\n";
  // Handed to the kernel each step (one write): a checkpoint saved after this step has its row
  // even when the process is killed at once (kill -9 lost the buffered rows).
  csv_.flush();
}

void TrainLog::validation(int64_t step, double epoch, double loss, double bleu, bool improved,
                          double elapsed_seconds) {
  progress_ << validation_line(step, loss, bleu, improved) << std::flush;
  csv_ << "valid," << step << "," << epoch << "," << loss << "," << std::exp(loss) << ",,"
       << "," << bleu << "," << elapsed_seconds << "\n";
  csv_.flush();
  if (events_) {
    events_->scalar(step, "valid/nll", static_cast<float>(loss));
    events_->scalar(step, "valid/bleu", static_cast<float>(bleu));
    events_->flush();
  }
}

void TrainLog::finish() {
  if (!write_files_) return;
  csv_.close();
  events_->flush();
}

}  // namespace xf::trainer
