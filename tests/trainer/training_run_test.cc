// A fixed, small CPU training run pinned bit for bit: the losses of every step and, at the end,
// every parameter and both Adam moments must equal tests/trainer/golden/training_run.txt exactly.
// It guards refactors of the model's forward and backward passes, the kernels they call and the
// optimizer: any change to the order of a float operation shows here.
//
// Two runs (post-norm with shared embeddings and attention dropout; pre-norm with separate tables
// and an output bias), each 2 threads, dropout 0.1, label smoothing 0.1, global-norm clipping,
// 24 Adam steps on random reverse-task batches drawn from a fixed seed, as xf-train's loop steps.
//
// The bits depend on the CPU's kernel path too (oneDNN picks its sgemm by instruction set, and
// kernels_cpu's hot loops run x86-64-v4 or v3 code): the golden file's kind line names the
// kind it was written on, and on a machine of another kind the test skips, saying both kinds
// (regenerate there, before the refactor, to compare refactors).
//
// The golden file was written by the code it pins. When a change is MEANT to alter the numbers
// (a new kernel, another operation order), regenerate it and say so in the commit:
//   XF_REGENERATE_TRAINING_GOLDEN=1 build/bin/trainer_training_run_test
// (the test then writes the file, and reports itself skipped).
//
// Beside them, unpinned: the same loop with xf-train --bf16's products follows the f32 loss curve
// (Bf16ProductsFollowTheF32LossCurve).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

#include "golden.h"
#include "xf/error.h"
#include "xf/format/config.h"
#include "xf/kernels_cpu/isa.h"
#include "xf/kernels/matmul.h"
#include "xf/trainer/device_training.h"
#include "xf/trainer/optimizer.h"
#include "xf/trainer/transformer.h"

