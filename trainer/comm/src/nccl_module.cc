// libxf_nccl.so's entry: the NCCL communicator as a device module (xf/modules/module.h).
#include "nccl_communicator.h"
#include "nccl_module.h"
#include "xf/modules/module.h"

namespace {

class Factory final : public xf::trainer::NcclFactory {
 public:
  std::unique_ptr<xf::trainer::Communicator> make(xf::trainer::Communicator* bootstrap, int rank, int ranks,
                                                  int gpu, double timeout_seconds) const override {
    return std::make_unique<xf::trainer::NcclCommunicator>(bootstrap, rank, ranks, gpu, timeout_seconds);
  }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const xf_module* xf_module_entry(void) {
  static const Factory factory;
  static const xf_module module = {XF_MODULE_ABI, "cuda", [] { return static_cast<const void*>(&factory); }};
  return &module;
}
