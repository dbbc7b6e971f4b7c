#include "xf/trainer/ranks.h"

#include <cstdlib>

#include "xf/error.h"
#ifdef XF_WITH_MPI
#include "mpi_communicator.h"
#endif
#ifdef XF_WITH_NCCL
#include "nccl_module.h"
#endif

namespace xf::trainer {
namespace {

// An integer environment variable, or `otherwise` when unset.
int environment_int(const char* name, int otherwise) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return otherwise;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > 1 << 20) {
    throw Error(std::string(name) + "='" + text + "' is not a rank count or index");
  }
  return static_cast<int>(value);
}

// Ranks started by an MPI launcher: OpenMPI sets OMPI_COMM_WORLD_SIZE, MPICH and Slurm PMI_SIZE.
int mpi_launched_size() {
  int size = environment_int("OMPI_COMM_WORLD_SIZE", 0);
  return size > 0 ? size : environment_int("PMI_SIZE", 0);
}

class OneProcess final : public LaunchedRanks {
 public:
  Communicator& launched() override { return single_; }
  Communicator& for_device(const std::string&, double) override { return single_; }
  int gpu() const override { return 0; }

 private:
  SingleProcess single_;
};

#ifdef XF_WITH_MPI
class MpiRanks final : public LaunchedRanks {
 public:
  Communicator& launched() override { return mpi_; }
  Communicator& for_device(const std::string& device, double timeout_seconds) override {
    if (device == "cpu") return mpi_;
#ifdef XF_WITH_NCCL
    if (!nccl_) {
      nccl_ = make_nccl_communicator(&mpi_, mpi_.rank(), mpi_.size(), gpu(), timeout_seconds);
    }
    return *nccl_;
#else
    (void)timeout_seconds;
    if (mpi_.size() == 1) return mpi_;  // one GPU rank: nothing to sum
    throw Error("--device " + device + " on " + std::to_string(mpi_.size()) +
                " ranks needs NCCL, and this xf-train was built without it (rebuild where "
                "nccl.h is found, or train on one GPU)");
#endif
  }
  int gpu() const override { return mpi_.local_rank(); }

 private:
  MpiCommunicator mpi_;
#ifdef XF_WITH_NCCL
  std::unique_ptr<Communicator> nccl_;  // destroyed before MPI finalizes
#endif
};
#endif

#ifdef XF_WITH_NCCL
class NcclRanks final : public LaunchedRanks {
 public:
  NcclRanks(int rank, int ranks, int local_rank)
      : nccl_(make_nccl_communicator(nullptr, rank, ranks, local_rank, /*timeout_seconds=*/0)),
        gpu_(local_rank) {}
  Communicator& launched() override { return *nccl_; }
  Communicator& for_device(const std::string& device, double timeout_seconds) override {
    if (device == "cpu") {
      throw Error("XF_RANKS starts GPU ranks (NCCL); start CPU ranks with mpirun");
    }
    nccl_->set_timeout(timeout_seconds);
    return *nccl_;
  }
  int gpu() const override { return gpu_; }

 private:
  std::unique_ptr<Communicator> nccl_;
  int gpu_;
};
#endif

}  // namespace

std::string rank_engines() {
  std::string engines;
#ifdef XF_WITH_MPI
  engines = "MPI";
#endif
#ifdef XF_WITH_NCCL
  engines += engines.empty() ? "NCCL" : " and NCCL";
#endif
  return engines;
}

std::unique_ptr<LaunchedRanks> LaunchedRanks::join() {
  const int mpi_size = mpi_launched_size();
  if (mpi_size > 0) {
#ifdef XF_WITH_MPI
    return std::make_unique<MpiRanks>();
#else
    if (mpi_size > 1) {
      throw Error("started as " + std::to_string(mpi_size) +
                  " ranks by mpirun, but this xf-train was built without MPI: it trains in one "
                  "process (install libopenmpi-dev and rebuild)");
    }
#endif
  }
  const int env_size = environment_int("XF_RANKS", 0);
  if (env_size > 0) {
    const int rank = environment_int("XF_RANK", -1);
    if (rank < 0 || rank >= env_size) {
      throw Error("XF_RANKS=" + std::to_string(env_size) + " needs XF_RANK in 0.." +
                  std::to_string(env_size - 1));
    }
    if (std::getenv("NCCL_COMM_ID") == nullptr) {
      throw Error("XF_RANKS needs NCCL_COMM_ID=HOST:PORT, where rank 0 listens");
    }
#ifdef XF_WITH_NCCL
    return std::make_unique<NcclRanks>(rank, env_size, environment_int("XF_LOCAL_RANK", rank));
#else
    if (env_size > 1) {
      throw Error("XF_RANKS=" + std::to_string(env_size) +
                  " asks for GPU ranks, but this xf-train was built without NCCL");
    }
#endif
  }
  return std::make_unique<OneProcess>();
}

}  // namespace xf::trainer
