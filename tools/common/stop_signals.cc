#include "stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace xf::cli {
namespace {

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
constexpr int kLineBytes = 256;

struct SignalState {
  std::atomic<int> action{static_cast<int>(OnStopSignal::end_process)};
  char line[kLineBytes] = {};  // say_and_exit's; written before the action is published
};

// Plain globals with trivial destructors: the waiting thread may still run while exit() runs.
SignalState g_states[NSIG];
std::atomic<bool> g_stop_requested{false};
std::atomic<bool> g_started{false};

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int signal : kStopSignals) sigaddset(&set, signal);
  return set;
}

// The default action of `signal` (each of the four ends the process), taken on this thread:
// the only one where it is then unblocked.
[[noreturn]] void die_of(int signal) {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(signal, &default_action, nullptr);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, signal);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(signal);
  _exit(128 + signal);  // not reached
}

void take_signals() {
  const sigset_t set = stop_signal_set();
  for (;;) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0) continue;
    SignalState& state = g_states[signal];
    switch (static_cast<OnStopSignal>(state.action.load(std::memory_order_acquire))) {
      case OnStopSignal::end_process:
        die_of(signal);
      case OnStopSignal::request_stop:  // the next one ends the process (a second Ctrl-C)
        state.action.store(static_cast<int>(OnStopSignal::end_process), std::memory_order_release);
        g_stop_requested.store(true);
        break;
      case OnStopSignal::request_stop_again:
        g_stop_requested.store(true);
        break;
      case OnStopSignal::say_and_exit: {
        ssize_t ignored = write(STDERR_FILENO, state.line, std::strlen(state.line));
        (void)ignored;
        _exit(128 + signal);
      }
    }
  }
}

}  // namespace

void block_stop_signals() {
  if (g_started.exchange(true)) return;
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(take_signals).detach();  // inherits the block, as sigwait() needs
}

void on_stop_signal(int signal, OnStopSignal action, const char* line) {
  if (signal <= 0 || signal >= NSIG) return;
  SignalState& state = g_states[signal];
  std::strncpy(state.line, line, kLineBytes - 1);
  state.action.store(static_cast<int>(action), std::memory_order_release);
}

std::atomic<bool>& stop_requested() { return g_stop_requested; }

}  // namespace xf::cli
