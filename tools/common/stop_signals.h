#pragma once
// The stop signals (SIGINT, SIGTERM, SIGHUP, SIGUSR1) of a tool, taken by one thread that does
// nothing else. A signal handler runs on whichever thread the kernel picks, and the kernel writes
// the handler's frame below that thread's stack pointer: Debian's oneDNN 2.6 AVX-512 GEMM points
// the stack pointer at heap memory while it computes (oneDNN issue 4845, fixed upstream in its
// PR 4855), so a handler that interrupts it overwrites the heap ("malloc(): corrupted", exit
// 134). Here no handler is ever installed: block_stop_signals(), called first thing in main(),
// blocks the signals in the calling thread, every thread started later (OpenMP's, MPI's, the
// tools') inherits the block, and one thread takes them with sigwait() and acts on them.
#include <atomic>

namespace xf::cli {

enum class OnStopSignal {
  end_process,        // as the default action (the process dies of the signal): until set
  request_stop,       // stop_requested() becomes true; a second such signal ends the process
  request_stop_again, // stop_requested() becomes true, as often as it comes (SIGUSR1)
  say_and_exit,       // the line given to set() on stderr, then exit status 128 + the signal
};

// Blocks SIGINT, SIGTERM, SIGHUP and SIGUSR1 in the calling thread and starts the thread that
// takes them; each one ends the process (end_process) until set() says otherwise. Call it in
// main() before any other thread starts; further calls do nothing.
void block_stop_signals();

// What `signal` (one of the four) does from now on; `line` (say_and_exit; copied) ends in "\n".
void on_stop_signal(int signal, OnStopSignal action, const char* line = "");

// Set by a signal whose action is request_stop or request_stop_again; the training loop reads it.
std::atomic<bool>& stop_requested();

}  // namespace xf::cli
