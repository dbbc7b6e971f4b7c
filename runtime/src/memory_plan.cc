#include "memory_plan.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "xf/error.h"

namespace xf::runtime {
namespace {

constexpr int64_t kMatmulChunk = 128;      // rows per product call on long inputs
constexpr int64_t kSmallRowCounts = 16;    // every count 1..16 is planned exactly
constexpr int64_t kRowStep = 16;           // above that, multiples of 16
constexpr int64_t kEncoderGroupRows = 4096;
constexpr size_t kAlignment = 64;

void require(bool ok, const std::string& message) {
  if (!ok) throw Error(message);
}

}  // namespace

int64_t MemoryPlan::padded_remainder(int64_t rows) const {
  auto it = std::lower_bound(matmul_row_counts.begin(), matmul_row_counts.end(), rows);
  if (it == matmul_row_counts.end()) throw Error("internal: no planned matmul for " + std::to_string(rows) + " rows");
  return *it;
}

int64_t MemoryPlan::padded_rows(int64_t rows) const {
  const int64_t full = rows / matmul_chunk * matmul_chunk;
  const int64_t rest = rows - full;
  return full + (rest > 0 ? padded_remainder(rest) : 0);
}

MemoryPlan make_memory_plan(const ModelConfig& config, const TranslatorOptions& options) {
  require(options.max_batch >= 1, "max_batch must be at least 1, got " + std::to_string(options.max_batch));
  require(options.beam >= 1, "beam must be at least 1, got " + std::to_string(options.beam));
  require(options.threads >= 1, "threads must be at least 1, got " + std::to_string(options.threads));
  require(options.max_source_len >= 1,
          "max_source_len must be at least 1, got " + std::to_string(options.max_source_len));
  require(static_cast<uint64_t>(options.max_source_len) <= config.max_positions,
          "max_source_len " + std::to_string(options.max_source_len) +
              " exceeds the model's max_positions " + std::to_string(config.max_positions));
  // The beam search takes the best `beam` continuations of each hypothesis.
  require(static_cast<uint64_t>(options.beam) <= config.target_vocab_size,
          "beam " + std::to_string(options.beam) + " is too wide for a target vocabulary of " +
              std::to_string(config.target_vocab_size));
  require(std::isfinite(options.max_len_a) && options.max_len_a >= 0.0f,
          "max_len_a must be a non-negative number");

  MemoryPlan plan;
  plan.max_sentences = options.max_batch;
  plan.max_beam = options.beam;
  plan.max_rows = plan.max_sentences * plan.max_beam;
  plan.max_source_len = options.max_source_len;
  const double target = std::floor(static_cast<double>(options.max_len_a) * options.max_source_len +
                                   options.max_len_b);
  plan.max_target_len = static_cast<int64_t>(
      std::clamp(target, 1.0, static_cast<double>(config.max_positions)));
  plan.encoder_group_rows = std::max<int64_t>(
      plan.max_source_len, std::min<int64_t>(kEncoderGroupRows, plan.max_sentences * plan.max_source_len));

  // Row counts: 1..16, then multiples of 16 up to the chunk, but no more than any product needs.
  const int64_t largest = std::max(plan.max_rows, plan.encoder_group_rows);
  plan.matmul_chunk = std::min(kMatmulChunk, largest);
  for (int64_t m = 1; m <= std::min(kSmallRowCounts, plan.matmul_chunk); ++m) plan.matmul_row_counts.push_back(m);
  for (int64_t m = 2 * kRowStep; m < plan.matmul_chunk + kRowStep; m += kRowStep)
    plan.matmul_row_counts.push_back(std::min(m, plan.matmul_chunk));
  plan.matmul_row_counts.erase(std::unique(plan.matmul_row_counts.begin(), plan.matmul_row_counts.end()),
                               plan.matmul_row_counts.end());
  plan.matmul_chunk = plan.matmul_row_counts.back();
  return plan;
}

int64_t max_output_length(const MemoryPlan& plan, const TranslateOptions& options,
                          int64_t source_tokens) {
  double length = std::floor(static_cast<double>(options.max_len_a) * source_tokens + options.max_len_b);
  if (options.max_decoding_length > 0) length = std::min<double>(length, options.max_decoding_length);
  return static_cast<int64_t>(std::clamp(length, 1.0, static_cast<double>(plan.max_target_len)));
}

size_t Arena::reserve(size_t bytes) {
  if (base_ != nullptr) throw Error("internal: arena reservation after allocation");
  const size_t offset = (size_ + kAlignment - 1) / kAlignment * kAlignment;
  size_ = offset + std::max<size_t>(bytes, 1);
  high_water_ = std::max(high_water_, size_);
  return offset;
}

void Arena::rewind(size_t mark) { size_ = mark; }

void Arena::allocate() {
  mapped_ = std::max<size_t>(high_water_, 1);
  void* memory = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    mapped_ = 0;
    throw Error("cannot map the translator's arena of " + std::to_string(high_water_) + " bytes");
  }
  base_ = static_cast<uint8_t*>(memory);
}

Arena::~Arena() {
  if (base_ != nullptr) munmap(base_, mapped_);
}

}  // namespace xf::runtime
