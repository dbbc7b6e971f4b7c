#pragma once
// Joins the ranks of a data-parallel xf-train run as its launcher started this process
// (docs/TRAINING.md, "Several processes"):
//   - mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE set): MPI, in builds that found it. CPU ranks
//     sum their gradients with MPI; GPU ranks with NCCL, bootstrapped through MPI.
//   - XF_RANK, XF_RANKS (and XF_LOCAL_RANK) with NCCL_COMM_ID=host:port: GPU ranks started by
//     any other means, NCCL alone.
//   - neither: one process.
#include <memory>
#include <string>

#include "xf/trainer/communicator.h"

namespace xf::trainer {

class LaunchedRanks {
 public:
  // Throws a one-line xf::Error when launched as several ranks and this build cannot join them.
  static std::unique_ptr<LaunchedRanks> join();
  virtual ~LaunchedRanks() = default;

  // The ranks as launched, for agreeing on the options before anything else.
  virtual Communicator& launched() = 0;
  // The communicator that trains on `device` (cpu, cuda, cuda-f32); made on the first call.
  // Throws a one-line xf::Error when this build cannot (GPU ranks without NCCL, CPU ranks
  // started through XF_RANKS).
  virtual Communicator& for_device(const std::string& device, double timeout_seconds) = 0;
  // The GPU a GPU rank takes: its rank among the ranks on this machine.
  virtual int gpu() const = 0;
};

// What this build can join, for --help and errors: "MPI and NCCL", "MPI", "NCCL" or "".
std::string rank_engines();

}  // namespace xf::trainer
