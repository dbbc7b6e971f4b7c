#pragma once
// Communicator over MPI (OpenMPI from Debian): the ranks mpirun started, CPU memory. Errors
// come back as return codes (MPI_ERRORS_RETURN) and become one-line xf::Errors; every call is
// watched by an ExchangeWatchdog.
#include <memory>

#include "watchdog.h"
#include "xf/trainer/communicator.h"

namespace xf::trainer {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator();            // MPI_Init; throws xf::Error when MPI cannot start
  ~MpiCommunicator() override;  // MPI_Finalize (only a clean exit gets here: see xf-train)

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string description() const override;
  void all_reduce_sum(double* values, size_t count) override;
  void all_reduce_sum(float* values, size_t count) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void set_timeout(double seconds) override { watchdog_->set_timeout(seconds); }

  // The rank among those on this machine (MPI_COMM_TYPE_SHARED): the GPU a GPU rank takes.
  int local_rank() const { return local_rank_; }

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  std::unique_ptr<ExchangeWatchdog> watchdog_;
};

}  // namespace xf::trainer
