// Which backend serves a device: the CPU's is built in; the others come from device modules,
// loaded the first time their device is asked for, so a CPU-only process maps no device library.
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "xf/error.h"
#include "xf/modules/module.h"

namespace xf::runtime {
namespace {

// A module's backend, called so that whatever it throws reaches the caller as this copy's
// xf::Error (the module has its own). Forwards every virtual of Backend: one left out would
// silently fall back to Backend's default (backend_registry_test calls each).
class ModuleBackend final : public Backend {
 public:
  explicit ModuleBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  void encode(const int32_t* source_ids, const int32_t* source_lengths, int64_t sentences,
              int64_t source_len) override {
    modules::call_module([&] { inner_->encode(source_ids, source_lengths, sentences, source_len); });
  }
  void decode_step(const int32_t* tokens, int64_t beam, int64_t step, const int32_t* live) override {
    modules::call_module([&] { inner_->decode_step(tokens, beam, step, live); });
  }
  void top_k(const float* row_offsets, int64_t k, float* values, int32_t* ids) override {
    modules::call_module([&] { inner_->top_k(row_offsets, k, values, ids); });
  }
  float* host_logits() override {
    return modules::call_module([&] { return inner_->host_logits(); });
  }
  bool logits_on_host() const override {
    return modules::call_module([&] { return inner_->logits_on_host(); });
  }
  void restrict_output(const int32_t* ids, int64_t count, const uint8_t* sentence_targets) override {
    modules::call_module([&] { inner_->restrict_output(ids, count, sentence_targets); });
  }
  void reorder_cache(const int32_t* parents, int64_t step) override {
    modules::call_module([&] { inner_->reorder_cache(parents, step); });
  }
  bool can_drop_sentences() const override {
    return modules::call_module([&] { return inner_->can_drop_sentences(); });
  }
  void keep_sentences(const int32_t* kept, int64_t count) override {
    modules::call_module([&] { inner_->keep_sentences(kept, count); });
  }
  size_t arena_bytes() const override {
    return modules::call_module([&] { return inner_->arena_bytes(); });
  }
  std::optional<DeviceUsage> device_usage() const override {
    return modules::call_module([&] { return inner_->device_usage(); });
  }

 private:
  std::unique_ptr<Backend> inner_;
};

struct Registry {
  std::mutex mutex;
  std::map<Device, const BackendFactory*> factories;
  std::map<Device, bool> from_module;
};

Registry& registry() {
  static Registry r;
  return r;
}

// The factory for `device` and whether it lives in a module.
std::pair<const BackendFactory*, bool> factory_for(Device device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (auto it = r.factories.find(device); it != r.factories.end()) return {it->second, r.from_module[device]};
  const std::string who = std::string("device ") + device_name(device);
#ifdef XF_CUDA_MODULES
  const xf_module& module = modules::load_module("xf_cuda_runtime", who);
  const auto* factory = static_cast<const BackendFactory*>(module.interface());
  r.factories[device] = factory;
  r.from_module[device] = true;
  return {factory, true};
#else
  throw Error(who + ": xf was built without CUDA");
#endif
}

}  // namespace

void register_backend_factory(Device device, const BackendFactory* factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.factories[device] = factory;
  r.from_module[device] = false;
}

std::unique_ptr<Backend> adapt_module_backend(std::unique_ptr<Backend> inner) {
  return std::make_unique<ModuleBackend>(std::move(inner));
}

std::unique_ptr<Backend> make_backend(Device device, const Model& model, const MemoryPlan& plan,
                                      int threads, std::optional<DType> weight_dtype) {
  if (device == Device::cpu) return make_cpu_backend(model, plan, threads, weight_dtype);
  const auto [factory, in_module] = factory_for(device);
  if (!in_module) return factory->make(model, plan, weight_dtype);
  return adapt_module_backend(
      modules::call_module([&] { return factory->make(model, plan, weight_dtype); }));
}

}  // namespace xf::runtime
