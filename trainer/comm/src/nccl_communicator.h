#pragma once
// Communicator over NCCL: one GPU per rank. Gradients are summed where they live (the rank's
// GPU); host values go through a small device buffer. The communicator is non-blocking
// (ncclConfig_t::blocking = 0) so that every wait can poll for errors and give up after the
// timeout (ncclCommAbort), instead of hanging on a peer that died.
#include <cstddef>
#include <string>

#include "xf/trainer/communicator.h"

namespace xf::trainer {

class NcclCommunicator final : public Communicator {
 public:
  // Joins `ranks` ranks as `rank` on GPU `gpu`. The NCCL id comes from rank 0 through
  // `bootstrap` (the MPI ranks), or, when bootstrap is null, from the address in NCCL_COMM_ID
  // (every rank derives the same id from it; rank 0 listens there). Throws a one-line xf::Error.
  NcclCommunicator(Communicator* bootstrap, int rank, int ranks, int gpu, double timeout_seconds);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string description() const override;
  void all_reduce_sum(double* values, size_t count) override;
  void all_reduce_sum(float* values, size_t count) override;
  void broadcast(void* data, size_t bytes, int root) override;
  bool reduces_device_memory() const override { return true; }
  void all_reduce_device_sum(float* device_values, size_t count) override;
  void set_timeout(double seconds) override { timeout_seconds_ = seconds; }

 private:
  void* staging(size_t bytes);  // a device buffer of at least `bytes`
  void wait(const char* what);  // until the stream is done; throws on error or timeout

  struct Handles;
  Handles* handles_;
  int rank_, size_, gpu_;
  double timeout_seconds_;
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
};

}  // namespace xf::trainer
