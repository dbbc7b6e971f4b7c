#pragma once
// How the ranks of a data-parallel run talk to each other. The training loop only needs sums
// (gradients, losses, validation statistics) and copies from rank 0 (vocabulary, options,
// parameters); the implementations are thin layers over existing engines: MPI for CPU ranks and
// NCCL for GPU ranks (trainer/comm, xf/trainer/ranks.h). One process uses SingleProcess.
//
// Every call is collective: all ranks make the same calls in the same order. A call that waits
// longer than the timeout for the others ends the process with a one-line error (a rank that
// died or cannot be reached must not hang the rest; see docs/TRAINING.md).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace xf::trainer {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  // 0..size()-1; rank 0 writes checkpoints, logs and plots
  virtual int size() const = 0;
  // For the progress log: "MPI, 2 ranks".
  virtual std::string description() const = 0;

  // Sums `count` host values over the ranks, in place; every rank gets the same sums.
  virtual void all_reduce_sum(double* values, size_t count) = 0;
  virtual void all_reduce_sum(float* values, size_t count) = 0;
  // Copies `bytes` host bytes from rank `root` to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;

  // True when all_reduce_device_sum takes the memory of this rank's GPU (NCCL).
  virtual bool reduces_device_memory() const { return false; }
  // Sums floats in this rank's GPU memory over the ranks, in place. Host-only communicators
  // throw xf::Error.
  virtual void all_reduce_device_sum(float* device_values, size_t count);

  // Seconds a call may wait for the other ranks before the process ends with a one-line error;
  // 0: no limit.
  virtual void set_timeout(double seconds) = 0;
};

// A run of one process: sums and copies leave the data as it is.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string description() const override { return "one process"; }
  void all_reduce_sum(double*, size_t) override {}
  void all_reduce_sum(float*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  bool reduces_device_memory() const override { return true; }  // nothing to move anywhere
  void all_reduce_device_sum(float*, size_t) override {}
  void set_timeout(double) override {}
};

// Broadcasts a string of any size: the receivers resize to the root's size first.
void broadcast_string(Communicator& comm, std::string* text, int root);

// The first row of `rank`'s share of a global batch of `rows` rows. Shares are contiguous, in
// rank order, and differ in size by at most one row, the larger ones first (batches are sorted
// by length, so shares hold similar lengths); with fewer rows than ranks the last ranks idle.
inline size_t share_begin(size_t rows, int rank, int ranks) {
  return (rows * static_cast<size_t>(rank) + static_cast<size_t>(ranks) - 1) / static_cast<size_t>(ranks);
}

// The rows of a global batch that `rank` of `ranks` trains on.
template <typename Row>
std::vector<Row> rank_share(const std::vector<Row>& rows, int rank, int ranks) {
  return std::vector<Row>(rows.begin() + share_begin(rows.size(), rank, ranks),
                          rows.begin() + share_begin(rows.size(), rank + 1, ranks));
}

}  // namespace xf::trainer
