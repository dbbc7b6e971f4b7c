// xf-train: trains a Transformer from parallel text; a thin main() over trainer/train_loop.
// Ctrl-C (SIGINT), SIGTERM (kill, systemd, Slurm, Kubernetes), SIGHUP or SIGUSR1 finishes the
// current step, saves a checkpoint and exits with status 0; a second SIGINT, SIGTERM or SIGHUP
// ends the process at once. Started by mpirun (or with XF_RANKS), it is one rank of a
// data-parallel run (xf/trainer/ranks.h); mpirun forwards SIGUSR1 to every rank, and SIGTERM
// is then how the launcher ends the ranks when one fails. The signals are taken by one thread
// of their own (stop_signals.h): no handler ever interrupts a compute thread.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "stop_signals.h"
#include "tool_main.h"
#include "xf/error.h"
#include "xf/trainer/checkpoint.h"
#include "xf/trainer/device_training.h"
#include "xf/trainer/ranks.h"
#include "xf/trainer/train_loop.h"

namespace {

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
  options.resume = given.count("resume") > 0;  // flags, not saved options
  options.overwrite = given.count("overwrite") > 0;
  return options;
}

constexpr const char* kUsage =
    "usage: xf-train --train FILE --out DIR [options]\n"
    "       xf-train --resume --out DIR [options to change, e.g. --max-steps N]\n"
    "Trains an encoder-decoder Transformer on parallel text. Progress on stderr; checkpoints\n"
    "(step-*/, best/), metrics.csv, TensorBoard events and sentencepiece.model go to --out, which\n"
    "one run at a time holds (the lock file xf-train.lock names its process).\n"
    "Ctrl-C, SIGTERM, SIGHUP or SIGUSR1: the current step ends, a checkpoint is saved, exit 0\n"
    "(continue with --resume); a second Ctrl-C, SIGTERM or SIGHUP ends it at once.\n"
    "Exit status: 0 when training ended (limits, early stop, or a stop signal: see the last\n"
    "line), 1 on bad input or a failed write, 2 on a bad command line.\n"
    "Options:\n";

// One rank of several failed: it says so in one line and leaves at once (finalizing could wait
// for ranks that never come; mpirun ends the others).
[[noreturn]] void exit_rank(const std::string& rank_label, std::string message, int status) {
  if (message.rfind("rank ", 0) != 0) message = rank_label + ": " + message;
  std::cerr << "xf-train: " << message << "\n" << std::flush;
  _exit(status);
}

int train(int argc, char** argv) {
  std::unique_ptr<xf::trainer::LaunchedRanks> ranks;
  bool several_ranks = false;
  std::string rank_label;
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) throw xf::cli::UsageError{"--train FILE and --out DIR are required (try --help)"};
    std::map<std::string, std::string> given;
    try {
      given = xf::trainer::parse_train_arguments(args);
    } catch (const xf::trainer::OptionError& e) {
      throw xf::cli::UsageError{e.what()};
    }
    ranks = xf::trainer::LaunchedRanks::join();
    xf::trainer::Communicator& launched = ranks->launched();
    several_ranks = launched.size() > 1;
    rank_label = "rank " + std::to_string(launched.rank()) + " of " + std::to_string(launched.size());
    if (several_ranks) {  // mpirun ends the other ranks with SIGTERM when one fails
      char line[256];
      std::snprintf(line, sizeof(line),
                    "xf-train: %s: ended by the launcher (SIGTERM): another rank failed or the "
                    "job was stopped\n",
                    rank_label.c_str());
      xf::cli::on_stop_signal(SIGTERM, xf::cli::OnStopSignal::say_and_exit, line);
    }
    xf::trainer::TrainOptions options;
    try {
      options = agreed_options(given, launched);
    } catch (const xf::trainer::OptionError& e) {
      throw xf::cli::UsageError{e.what()};
    }
    xf::trainer::Communicator& comm = ranks->for_device(options.device, options.comm_timeout);
    using xf::cli::OnStopSignal;
    for (int signal : {SIGINT, SIGHUP}) xf::cli::on_stop_signal(signal, OnStopSignal::request_stop);
    if (!several_ranks) xf::cli::on_stop_signal(SIGTERM, OnStopSignal::request_stop);
    xf::cli::on_stop_signal(SIGUSR1, OnStopSignal::request_stop_again);
    // --device cuda: the module, loaded now (or a one-line error naming what is missing).
    const xf::trainer::DeviceTraining* devices = &xf::trainer::module_device_training();
    auto summary = xf::trainer::run_training(options, std::cerr, &xf::cli::stop_requested(), devices, &comm,
                                             ranks->gpu());
    if (comm.rank() == 0) {
      std::cerr << "done: step " << summary.final_step << " in " << summary.seconds
                << " s; checkpoint " << summary.last_checkpoint << "\n";
    }
    return 0;  // every rank gets here together: the ranks' destructors finalize MPI and NCCL
  } catch (const xf::cli::UsageError& e) {
    if (several_ranks) exit_rank(rank_label, e.message, xf::cli::kExitUsageError);
    throw;
  } catch (const std::exception& e) {
    if (several_ranks) exit_rank(rank_label, e.what(), xf::cli::kExitInputError);
    throw;
  }
}

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
  xf::cli::block_stop_signals();  // before any other thread starts: they inherit the block
  return xf::cli::tool_main("xf-train", kUsage + xf::trainer::train_options_help(), argc, argv, train);
}
