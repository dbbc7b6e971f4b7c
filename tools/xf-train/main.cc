// xf-train: trains a Transformer from parallel text; a thin main() over trainer/train_loop.
// Ctrl-C (SIGINT) or SIGUSR1 finishes the current step, saves a checkpoint and exits with status
// 0; a second Ctrl-C exits at once. Started by mpirun (or with XF_RANKS), it is one rank of a
// data-parallel run (xf/trainer/ranks.h); mpirun forwards SIGUSR1 to every rank.
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "xf/error.h"
#include "xf/trainer/checkpoint.h"
#include "xf/trainer/device_training.h"
#include "xf/trainer/ranks.h"
#include "xf/trainer/train_loop.h"

namespace {

std::atomic<bool> g_stop_requested{false};

extern "C" void on_interrupt(int) {
  g_stop_requested.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process
}

extern "C" void on_stop_signal(int) { g_stop_requested.store(true); }

// mpirun ends the other ranks with SIGTERM when one fails: each says so in one line.
char g_terminated_line[160];
extern "C" void on_terminate(int) {
  ssize_t ignored = write(STDERR_FILENO, g_terminated_line, std::strlen(g_terminated_line));
  (void)ignored;
  _exit(128 + SIGTERM);
}

// Rank 0 resolves the options (with --resume, from its newest checkpoint, which the other
// machines need not have) and hands them to the others.
xf::trainer::TrainOptions agreed_options(const std::map<std::string, std::string>& given,
                                         xf::trainer::Communicator& launched) {
  if (launched.size() == 1) return xf::trainer::resolve_train_options(given);
  std::string text;
  if (launched.rank() == 0) {
    text = xf::trainer::format_key_values(
        xf::trainer::train_options_to_map(xf::trainer::resolve_train_options(given)));
  }
  xf::trainer::broadcast_string(launched, &text, 0);
  xf::trainer::TrainOptions options =
      xf::trainer::train_options_from_map(xf::trainer::parse_key_values(text, "rank 0's options"));
  options.resume = given.count("resume") > 0;  // a flag, not a saved option
  return options;
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
  std::unique_ptr<xf::trainer::LaunchedRanks> ranks;
  bool several_ranks = false;
  std::string rank_label;
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    auto given = xf::trainer::parse_train_arguments(args);
    if (given.count("help") || args.empty()) {
      std::cout << kUsage << xf::trainer::train_options_help()
                << "  --help              this text\n";
      return args.empty() ? 2 : 0;
    }
    ranks = xf::trainer::LaunchedRanks::join();
    xf::trainer::Communicator& launched = ranks->launched();
    several_ranks = launched.size() > 1;
    rank_label = "rank " + std::to_string(launched.rank()) + " of " + std::to_string(launched.size());
    if (several_ranks) {
      std::snprintf(g_terminated_line, sizeof(g_terminated_line),
                    "xf-train: %s: ended by the launcher (SIGTERM): another rank failed or the "
                    "job was stopped\n",
                    rank_label.c_str());
      std::signal(SIGTERM, on_terminate);
    }
    xf::trainer::TrainOptions options = agreed_options(given, launched);
    xf::trainer::Communicator& comm = ranks->for_device(options.device, options.comm_timeout);
    std::signal(SIGINT, on_interrupt);
    std::signal(SIGUSR1, on_stop_signal);
    // --device cuda: the module, loaded now (or a one-line error naming what is missing).
    const xf::trainer::DeviceTraining* devices = &xf::trainer::module_device_training();
    auto summary = xf::trainer::run_training(options, std::cerr, &g_stop_requested, devices, &comm,
                                             ranks->gpu());
    if (comm.rank() == 0) {
      std::cerr << "done: step " << summary.final_step << " in " << summary.seconds
                << " s; checkpoint " << summary.last_checkpoint << "\n";
    }
    return 0;  // every rank gets here together: the ranks' destructors finalize MPI and NCCL
  } catch (const std::exception& e) {
    std::string message = e.what();
    if (several_ranks && message.rfind("rank ", 0) != 0) message = rank_label + ": " + message;
    std::cerr << "xf-train: " << message << "\n" << std::flush;
    // Finalizing could wait for ranks that never come: leave at once, mpirun ends the others.
    if (several_ranks) _exit(1);
    return 1;
  }
}