namespace xf::trainer {
namespace {

constexpr int kSteps = 24;
constexpr int kThreads = 2;
constexpr int kBatchRows = 6;

std::string golden_file() { return std::string(XF_SOURCE_DIR) + "/tests/trainer/golden/training_run.txt"; }

std::string kind_file() { return std::string(XF_SOURCE_DIR) + "/tests/trainer/golden/training_run.kind"; }

// What the bits depend on besides the code: oneDNN's version and effective instruction set, and
// which build of kernels_cpu's hot loops runs (xf::cpu::cpu_isa(): the CPU's level, capped by
// ONEDNN_MAX_CPU_ISA).
std::string machine_kind() {
  const dnnl_version_t* version = dnnl_version();
  const char* clones = "default";
#if defined(__x86_64__)
  if (xf::cpu::cpu_isa() >= xf::cpu::CpuIsa::avx512) {
    clones = "x86-64-v4";
  } else if (xf::cpu::cpu_isa() >= xf::cpu::CpuIsa::avx2) {
    clones = "x86-64-v3";
  }
#endif
  char kind[128];
  std::snprintf(kind, sizeof kind, "onednn %d.%d.%d isa 0x%x clones %s", version->major, version->minor,
                version->patch, static_cast<unsigned>(dnnl_get_effective_cpu_isa()), clones);
  return kind;
}

std::string golden_kind() {
  std::FILE* in = std::fopen(kind_file().c_str(), "r");
  if (in == nullptr) return "(missing " + kind_file() + ")";
  char line[256] = {};
  if (std::fgets(line, sizeof line, in) == nullptr) line[0] = 0;
  std::fclose(in);
  std::string kind = line;
  while (!kind.empty() && (kind.back() == '\n' || kind.back() == '\r')) kind.pop_back();
  return kind;
}

// Skips the calling test when this machine is not of the golden file's kind.
#define SKIP_UNLESS_GOLDEN_KIND()                                                         \
  if (machine_kind() != golden_kind())                                                    \
  GTEST_SKIP() << "the golden run was written on \"" << golden_kind()                    \
               << "\", this machine is \"" << machine_kind() << "\": regenerate it here " \
               << "(see the file's comment) to compare a refactor bit for bit"

bool regenerating() {
  const char* value = std::getenv("XF_REGENERATE_TRAINING_GOLDEN");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

// One training run: the model, its options and schedule, the batches' seed, and how it steps.
struct RunSetup {
  ModelConfig config;
  TrainingOptions options;
  double lr_scale = 2.0;
  int64_t warmup_steps = 8;
  int steps = kSteps;
  uint32_t data_seed = 17;
  int batch_rows = kBatchRows;
  bool through_device_model = false;  // each step through make_cpu_device_model (xf-train's loop)
  bool bf16 = false;                  // the linear layers' products in bf16 (xf-train --bf16)
};

// The two pinned runs.
RunSetup golden_run(bool pre_norm) {
  RunSetup run;
  ModelConfig& config = run.config;
  config.source_vocab_size = 20;
  config.target_vocab_size = 20;
  config.d_model = 8;
  config.num_heads = 2;
  config.d_ff = 16;
  config.encoder_layers = 2;
  config.decoder_layers = 2;
  config.max_positions = 16;
  config.norm_position = pre_norm ? NormPosition::pre : NormPosition::post;
  config.shared_embeddings = !pre_norm;
  config.tied_output = !pre_norm;
  config.output_bias = pre_norm;
  run.options.dropout = 0.1f;
  run.options.attention_dropout = pre_norm ? 0.0f : 0.1f;
  run.options.label_smoothing = 0.1f;
  run.data_seed = pre_norm ? 23 : 17;
  return run;
}

// Random sequences of ids 4..19 (0..3 are pad/unk/bos/eos), targets the reversed sources.
Batch random_batch(const ModelConfig& config, int rows, std::mt19937& rng) {
  std::uniform_int_distribution<int> length(1, 7), id(4, 19);
  std::vector<std::vector<int32_t>> sources(rows), targets(rows);
  for (int r = 0; r < rows; ++r) {
    for (int n = length(rng); n > 0; --n) sources[r].push_back(id(rng));
    targets[r].assign(sources[r].rbegin(), sources[r].rend());
  }
  return make_batch(config, sources, targets);
}

// name -> values, as the golden file holds them: f64 for the losses, f32 for the buffers.
struct RunResult {
  std::vector<double> losses, nlls;
  std::vector<int64_t> tokens;
  std::vector<float> parameters, first_moment, second_moment;
};

RunResult train(const RunSetup& run) {
  const ModelConfig& config = run.config;
  TransformerModel model(config, run.options, kThreads);
  model.initialize(11);
  if (run.bf16) model.set_bf16_products(true);
  Adam adam(model.parameter_count(), AdamOptions{}, kThreads);
  LearningRateSchedule schedule;
  schedule.scale = run.lr_scale;
  schedule.d_model = config.d_model;
  schedule.warmup_steps = run.warmup_steps;
  const double clip_norm = 1.0;
  std::mt19937 rng(run.data_seed);
  RunResult result;
  for (int step = 1; step <= run.steps; ++step) {
    const Batch batch = random_batch(config, run.batch_rows, rng);
    if (run.through_device_model) {
      const std::unique_ptr<DeviceModel> device = make_cpu_device_model(model, adam, kThreads);
      device->zero_gradients();
      const LossSums sums = device->forward_backward(batch, 1000 + step);
      result.losses.push_back(sums.loss_sum);
      result.nlls.push_back(sums.nll_sum);
      result.tokens.push_back(sums.token_count);
      device->adam_step(schedule.at(step), 1.0 / static_cast<double>(sums.token_count), clip_norm);
      continue;
    }
    model.zero_gradients();
    const LossSums sums = model.forward_backward(batch, 1000 + step);
    result.losses.push_back(sums.loss_sum);
    result.nlls.push_back(sums.nll_sum);
    result.tokens.push_back(sums.token_count);
    double gradient_scale = 1.0 / static_cast<double>(sums.token_count);
    const double norm =
        gradient_norm(model.gradients(), model.parameter_count(), gradient_scale, kThreads);
    gradient_scale *= clip_factor(norm, clip_norm);
    adam.step(model.parameters(), model.gradients(), schedule.at(step), gradient_scale);
  }
  result.parameters.assign(model.parameters(), model.parameters() + model.parameter_count());
  result.first_moment = adam.state().first_moment;
  result.second_moment = adam.state().second_moment;
  return result;
}

// In golden.h's text format: f64 with 17 significant digits and f32 with 9 both read back
// exactly (strtod / strtof), so the file pins every bit.
void write_tensor(std::FILE* out, const std::string& name, const std::vector<double>& values) {
  std::fprintf(out, "%s f64 1 %zu\n", name.c_str(), values.size());
  for (double v : values) std::fprintf(out, "%.17g\n", v);
}
void write_tensor(std::FILE* out, const std::string& name, const std::vector<float>& values) {
  std::fprintf(out, "%s f32 1 %zu\n", name.c_str(), values.size());
  for (size_t i = 0; i < values.size(); ++i)
    std::fprintf(out, "%.9g%c", static_cast<double>(values[i]), i % 8 == 7 ? '\n' : ' ');
  std::fprintf(out, "\n");
}

// The number of values whose bits differ from the golden tensor `name`; the first few are
// reported as failures.
template <typename T>
int bit_mismatches(const golden::GoldenFile& golden, const std::string& name,
                   const std::vector<T>& actual) {
  const golden::GoldenTensor& expected = golden::golden_at(golden, name);
  if (expected.size() != actual.size()) {
    ADD_FAILURE() << name << ": " << actual.size() << " values, golden " << expected.size();
    return 1;
  }
  int mismatches = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const T want = static_cast<T>(expected.values[i]);
    if (std::memcmp(&want, &actual[i], sizeof(T)) != 0 && ++mismatches <= 5)
      ADD_FAILURE() << name << "[" << i << "] = " << actual[i] << ", golden " << want
                    << " (bits differ)";
  }
  return mismatches;
}

const char* run_name(bool pre_norm) { return pre_norm ? "pre_separate" : "post_shared"; }

// The run `r` against the golden run `p` bit for bit: losses, parameters and Adam's moments, and
// the NLL sums where `with_nll`.
void expect_golden_bits(const golden::GoldenFile& golden, const std::string& p, const RunResult& r,
                        bool with_nll) {
  EXPECT_EQ(bit_mismatches(golden, p + ".loss_sum", r.losses), 0);
  if (with_nll) {
    EXPECT_EQ(bit_mismatches(golden, p + ".nll_sum", r.nlls), 0);
  }
  EXPECT_EQ(bit_mismatches(golden, p + ".parameters", r.parameters), 0);
  EXPECT_EQ(bit_mismatches(golden, p + ".adam.first_moment", r.first_moment), 0);
  EXPECT_EQ(bit_mismatches(golden, p + ".adam.second_moment", r.second_moment), 0);
}

TEST(TrainingRun, MatchesTheGoldenRunBitForBit) {
  if (regenerating()) {
    std::FILE* out = std::fopen(golden_file().c_str(), "w");
    ASSERT_NE(out, nullptr) << "cannot write " << golden_file();
    std::fprintf(out, "xf-golden %d\n", golden::kGoldenFormatVersion);
    for (bool pre_norm : {false, true}) {
      const RunResult r = train(golden_run(pre_norm));
      const std::string p = run_name(pre_norm);
      write_tensor(out, p + ".loss_sum", r.losses);
      write_tensor(out, p + ".nll_sum", r.nlls);
      write_tensor(out, p + ".parameters", r.parameters);
      write_tensor(out, p + ".adam.first_moment", r.first_moment);
      write_tensor(out, p + ".adam.second_moment", r.second_moment);
    }
    ASSERT_EQ(std::fclose(out), 0);
    std::FILE* kind = std::fopen(kind_file().c_str(), "w");
    ASSERT_NE(kind, nullptr) << "cannot write " << kind_file();
    std::fprintf(kind, "%s\n", machine_kind().c_str());
    ASSERT_EQ(std::fclose(kind), 0);
    GTEST_SKIP() << "wrote " << golden_file() << " and " << kind_file();
  }
  SKIP_UNLESS_GOLDEN_KIND();
  const golden::GoldenFile golden = golden::load_golden(golden_file());
  for (bool pre_norm : {false, true}) {
    SCOPED_TRACE(run_name(pre_norm));
    expect_golden_bits(golden, run_name(pre_norm), train(golden_run(pre_norm)), /*with_nll=*/true);
  }
}

// xf-train's loop steps through a DeviceModel: on the CPU it gives the same bits.
TEST(TrainingRun, TheLoopsCpuDeviceModelMatchesTheGoldenRun) {
  if (regenerating()) GTEST_SKIP() << "regenerating the golden file";
  SKIP_UNLESS_GOLDEN_KIND();
  const golden::GoldenFile golden = golden::load_golden(golden_file());
  for (bool pre_norm : {false, true}) {
    SCOPED_TRACE(run_name(pre_norm));
    RunSetup run = golden_run(pre_norm);
    run.through_device_model = true;
    expect_golden_bits(golden, run_name(pre_norm), train(run), /*with_nll=*/false);
  }
}

// The comparison itself can fail: one flipped bit in one parameter is caught.
TEST(TrainingRun, OneFlippedBitIsCaught) {
  if (regenerating()) GTEST_SKIP() << "regenerating the golden file";
  const golden::GoldenFile golden = golden::load_golden(golden_file());
  const golden::GoldenTensor& tensor = golden::golden_at(golden, "post_shared.parameters");
  std::vector<float> values(tensor.values.begin(), tensor.values.end());
  uint32_t bits;
  std::memcpy(&bits, &values[values.size() / 2], sizeof(bits));
  bits ^= 1u;
  std::memcpy(&values[values.size() / 2], &bits, sizeof(bits));
  int mismatches = 0;
  EXPECT_NONFATAL_FAILURE(mismatches = bit_mismatches(golden, "post_shared.parameters", values),
                          "bits differ");
  EXPECT_EQ(mismatches, 1);
}

// xf-train --bf16: a few hundred steps of a larger model with the linear layers' products in
// bf16 follow the f32 run's loss curve (per-token loss of each window of 50 steps within 3%),
// both learn, and the bf16 run does differ (its products are not silently f32).
TEST(TrainingRun, Bf16ProductsFollowTheF32LossCurve) {
  if (regenerating()) GTEST_SKIP() << "regenerating the golden file";
  RunSetup run = golden_run(true);
  run.config.d_model = 32;
  run.config.num_heads = 4;
  run.config.d_ff = 64;
  run.config.max_positions = 16;
  run.lr_scale = 0.3;  // peak 0.3 * 32^-0.5 * 50^-0.5 = 7.5e-3
  run.warmup_steps = 50;
  run.steps = 300;
  run.batch_rows = 32;  // smoother curves than the pinned runs' 6 rows
  if (!cpu::bf16_products_in_hardware()) {
    TransformerModel model(run.config, run.options, kThreads);
    EXPECT_THROW(model.set_bf16_products(true), Error);
    GTEST_SKIP() << "this CPU has no bf16 instructions (AVX512-BF16 or AMX)";
  }
  const RunResult f32 = train(run);
  run.bf16 = true;
  const RunResult bf16 = train(run);
  ASSERT_EQ(f32.losses.size(), bf16.losses.size());
  constexpr size_t kWindow = 50;
  auto window_loss = [&](const RunResult& r, size_t first) {
    double loss = 0, tokens = 0;
    for (size_t i = first; i < first + kWindow; ++i) {
      loss += r.losses[i];
      tokens += static_cast<double>(r.tokens[i]);
    }
    return loss / tokens;
  };
  for (size_t first = 0; first + kWindow <= f32.losses.size(); first += kWindow) {
    const double a = window_loss(f32, first), b = window_loss(bf16, first);
    EXPECT_NEAR(b, a, 0.03 * a) << "steps " << first + 1 << "-" << first + kWindow;
  }
  const size_t last = f32.losses.size() - kWindow;
  EXPECT_LT(window_loss(f32, last), 0.6 * window_loss(f32, 0)) << "the f32 run did not learn";
  EXPECT_LT(window_loss(bf16, last), 0.6 * window_loss(bf16, 0)) << "the bf16 run did not learn";
  EXPECT_NE(f32.losses, bf16.losses) << "bf16 products gave the f32 run's losses bit for bit";
}

}  // namespace
}  // namespace xf::trainer
