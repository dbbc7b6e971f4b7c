#pragma once
// GPU ranks' communicator lives in the module libxf_nccl.so (with NCCL and the CUDA runtime),
// loaded when GPU ranks are joined, so that xf-train maps neither for CPU work
// (modules/README.md). NcclFactory is the module's interface(); make_nccl_communicator() is
// the host's side.
#include <memory>

#include "xf/trainer/communicator.h"

namespace xf::trainer {

class NcclFactory {
 public:
  virtual ~NcclFactory() = default;
  // As NcclCommunicator's constructor (nccl_communicator.h).
  virtual std::unique_ptr<Communicator> make(Communicator* bootstrap, int rank, int ranks, int gpu,
                                             double timeout_seconds) const = 0;
};

// Loads libxf_nccl.so (a one-line xf::Error naming what is missing) and makes the communicator,
// called through an adapter that turns the module's exceptions into this copy's xf::Error.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator* bootstrap, int rank, int ranks,
                                                     int gpu, double timeout_seconds);

}  // namespace xf::trainer
