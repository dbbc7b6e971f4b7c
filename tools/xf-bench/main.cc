// xf-bench: translation speed, latency, memory and heap allocations on a file of sentences.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "../xf-run/line_reader.h"
#include "../xf-run/translator_cli.h"
#include "progress.h"
#include "xf/alloc_counter.h"
#include "xf/error.h"
#include "xf/format/model_file.h"
#include "xf/kernels_cpu/isa.h"
#include "xf/kernels/matmul.h"
#include "xf/translator.h"

namespace {

// This process's peak resident memory in MB: /proc's VmHWM, which starts anew at exec.
// getrusage's ru_maxrss survives exec, so a run started by a big process (a Python benchmark
// with torch loaded) would report its parent's peak.
double own_peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // "VmHWM:  23456 kB"
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

using xf::cli::UsageError;

const char* const kUsage = R"(usage: xf-bench --model FILE --input FILE [options]

Translates the input file (one sentence a line; token ids with --ids) in requests of --batch
lines, in file order, after one warm-up request, and prints:
  tokens/s        target tokens of the best hypotheses (EOS excluded) per second
  sentences/s     input lines per second
  latency         p50 and p90 of the per-request wall time, in ms
  per step        p50 and p90 of each request's wall time over its decoder steps (its longest
                  output + 1 for EOS), in ms: at batch 1, the time a generated token costs
  peak RSS        the process's peak resident memory (model mapping included), in MB
  allocations     heap allocations during the timed decoding (tokenization is done before),
                  by xf's own code and inside the backend library (oneDNN), separately
  device          (--device cuda) device memory in use after the run (cudaMemGetInfo, the
                  CUDA context included; xf allocates nothing on the device after loading) and
                  the device/pinned allocation calls xf made during the timed decoding
  kernels         the instruction set of xf's own CPU loops (avx512_vnni, avx2, baseline, ...)
  products        the CPU matrix products planned, by implementation: xf's kernels by name
                  (xf:int8_panels_avx2), oneDNN's as onednn:NAME @ISA
ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) caps both, e.g. ONEDNN_MAX_CPU_ISA=AVX2.

%s  --input FILE          the sentences (required)
  --ids                 the input holds space-separated token ids (no tokenizer needed)
  --repeat N            translate the file N times (default 1)
  --json                print one JSON object: tokens_per_s, sentences_per_s, latency_p50_ms,
                        latency_p90_ms, peak_rss_mb, allocations_xf, allocations_backend, and
                        the run's parameters, kernels_isa and products (below)

On stderr: while it is a terminal, a progress line every few seconds of the timed run; at the
end, always, a summary line (lines, tokens, tokens/s, warnings).
Exit status: 0 on success, 1 on bad input, 2 on a bad command line.
)";

struct Options {
  xf::cli::TranslatorCli cli;
  std::string input_path;
  bool ids = false;
  bool json = false;
  int repeat = 1;
};

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (options.cli.parse(argc, argv, i)) continue;
    if (arg == "--input") options.input_path = xf::cli::option_value(argc, argv, i);
    else if (arg == "--ids") options.ids = true;
    else if (arg == "--json") options.json = true;
    else if (arg == "--repeat")
      options.repeat = static_cast<int>(xf::cli::parse_integer(arg, xf::cli::option_value(argc, argv, i), 1, 1000000));
    else throw xf::cli::unknown_option(arg);
  }
  if (options.cli.model_path.empty()) throw UsageError{"--model is required (try --help)"};
  if (options.input_path.empty()) throw UsageError{"--input is required (try --help)"};
  options.cli.finish(nullptr);
  return options;
}

