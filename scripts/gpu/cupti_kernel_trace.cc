// Where a CUDA program's GPU time goes, kernel by kernel: a CUPTI injection library, a small
// nsys for machines that have no nsys (the lent GPU machines have ncu but not nsys).
//
//   CUDA_INJECTION64_PATH=libcupti_kernel_trace.so XF_TRACE_OUT=trace.tsv PROGRAM ...
//
// The CUDA driver loads the library named by CUDA_INJECTION64_PATH when the program first uses
// CUDA and calls its InitializeInjection(); from then on CUPTI records every kernel, copy and
// memset of every stream (any library's: cuBLAS, PyTorch, xf). At exit the records are summed
// by kernel name and written to XF_TRACE_OUT (default stderr) as a table:
//   kind, name, calls, total_us, mean_us, share_of_gpu_busy
// and a first line `# span_us S busy_us B launches L` (S: first start to last end of all records;
// B: sum of their durations, which on one stream is the time the GPU worked). S - B is time the
// GPU waited for the host: at batch 1 that is launch and synchronisation overhead.
// Built by scripts/gpu_check.sh prepare against CUPTI from the nvidia-cuda-cupti wheel.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Totals {
  uint64_t calls = 0;
  uint64_t total_ns = 0;
};

std::mutex mutex;
std::map<std::string, Totals> totals;  // "kind\tname" -> totals
uint64_t first_start = UINT64_MAX, last_end = 0, busy_ns = 0, launches = 0;

constexpr size_t kBufferBytes = 8 << 20;

std::string demangled(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  char* plain = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string result = status == 0 && plain != nullptr ? plain : name;
  std::free(plain);
  // The parameter list makes names unreadable in a table: cut it, after dropping the
  // "(anonymous namespace)::" whose parenthesis would cut the name itself.
  for (size_t at; (at = result.find("(anonymous namespace)::")) != std::string::npos;)
    result.erase(at, sizeof("(anonymous namespace)::") - 1);
  const size_t paren = result.find('(');
  if (paren != std::string::npos) result.resize(paren);
  if (result.size() > 120) result = result.substr(0, 117) + "...";
  return result;
}

void add(const std::string& key, uint64_t start, uint64_t end) {
  if (end < start) return;
  Totals& t = totals[key];
  ++t.calls;
  t.total_ns += end - start;
  first_start = std::min(first_start, start);
  last_end = std::max(last_end, end);
  busy_ns += end - start;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(mutex);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        add("kernel\t" + demangled(k->name), k->start, k->end);
        ++launches;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        const char* kind = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "host to device"
                           : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "device to host"
                           : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ? "device to device"
                                                                            : "other";
        add(std::string("memcpy\t") + kind, m->start, m->end);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        add("memset\tmemset", m->start, m->end);
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
}

void write_summary() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(mutex);
  const char* path = std::getenv("XF_TRACE_OUT");
  FILE* out = path != nullptr ? std::fopen(path, "w") : stderr;
  if (out == nullptr) {
    std::fprintf(stderr, "cupti_kernel_trace: cannot write %s\n", path);
    return;
  }
  std::vector<std::pair<std::string, Totals>> rows(totals.begin(), totals.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.total_ns > b.second.total_ns; });
  const double span_us = last_end > first_start ? (last_end - first_start) / 1e3 : 0.0;
  std::fprintf(out, "# span_us %.1f busy_us %.1f launches %llu\n", span_us, busy_ns / 1e3,
               static_cast<unsigned long long>(launches));
  std::fprintf(out, "kind\tname\tcalls\ttotal_us\tmean_us\tshare_of_busy\n");
  for (const auto& [key, t] : rows)
    std::fprintf(out, "%s\t%llu\t%.1f\t%.2f\t%.4f\n", key.c_str(),
                 static_cast<unsigned long long>(t.calls), t.total_ns / 1e3,
                 t.total_ns / 1e3 / t.calls, busy_ns ? double(t.total_ns) / busy_ns : 0.0);
  if (out != stderr) std::fclose(out);
}

bool check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return true;
  const char* message = nullptr;
  cuptiGetResultString(result, &message);
  std::fprintf(stderr, "cupti_kernel_trace: %s failed: %s\n", what, message ? message : "?");
  return false;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  if (!check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
             "cuptiActivityRegisterCallbacks"))
    return 0;
  bool ok = check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
  ok = check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy") && ok;
  ok = check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset") && ok;
  std::atexit(write_summary);
  return ok ? 1 : 0;
}
