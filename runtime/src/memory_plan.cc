#include "memory_plan.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "xf/error.h"
#include "xf/model.h"

namespace xf::runtime {
namespace {

// Rows per encoder group: its working buffers (Q|K|V, context, FFN hidden: about 9 x d_model
// floats a row) are the arena's largest after the caches. 1024 rows keep them near 9 MB at
// d_model 256; on the CPU the products run in chunks of 128 rows anyway, so smaller groups
// cost no speed (4096 cost 25 MB more peak RSS at batch 32, beam 4).
constexpr int64_t kEncoderGroupRows = 1024;

void require(bool ok, const std::string& message) {
  if (!ok) throw Error(message);
}

}  // namespace

MemoryPlan make_memory_plan(const ModelConfig& config, const TranslatorOptions& given_options) {
  // max_beam 0 is xf's default beam (the Translator has given it the model's).
  const TranslatorOptions options = given_options.with_defaults(DecodingDefaults{});
  require(options.max_batch >= 1, "max_batch must be at least 1, got " + std::to_string(options.max_batch));
  require(options.max_beam >= 1, "max_beam must be at least 1, got " + std::to_string(options.max_beam));
  require(options.threads >= 1, "threads must be at least 1, got " + std::to_string(options.threads));
  require(options.max_source_len >= 1,
          "max_source_len must be at least 1, got " + std::to_string(options.max_source_len));
  require(static_cast<uint64_t>(options.max_source_len) <= config.max_positions,
          "max_source_len " + std::to_string(options.max_source_len) +
              " exceeds the model's max_positions " + std::to_string(config.max_positions));
  // The beam search takes the best `beam` continuations of each hypothesis.
  require(static_cast<uint64_t>(options.max_beam) <= config.target_vocab_size,
          "max_beam " + std::to_string(options.max_beam) + " is too wide for a target vocabulary of " +
              std::to_string(config.target_vocab_size));
  require(std::isfinite(options.max_len_a) && options.max_len_a >= 0.0f,
          "max_len_a must be a non-negative number");

  MemoryPlan plan;
  plan.max_sentences = options.max_batch;
  plan.max_beam = options.max_beam;
  plan.max_rows = plan.max_sentences * plan.max_beam;
  plan.max_source_len = options.max_source_len;
  const double target = std::floor(static_cast<double>(options.max_len_a) * options.max_source_len +
                                   options.max_len_b);
  plan.max_target_len = static_cast<int64_t>(
      std::clamp(target, 1.0, static_cast<double>(config.max_positions)));
  plan.encoder_group_rows = std::max<int64_t>(
      plan.max_source_len, std::min<int64_t>(kEncoderGroupRows, plan.max_sentences * plan.max_source_len));
  return plan;
}

int64_t max_output_length(const MemoryPlan& plan, const TranslateOptions& options,
                          int64_t source_tokens) {
  double length = std::floor(static_cast<double>(options.max_len_a) * source_tokens + options.max_len_b);
  if (options.max_decoding_length > 0) length = std::min<double>(length, options.max_decoding_length);
  return static_cast<int64_t>(std::clamp(length, 1.0, static_cast<double>(plan.max_target_len)));
}

size_t ArenaLayout::reserve(size_t bytes) {
  const size_t offset = (size_ + alignment_ - 1) / alignment_ * alignment_;
  size_ = offset + std::max<size_t>(bytes, 1);
  high_water_ = std::max(high_water_, size_);
  return offset;
}

size_t ArenaLayout::bytes() const {
  return (std::max<size_t>(high_water_, 1) + alignment_ - 1) / alignment_ * alignment_;
}

HostArena::HostArena(size_t bytes) : bytes_(bytes) {
  void* memory = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED)
    throw Error("cannot map the translator's arena of " + std::to_string(bytes_) + " bytes");
  base_ = memory;
}

HostArena::~HostArena() { munmap(base_, bytes_); }

}  // namespace xf::runtime