// The input's sources under xf-run's rules for bad lines (SourceReader): an over-long line is
// truncated, an unreadable one is an empty source; --strict stops at either. `warnings`: how
// many lines had such a problem.
std::vector<std::vector<int32_t>> read_sources(const Options& options, const xf::Model& model,
                                               int max_source_len, size_t& warnings) {
  const int fd = ::open(options.input_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw xf::Error(options.input_path + ": cannot open: " + std::strerror(errno));
  xf::cli::SourceReader reader("xf-bench", model, max_source_len, options.ids, options.cli.strict);
  xf::cli::LineReader in(fd, reader.max_line_bytes());
  std::vector<std::vector<int32_t>> sources;
  std::string line;
  try {
    while (in.next(line, /*wait=*/true) == xf::cli::LineReader::Status::line) {
      sources.emplace_back();
      reader.read(line, in.cut(), sources.size(), sources.back());
    }
  } catch (const xf::Error& e) {
    ::close(fd);
    throw xf::Error(options.input_path + ": " + e.what());
  }
  ::close(fd);
  if (sources.empty()) throw xf::Error(options.input_path + ": no sentences");
  reader.print_summary(sources.size());
  warnings = reader.truncated() + reader.unreadable();
  return sources;
}

// The dtype of the weight matrices (the tensors of rank 2 and more; biases and LayerNorm stay
// f32) as the file stores them, "int8+f32" when they differ, and what --dtype converts them to.
std::string weight_dtype_label(const xf::Model& model, const xf::TranslatorOptions& translator) {
  std::string stored;
  for (const xf::TensorView& tensor : model.file().tensors()) {
    if (tensor.rank < 2) continue;
    const std::string name = xf::dtype_name(tensor.dtype);
    if (("+" + stored + "+").find("+" + name + "+") == std::string::npos) stored += (stored.empty() ? "" : "+") + name;
  }
  if (!translator.weight_dtype || xf::dtype_name(*translator.weight_dtype) == stored) return stored;
  return std::string(xf::dtype_name(*translator.weight_dtype)) + " (converted at load from " + stored + ")";
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const double rank = p * (values.size() - 1);
  const size_t low = static_cast<size_t>(rank);
  const size_t high = std::min(low + 1, values.size() - 1);
  return values[low] + (values[high] - values[low]) * (rank - low);
}

int run(Options options) {
  auto model = xf::Model::open(options.cli.model_path, options.cli.model_access);
  if (!options.ids && !model->has_tokenizer())
    throw xf::Error(options.cli.model_path + ": the model has no tokenizer; use --ids");
  options.cli.finish(model.get());
  size_t warnings = 0;
  const auto sources = read_sources(options, *model, options.cli.translator.max_source_len, warnings);
  xf::Translator translator(model, options.cli.translator);

  const size_t batch = static_cast<size_t>(options.cli.translator.max_batch);
  std::vector<std::vector<std::vector<int32_t>>> requests;
  for (size_t first = 0; first < sources.size(); first += batch)
    requests.emplace_back(sources.begin() + first, sources.begin() + std::min(first + batch, sources.size()));

  // Warm-up: the first call sizes the results' storage. A short last request keeps its own
  // results, so that requests of both sizes reuse storage in the timed loop.
  std::vector<xf::TokenTranslation> full_results, last_results;
  translator.translate_ids(requests.front(), options.cli.translate, full_results);
  if (requests.back().size() != requests.front().size())
    translator.translate_ids(requests.back(), options.cli.translate, last_results);

  xf::cli::Progress progress("xf-bench");
  std::vector<double> latencies_ms;
  latencies_ms.reserve(requests.size() * options.repeat);
  std::vector<double> step_ms;
  step_ms.reserve(requests.size() * options.repeat);
  const std::optional<xf::DeviceUsage> device_before = translator.device_usage();
  uint64_t tokens = 0, sentences = 0;
  using Clock = std::chrono::steady_clock;
  xf::alloc_counter::start();
  const auto start = Clock::now();
  for (int r = 0; r < options.repeat; ++r) {
    for (const auto& request : requests) {
      auto& results = request.size() == requests.front().size() ? full_results : last_results;
      const auto t0 = Clock::now();
      translator.translate_ids(request, options.cli.translate, results);
      const auto t1 = Clock::now();
      latencies_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      size_t longest = 0;
      uint64_t request_tokens = 0;
      for (size_t i = 0; i < request.size(); ++i) {
        request_tokens += results[i].hypotheses[0].ids.size();
        longest = std::max(longest, results[i].hypotheses[0].ids.size());
      }
      tokens += request_tokens;
      step_ms.push_back(latencies_ms.back() / static_cast<double>(longest + 1));
      sentences += request.size();
      progress.add(request.size(), request_tokens, t1);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const xf::alloc_counter::Counts allocations = xf::alloc_counter::stop();
  const std::optional<xf::DeviceUsage> device_after = translator.device_usage();
  const double device_mb = device_after ? device_after->used_bytes / 1048576.0 : 0.0;
  const unsigned long long device_allocations =
      device_after ? device_after->allocations - device_before->allocations : 0;

  const double peak_rss_mb = own_peak_rss_mb();
  const double p50 = percentile(latencies_ms, 0.5), p90 = percentile(latencies_ms, 0.9);
  const double step_p50 = percentile(step_ms, 0.5), step_p90 = percentile(step_ms, 0.9);
  const auto& t = options.cli.translator;
  progress.finish(warnings);
  const std::string dtype = weight_dtype_label(*model, t);
  // What ran: xf's kernels' instruction set and each matrix product's implementation (both
  // capped by ONEDNN_MAX_CPU_ISA). CPU only: a CUDA run makes no StaticMatmul.
  const char* kernels_isa = xf::cpu::cpu_isa_name(xf::cpu::cpu_isa());
  std::string products;
  for (const auto& [name, count] : xf::cpu::matmul_implementations()) {
    if (options.json) {
      products += (products.empty() ? "" : ", ") + std::string("\"") + name + "\": " + std::to_string(count);
    } else {
      products += (products.empty() ? "" : ", ") + name + " x" + std::to_string(count);
    }
  }
  if (options.json) {
    std::printf(
        "{\"tokens_per_s\": %.3f, \"sentences_per_s\": %.3f, \"latency_p50_ms\": %.3f, "
        "\"latency_p90_ms\": %.3f, \"ms_per_step_p50\": %.4f, \"ms_per_step_p90\": %.4f, "
        "\"peak_rss_mb\": %.1f, \"allocations_xf\": %llu, "
        "\"allocations_backend\": %llu, \"sentences\": %llu, \"tokens\": %llu, \"seconds\": %.4f, "
        "\"beam\": %d, \"batch\": %d, \"threads\": %d, \"device\": \"%s\", \"model_dtype\": \"%s\", "
        "\"model_mb\": %.1f, \"arena_mb\": %.1f, \"device_memory_mb\": %.1f, "
        "\"device_allocations\": %llu, \"kernels_isa\": \"%s\", \"products\": {%s}}\n",
        tokens / seconds, sentences / seconds, p50, p90, step_p50, step_p90, peak_rss_mb,
        static_cast<unsigned long long>(allocations.xf), static_cast<unsigned long long>(allocations.backend),
        static_cast<unsigned long long>(sentences), static_cast<unsigned long long>(tokens), seconds, t.max_beam,
        t.max_batch, t.threads, xf::device_name(t.device), dtype.c_str(),
        model->file().file_size() / 1048576.0, translator.arena_bytes() / 1048576.0, device_mb,
        device_allocations, kernels_isa, products.c_str());
  } else {
    std::printf("model        %s (%s, %.1f MB)\n", options.cli.model_path.c_str(), dtype.c_str(),
                model->file().file_size() / 1048576.0);
    std::printf("settings     device %s, beam %d, batch %d, threads %d, arena %.1f MB\n",
                xf::device_name(t.device), t.max_beam, t.max_batch, t.threads, translator.arena_bytes() / 1048576.0);
    std::printf("sentences    %llu in %.3f s\n", static_cast<unsigned long long>(sentences), seconds);
    std::printf("tokens/s     %.1f\n", tokens / seconds);
    std::printf("sentences/s  %.2f\n", sentences / seconds);
    std::printf("latency      p50 %.2f ms, p90 %.2f ms (per request of up to %zu sentences)\n", p50, p90, batch);
    std::printf("per step     p50 %.3f ms, p90 %.3f ms (a request's time over its decoder steps)\n",
                step_p50, step_p90);
    std::printf("peak RSS     %.1f MB\n", peak_rss_mb);
    std::printf("allocations  %llu by xf, %llu inside the backend (oneDNN)\n",
                static_cast<unsigned long long>(allocations.xf),
                static_cast<unsigned long long>(allocations.backend));
    if (device_after)
      std::printf("device       %.1f MB in use, %llu device allocations during translation\n",
                  device_mb, device_allocations);
    std::printf("kernels      %s (xf's own loops)\n", kernels_isa);
    if (!products.empty()) std::printf("products     %s\n", products.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return xf::cli::tool_main("xf-bench", xf::cli::translator_tool_help(kUsage), argc, argv,
                            [](int argc, char** argv) { return run(parse_options(argc, argv)); });
}
