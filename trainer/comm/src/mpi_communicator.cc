#include "mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>

#include "xf/error.h"

namespace xf::trainer {
namespace {

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(std::string("MPI ") + what + " failed: " + std::string(text, length));
}

// MPI counts are ints: large buffers go in pieces.
constexpr size_t kPiece = INT_MAX / 8;

// MPI_SUM in place over `count` values of `type`, in pieces.
void all_reduce_sum_of(void* values, size_t count, MPI_Datatype type, size_t value_bytes) {
  char* base = static_cast<char*>(values);
  for (size_t done = 0; done < count; done += kPiece) {
    const int n = static_cast<int>(std::min(kPiece, count - done));
    check(MPI_Allreduce(MPI_IN_PLACE, base + done * value_bytes, n, type, MPI_SUM, MPI_COMM_WORLD),
          "allreduce");
  }
}

}  // namespace

MpiCommunicator::MpiCommunicator() {
  int provided = 0;
  // One thread calls MPI; the watchdog thread never does.
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "set_errhandler");
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "comm_size");
  MPI_Comm local;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
        "comm_split_type");
  check(MPI_Comm_rank(local, &local_rank_), "comm_rank");
  MPI_Comm_free(&local);
  watchdog_ = std::make_unique<ExchangeWatchdog>("rank " + std::to_string(rank_) + " of " +
                                                 std::to_string(size_));
}

MpiCommunicator::~MpiCommunicator() {
  {
    // MPI_Finalize waits for every rank: bounded as the exchanges are.
    ExchangeWatchdog::Watch watch(*watchdog_, "finalize with the other ranks");
    MPI_Finalize();
  }
  watchdog_.reset();
}

std::string MpiCommunicator::description() const {
  return "MPI, " + std::to_string(size_) + " ranks";
}

void MpiCommunicator::all_reduce_sum(double* values, size_t count) {
  ExchangeWatchdog::Watch watch(*watchdog_, "sum over the ranks");
  all_reduce_sum_of(values, count, MPI_DOUBLE, sizeof(double));
}

void MpiCommunicator::all_reduce_sum(float* values, size_t count) {
  ExchangeWatchdog::Watch watch(*watchdog_, "sum over the ranks");
  all_reduce_sum_of(values, count, MPI_FLOAT, sizeof(float));
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  ExchangeWatchdog::Watch watch(*watchdog_, "copy from rank 0");
  char* base = static_cast<char*>(data);
  for (size_t done = 0; done < bytes; done += kPiece) {
    const int n = static_cast<int>(std::min(kPiece, bytes - done));
    check(MPI_Bcast(base + done, n, MPI_BYTE, root, MPI_COMM_WORLD), "bcast");
  }
}

}  // namespace xf::trainer
