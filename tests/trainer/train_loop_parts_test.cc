// The training loop's parts, each alone: the stop rule, the schedule of progress lines,
// validations and checkpoints, the keep-best rule and the logs' formats (progress lines and
// metrics.csv rows, which users and scripts read). The loop over them is run whole by
// data_train_loop_test and xf_train_tool_test.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <cstring>
#include <string>
#include <vector>

#include "run_command.h"  // read_file
#include "temp_dir.h"
#include "xf/trainer/checkpoint.h"
#include "xf/trainer/tensorboard_events.h"
#include "xf/trainer/train_log.h"
#include "xf/trainer/train_schedule.h"
#include "xf/trainer/validation.h"

namespace xf::trainer {
namespace {

using test::read_file;

DataPosition at(uint64_t epoch, uint64_t batch_index) {
  DataPosition position;
  position.epoch = epoch;
  position.batch_index = batch_index;
  return position;
}

TEST(StopRule, StepsEpochsAndMinutesEachEndTheRun) {
  TrainOptions options;
  options.max_steps = 10;
  StopRule steps(options, /*batches_per_epoch=*/4);
  EXPECT_FALSE(steps.finished(9, at(5, 0), 0));
  EXPECT_TRUE(steps.finished(10, at(0, 0), 0));
  EXPECT_EQ(steps.target_steps(), 10);

  options.max_steps = 0;
  options.epochs = 2;
  StopRule epochs(options, 4);
  EXPECT_EQ(epochs.target_steps(), 8);
  EXPECT_FALSE(epochs.finished(100, at(1, 3), 0));
  // The epoch whose last batch was taken counts as done, before the iterator moves on.
  EXPECT_EQ(epochs.completed_epochs(at(1, 4)), 2);
  EXPECT_TRUE(epochs.finished(8, at(1, 4), 0));
  EXPECT_TRUE(epochs.finished(8, at(2, 0), 0));

  options.epochs = 0;
  options.max_minutes = 1.5;
  StopRule minutes(options, 4);
  EXPECT_EQ(minutes.target_steps(), 0);
  EXPECT_FALSE(minutes.finished(1000, at(50, 0), 1.49));
  EXPECT_TRUE(minutes.finished(1, at(0, 0), 1.5));

  StopRule unbounded(TrainOptions{}, 4);
  EXPECT_FALSE(unbounded.finished(1000000, at(1000, 0), 1e6));
}

TEST(StopRule, EarlyStopCountsValidationsWithoutImprovement) {
  TrainOptions options;
  EXPECT_FALSE(StopRule(options, 1).early_stop(1000));  // --early-stop 0: off
  options.early_stop = 3;
  StopRule rule(options, 1);
  EXPECT_FALSE(rule.early_stop(2));
  EXPECT_TRUE(rule.early_stop(3));
}

TEST(TrainSchedule, LinesValidationsAndCheckpointsByStep) {
  TrainOptions options;
  options.log_every = 10;
  options.valid_every = 25;
  options.save_every = 50;
  TrainSchedule schedule(options);
  EXPECT_TRUE(schedule.log_due(1));  // the first step always prints
  EXPECT_FALSE(schedule.log_due(2));
  EXPECT_TRUE(schedule.log_due(20));
  EXPECT_FALSE(schedule.validation_due(20));
  EXPECT_TRUE(schedule.validation_due(75));
  EXPECT_FALSE(schedule.save_due(75));
  EXPECT_TRUE(schedule.save_due(100));

  options.valid_every = 0;  // only at the end
  options.save_every = 0;
  TrainSchedule at_end(options);
  EXPECT_FALSE(at_end.validation_due(1000));
  EXPECT_FALSE(at_end.save_due(1000));
}

TEST(TrainSchedule, TheEndValidatesAndSavesWhatWasNotYet) {
  // The last step is validated unless it was already, the run was interrupted, or no step ran.
  EXPECT_TRUE(TrainSchedule::final_validation_due(false, 30, 0, 25));
  EXPECT_FALSE(TrainSchedule::final_validation_due(false, 30, 0, 30));
  EXPECT_FALSE(TrainSchedule::final_validation_due(true, 30, 0, 25));
  EXPECT_FALSE(TrainSchedule::final_validation_due(false, 30, 30, -1));  // resumed at the end
  EXPECT_TRUE(TrainSchedule::final_save_due(30, 25));
  EXPECT_FALSE(TrainSchedule::final_save_due(30, 30));
}

TEST(Validation, BestByLossOrBleu) {
  TrainingProgress state;
  EXPECT_TRUE(record_validation(state, {5.0, 10.0}, "loss"));  // the first is the best
  EXPECT_TRUE(state.has_best);
  EXPECT_FALSE(record_validation(state, {5.5, 20.0}, "loss"));
  EXPECT_EQ(state.validations_without_improvement, 1);
  EXPECT_EQ(state.last_valid_loss, 5.5);
  EXPECT_EQ(state.last_valid_bleu, 20.0);
  EXPECT_EQ(state.best_valid_loss, 5.0);
  EXPECT_FALSE(record_validation(state, {5.0, 20.0}, "loss"));  // equal is no improvement
  EXPECT_EQ(state.validations_without_improvement, 2);
  EXPECT_TRUE(record_validation(state, {4.0, 1.0}, "loss"));
  EXPECT_EQ(state.validations_without_improvement, 0);
  EXPECT_EQ(state.best_valid_bleu, 1.0);

  TrainingProgress by_bleu;
  record_validation(by_bleu, {5.0, 10.0}, "bleu");
  EXPECT_FALSE(record_validation(by_bleu, {1.0, 9.0}, "bleu"));
  EXPECT_TRUE(record_validation(by_bleu, {9.0, 11.0}, "bleu"));
  EXPECT_EQ(by_bleu.best_valid_loss, 9.0);
}

TEST(TrainLog, DurationsAndEta) {
  EXPECT_EQ(format_duration(0), "0m00s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(247), "4m07s");
  EXPECT_EQ(format_duration(3599.4), "59m59s");
  EXPECT_EQ(format_duration(3600 + 5 * 60 + 31), "1h05m");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(std::nan("")), "?");
  EXPECT_EQ(eta_seconds(100, 40, 2.0, 0, 1e9), 120.0);   // steps left times step time
  EXPECT_EQ(eta_seconds(100, 40, 2.0, 1.0, 50), 10.0);   // --max-minutes leaves less
  EXPECT_EQ(eta_seconds(0, 40, 2.0, 1.0, 50), 10.0);     // minutes alone
  EXPECT_EQ(eta_seconds(0, 40, 2.0, 0, 50), -1.0);       // nothing bounds the run
}

TEST(TrainLog, ProgressAndValidationLines) {
  EXPECT_EQ(progress_line(20, 1.5, 5.12344, 98.214, 0.000123, 1234.4, 247),
            "step 20 | epoch 1.50 | loss 5.1234 | ppl 98.21 | lr 0.000123 | 1234 tok/s | ETA 4m07s\n");
  EXPECT_EQ(progress_line(1, 0.001, 9.0, 8103.08, 1.75e-7, 0, -1),
            "step 1 | epoch 0.00 | loss 9.0000 | ppl 8103.08 | lr 1.75e-07 | 0 tok/s | ETA -\n");
  EXPECT_EQ(validation_line(40, 4.0, 12.345, true),
            "valid step 40 | loss 4.0000 | ppl 54.60 | bleu 12.35 | best\n");
  EXPECT_EQ(validation_line(50, 4.5, 0, false), "valid step 50 | loss 4.5000 | ppl 90.02 | bleu 0.00\n");
}

// An independent reader of TensorBoard's event files for the tests: records checked with a
// bitwise CRC-32C, each Event's fields decoded from the protobuf wire format.
uint32_t bitwise_crc32c(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : bytes) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }
uint64_t little_endian(const std::string& s, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = value << 8 | static_cast<unsigned char>(s.at(at + i));
  return value;
}

struct ReadEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version, tag;
  float value = 0;
  bool session_start = false;
};

