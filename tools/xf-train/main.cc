// xf-train: trains a Transformer from parallel text; a thin main() over trainer/train_loop.
// Ctrl-C (SIGINT) finishes the current step, saves a checkpoint and exits with status 0; a
// second Ctrl-C exits at once.
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <iostream>

#include "xf/error.h"
#include "xf/trainer/train_loop.h"
#include "xf/trainer/device_training.h"

namespace {

std::atomic<bool> g_stop_requested{false};

extern "C" void on_interrupt(int) {
  g_stop_requested.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process
}

constexpr const char* kUsage =
    "usage: xf-train --train FILE --out DIR [options]\n"
    "       xf-train --resume --out DIR [options to change, e.g. --max-steps N]\n"
    "Trains an encoder-decoder Transformer on parallel text. Progress on stderr; checkpoints\n"
    "(step-*/, best/), metrics.csv, metrics.png and sentencepiece.model go to --out.\n"
    "Options:\n";

}  // namespace

int main(int argc, char** argv) {
  // OpenMP threads that spin while waiting (libgomp's default) slow training tenfold when the
  // cores are shared with other work (measured: 52 s against 3 s for the same 40 steps on a
  // busy 2-core machine). The policy is read when libgomp loads, before main, so set it and
  // start again; an explicit OMP_WAIT_POLICY is respected.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    // The resolved path (not /proc/self/exe itself) keeps the process named xf-train.
    char self[4096];
    ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (length > 0) {
      self[length] = '\0';
      execv(self, argv);  // returns only on failure: then run as we are
    }
  }
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    auto given = xf::trainer::parse_train_arguments(args);
    if (given.count("help") || args.empty()) {
      std::cout << kUsage << xf::trainer::train_options_help()
                << "  --help              this text\n";
      return args.empty() ? 2 : 0;
    }
    xf::trainer::TrainOptions options = xf::trainer::resolve_train_options(given);
    std::signal(SIGINT, on_interrupt);
    // --device cuda: the module, loaded now (or a one-line error naming what is missing).
    const xf::trainer::DeviceTraining* devices = &xf::trainer::module_device_training();
    auto summary = xf::trainer::run_training(options, std::cerr, &g_stop_requested, devices);
    std::cerr << "done: step " << summary.final_step << " in " << summary.seconds << " s; checkpoint "
              << summary.last_checkpoint << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "xf-train: " << e.what() << "\n";
    return 1;
  }
}
