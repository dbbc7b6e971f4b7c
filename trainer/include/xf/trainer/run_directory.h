#pragma once
// The run directory (xf-train --out) as one run owns it: one process at a time, no mixing of a
// new run with an earlier one, nothing left behind by processes that died while saving.
#include <ostream>
#include <string>

namespace xf::trainer {

class RunDirectory {
 public:
  static constexpr const char* kLockFile = "xf-train.lock";

  // Creates `path` when needed and takes its lock: <path>/xf-train.lock, held with flock() while
  // the run lasts and holding the holder's PID and host. Throws a one-line xf::Error naming the
  // holder when another live process holds it; a lock file left by a dead process is taken
  // over (its flock died with it). Then it tidies what dead processes left while saving:
  // temporaries (.step-*.tmp.PID, .best.tmp.PID, FILE.tmp.PID) are removed, and a checkpoint
  // moved aside to be replaced (.NAME.old.PID) is put back when NAME is missing, else removed.
  // A new run (`resume` false) into a directory that holds anything else is refused unless
  // `overwrite`, which deletes what xf-train writes there (step-*/, best/, metrics.csv,
  // events.out.tfevents.*, sentencepiece.model, corpus-*.bin) and leaves any other file alone.
  // What it removes is said on `log`.
  RunDirectory(const std::string& path, bool resume, bool overwrite, std::ostream& log);
  ~RunDirectory();  // removes the lock file, then releases the lock
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

 private:
  // After the lock: the leftovers, then the refusal (or --overwrite) of an earlier run.
  void tidy(bool resume, bool overwrite, std::ostream& log);
  void release();

  std::string path_, lock_path_;
  int lock_fd_ = -1;
};

}  // namespace xf::trainer