// The fields of one protobuf message: number -> raw value (varints and fixed values as their
// bits, length-delimited ones as bytes).
std::vector<std::pair<int, std::string>> fields_of(const std::string& message) {
  std::vector<std::pair<int, std::string>> fields;
  size_t at = 0;
  auto varint = [&] {
    uint64_t value = 0;
    for (int shift = 0;; shift += 7) {
      const unsigned char byte = static_cast<unsigned char>(message.at(at++));
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
  };
  while (at < message.size()) {
    const uint64_t key = varint();
    const int wire = key & 7;
    std::string raw;
    if (wire == 0) raw = std::to_string(varint());
    else if (wire == 1) raw = message.substr(at, 8), at += 8;
    else if (wire == 5) raw = message.substr(at, 4), at += 4;
    else if (wire == 2) {
      const size_t length = varint();
      raw = message.substr(at, length);
      at += length;
    } else ADD_FAILURE() << "wire type " << wire;
    fields.emplace_back(static_cast<int>(key >> 3), raw);
  }
  return fields;
}

std::vector<ReadEvent> read_events(const std::string& path) {
  const std::string bytes = read_file(path);
  std::vector<ReadEvent> events;
  size_t at = 0;
  while (at < bytes.size()) {
    const uint64_t length = little_endian(bytes, at, 8);
    EXPECT_EQ(little_endian(bytes, at + 8, 4), masked(bitwise_crc32c(bytes.substr(at, 8))));
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(little_endian(bytes, at + 12 + length, 4), masked(bitwise_crc32c(data)));
    at += 16 + length;
    ReadEvent event;
    for (const auto& [field, raw] : fields_of(data)) {
      if (field == 1) {
        const uint64_t bits = little_endian(raw, 0, 8);
        std::memcpy(&event.wall_time, &bits, 8);
      }
      if (field == 2) event.step = std::stoll(raw);
      if (field == 3) event.file_version = raw;
      if (field == 6) event.session_start = fields_of(raw).at(0).second == "1";
      if (field == 5) {  // Summary { Value { tag, simple_value } }
        for (const auto& [value_field, value] : fields_of(fields_of(raw).at(0).second)) {
          if (value_field == 1) event.tag = value;
          if (value_field == 2) {
            const uint32_t bits = static_cast<uint32_t>(little_endian(value, 0, 4));
            std::memcpy(&event.value, &bits, 4);
          }
        }
      }
    }
    events.push_back(event);
  }
  EXPECT_EQ(at, bytes.size()) << "a record runs past the end of " << path;
  return events;
}

std::vector<std::string> event_files_in(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (is_tensorboard_event_file(entry.path().filename().string())) files.push_back(entry.path());
  }
  return files;
}

