#include "nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <thread>

#include "xf/error.h"

namespace xf::trainer {

struct NcclCommunicator::Handles {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

namespace {

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(std::string("CUDA ") + what + " failed: " + cudaGetErrorString(status));
  }
}

// Non-blocking NCCL calls return ncclInProgress: completion is polled in wait().
void check_nccl(ncclResult_t status, const char* what) {
  if (status != ncclSuccess && status != ncclInProgress) {
    throw Error(std::string("NCCL ") + what + " failed: " + ncclGetErrorString(status));
  }
}

// Copies on the communicator's stream, so that they are ordered with its collectives.
void copy_on(cudaStream_t stream, void* to, const void* from, size_t bytes, cudaMemcpyKind kind) {
  check_cuda(cudaMemcpyAsync(to, from, bytes, kind, stream), "copy");
  if (kind == cudaMemcpyDeviceToHost) check_cuda(cudaStreamSynchronize(stream), "copy");
}

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator* bootstrap, int rank, int ranks, int gpu,
                                   double timeout_seconds)
    : handles_(new Handles), rank_(rank), size_(ranks), gpu_(gpu), timeout_seconds_(timeout_seconds) {
  try {
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
    if (gpu >= gpus) {
      throw Error("rank " + std::to_string(rank) + " takes GPU " + std::to_string(gpu) +
                  " (one GPU per rank on each machine), but this machine shows " +
                  std::to_string(gpus));
    }
    check_cuda(cudaSetDevice(gpu), "set device");
    check_cuda(cudaStreamCreateWithFlags(&handles_->stream, cudaStreamNonBlocking), "stream create");
    ncclUniqueId id{};
    if (bootstrap == nullptr || rank == 0) check_nccl(ncclGetUniqueId(&id), "get unique id");
    if (bootstrap != nullptr) bootstrap->broadcast(&id, sizeof(id), 0);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check_nccl(ncclCommInitRankConfig(&handles_->comm, ranks, id, rank, &config), "init");
    wait("joining the ranks");
  } catch (...) {
    if (handles_->comm) ncclCommAbort(handles_->comm);
    if (handles_->stream) cudaStreamDestroy(handles_->stream);
    delete handles_;
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (handles_->comm) {
    // A clean exit: every rank gets here together, so finalizing cannot hang.
    ncclCommFinalize(handles_->comm);
    ncclResult_t state = ncclInProgress;
    while (ncclCommGetAsyncError(handles_->comm, &state) == ncclSuccess && state == ncclInProgress) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    ncclCommDestroy(handles_->comm);
  }
  if (staging_) cudaFree(staging_);
  if (handles_->stream) cudaStreamDestroy(handles_->stream);
  delete handles_;
}

std::string NcclCommunicator::description() const {
  return "NCCL, " + std::to_string(size_) + " ranks (this one on GPU " + std::to_string(gpu_) + ")";
}

void* NcclCommunicator::staging(size_t bytes) {
  if (bytes > staging_bytes_) {
    if (staging_) check_cuda(cudaFree(staging_), "free");
    staging_ = nullptr;
    check_cuda(cudaMalloc(&staging_, bytes), "malloc");
    staging_bytes_ = bytes;
  }
  return staging_;
}

void NcclCommunicator::wait(const char* what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (;;) {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(handles_->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(handles_->comm);
      handles_->comm = nullptr;
      throw Error("rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": NCCL " +
                  what + " failed: " + ncclGetErrorString(async));
    }
    if (async == ncclSuccess) {
      cudaError_t state = cudaStreamQuery(handles_->stream);
      if (state == cudaSuccess) return;
      if (state != cudaErrorNotReady) check_cuda(state, what);
    }
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (timeout_seconds_ > 0 && waited > timeout_seconds_) {
      ncclCommAbort(handles_->comm);
      handles_->comm = nullptr;
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%g", timeout_seconds_);
      throw Error("rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                  ": no answer from the other ranks for " + seconds + " s (" + what +
                  "): a rank died, hangs or cannot be reached");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void NcclCommunicator::all_reduce_device_sum(float* device_values, size_t count) {
  if (!handles_->comm) throw Error("NCCL communicator was aborted");
  check_nccl(ncclAllReduce(device_values, device_values, count, ncclFloat, ncclSum, handles_->comm,
                           handles_->stream),
             "all-reduce");
  wait("sum over the ranks");
}

void NcclCommunicator::all_reduce_sum(float* values, size_t count) {
  if (count == 0) return;
  float* device = static_cast<float*>(staging(count * sizeof(float)));
  copy_on(handles_->stream, device, values, count * sizeof(float), cudaMemcpyHostToDevice);
  all_reduce_device_sum(device, count);
  copy_on(handles_->stream, values, device, count * sizeof(float), cudaMemcpyDeviceToHost);
}

void NcclCommunicator::all_reduce_sum(double* values, size_t count) {
  if (count == 0) return;
  if (!handles_->comm) throw Error("NCCL communicator was aborted");
  double* device = static_cast<double*>(staging(count * sizeof(double)));
  copy_on(handles_->stream, device, values, count * sizeof(double), cudaMemcpyHostToDevice);
  check_nccl(ncclAllReduce(device, device, count, ncclDouble, ncclSum, handles_->comm,
                           handles_->stream),
             "all-reduce");
  wait("sum over the ranks");
  copy_on(handles_->stream, values, device, count * sizeof(double), cudaMemcpyDeviceToHost);
}

void NcclCommunicator::broadcast(void* data, size_t bytes, int root) {
  if (bytes == 0) return;
  if (!handles_->comm) throw Error("NCCL communicator was aborted");
  void* device = staging(bytes);
  if (rank_ == root) copy_on(handles_->stream, device, data, bytes, cudaMemcpyHostToDevice);
  check_nccl(ncclBroadcast(device, device, bytes, ncclChar, root, handles_->comm, handles_->stream),
             "broadcast");
  wait("copy from rank 0");
  copy_on(handles_->stream, data, device, bytes, cudaMemcpyDeviceToHost);
}

}  // namespace xf::trainer