TEST(TensorBoardEvents, Crc32cIsTheCastagnoliChecksum) {
  // The check value of CRC-32C (RFC 3720, B.4): "123456789" -> 0xE3069283.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string random_bytes = "\x01\xfe\x80xf-train\x00\x7f";
  EXPECT_EQ(crc32c(random_bytes.data(), random_bytes.size()), bitwise_crc32c(random_bytes));
  EXPECT_EQ(masked_crc32c(random_bytes.data(), random_bytes.size()), masked(bitwise_crc32c(random_bytes)));
}

TEST(TensorBoardEvents, ScalarEventsReadBack) {
  const std::string event = scalar_event(1700000000.5, 300, "valid/bleu", 12.5f);
  const std::string path = test::make_temp_dir("tensorboard-event") + "/events.out.tfevents.1.x";
  std::ofstream(path, std::ios::binary) << tensorboard_record(event)
                                        << tensorboard_record(session_start_event(2.0, 7))
                                        << tensorboard_record(file_version_event(3.0));
  const std::vector<ReadEvent> read = read_events(path);
  ASSERT_EQ(read.size(), 3u);
  EXPECT_EQ(read[0].wall_time, 1700000000.5);
  EXPECT_EQ(read[0].step, 300);
  EXPECT_EQ(read[0].tag, "valid/bleu");
  EXPECT_EQ(read[0].value, 12.5f);
  EXPECT_TRUE(read[1].session_start);
  EXPECT_EQ(read[1].step, 7);
  EXPECT_EQ(read[2].file_version, "brain.Event:2");
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

StepLosses losses(double loss_sum, double nll_sum, int64_t tokens, int64_t batch_tokens, double lr) {
  StepLosses step;
  step.sums.loss_sum = loss_sum;
  step.sums.nll_sum = nll_sum;
  step.sums.token_count = tokens;
  step.batch_tokens = batch_tokens;
  step.lr = lr;
  return step;
}

TEST(TrainLog, CsvRowsProgressLinesAndEvents) {
  const std::string dir = test::make_temp_dir("train-log");
  const RunClock clock;
  std::ostringstream progress;
  {
    TrainLog log(progress, dir, /*write_files=*/true, /*first_step=*/0, /*elapsed_before=*/0,
                 clock, /*target_steps=*/0, /*max_minutes=*/0);
    log.step(1, 0.25, losses(10, 8, 4, 9, 0.5), 2.5, /*line_due=*/true);
    log.step(2, 0.5, losses(6, 4, 2, 5, 0.25), 3, /*line_due=*/false);
    log.validation(2, 0.5, 4.0, 12.5, true, 3);
    log.finish();
  }
  // The line averages the steps since the last one; tokens per second depend on the clock.
  EXPECT_TRUE(std::regex_match(
      progress.str(),
      std::regex("step 1 \\| epoch 0\\.25 \\| loss 2\\.5000 \\| ppl 7\\.39 \\| lr 0\\.5 \\| "
                 "[0-9]+ tok/s \\| ETA -\n"
                 "valid step 2 \\| loss 4\\.0000 \\| ppl 54\\.60 \\| bleu 12\\.50 \\| best\n")))
      << progress.str();
  EXPECT_TRUE(std::regex_match(read_file(dir + "/metrics.csv"),
                               std::regex(std::string(kMetricsHeader) +
                                          "train,1,0\\.25,2\\.5,7\\.38906,0\\.5,[0-9.e+]+,,2\\.5\n"
                                          "train,2,0\\.5,3,7\\.38906,0\\.25,,,3\n"
                                          "valid,2,0\\.5,4,54\\.5982,,,12\\.5,3\n")))
      << read_file(dir + "/metrics.csv");
  // The same numbers as TensorBoard scalars, after the file version and the session's start.
  const std::vector<std::string> files = event_files_in(dir);
  ASSERT_EQ(files.size(), 1u);
  const std::vector<ReadEvent> events = read_events(files[0]);
  ASSERT_EQ(events.size(), 11u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_TRUE(events[1].session_start);
  EXPECT_EQ(events[1].step, 1);
  std::vector<std::string> seen;
  for (size_t i = 2; i < events.size(); ++i) {
    seen.push_back(std::to_string(events[i].step) + " " + events[i].tag);
  }
  EXPECT_EQ(seen, (std::vector<std::string>{
                      "1 train/loss", "1 train/nll", "1 train/lr", "1 train/tokens_per_second",
                      "2 train/loss", "2 train/nll", "2 train/lr", "2 valid/nll", "2 valid/bleu"}));
  EXPECT_FLOAT_EQ(events[2].value, 2.5f);                  // loss_sum / tokens
  EXPECT_FLOAT_EQ(events[3].value, 2.0f);                  // nll_sum / tokens
  EXPECT_FLOAT_EQ(events[4].value, 0.5f);                  // lr
  EXPECT_FLOAT_EQ(events[9].value, 4.0f);                  // validation NLL
  EXPECT_FLOAT_EQ(events[10].value, 12.5f);                // BLEU
  EXPECT_GT(events[2].wall_time, 1.6e9);                   // seconds since 1970
}

TEST(TrainLog, AResumedRunKeepsTheRowsUpToItsStep) {
  const std::string dir = test::make_temp_dir("train-log-resume");
  const std::string kept = std::string(kMetricsHeader) + "train,1,0.1,3,20,0.5,,,1\n" +
                           "train,2,0.2,3,20,0.5,,,2\nvalid,2,0.2,4,54.6,,,1,2\n";
  std::ofstream(dir + "/metrics.csv") << kept << "train,3,0.3,3,20,0.5,,,3\nvalid,3,0.3,4,54.6,,,1,3\n";
  const RunClock clock;
  std::ostringstream progress;
  TrainLog log(progress, dir, true, /*first_step=*/2, 2, clock, 0, 0);
  EXPECT_EQ(read_file(dir + "/metrics.csv"), kept);
  // Its events start a session at step 3, from which TensorBoard drops the points it holds.
  const std::vector<std::string> files = event_files_in(dir);
  ASSERT_EQ(files.size(), 1u);
  const std::vector<ReadEvent> events = read_events(files[0]);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[1].session_start);
  EXPECT_EQ(events[1].step, 3);
  // Another rank's log writes no file and prints what it is given (its stream is silent).
  const std::string other = test::make_temp_dir("train-log-rank1");
  TrainLog rank1(progress, other, /*write_files=*/false, 0, 0, clock, 0, 0);
  rank1.step(1, 0.1, losses(1, 1, 1, 1, 0.1), 1, false);
  rank1.finish();
  EXPECT_TRUE(std::filesystem::is_empty(other));
}

}  // namespace
}  // namespace xf::trainer
