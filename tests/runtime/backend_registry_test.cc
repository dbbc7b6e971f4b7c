// The adapter around a device module's backend (runtime/src/backend_registry.cc): every call of
// Backend reaches the module's backend with its arguments and results, and what the module
// throws comes back as xf::Error with its message.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend.h"
#include "xf/error.h"

namespace xf::runtime {
namespace {

// Records what it was called with; overrides every virtual of Backend with a result that
// differs from Backend's default, so a call the adapter does not forward shows.
class RecordingBackend final : public Backend {
 public:
  std::vector<std::string> calls;
  float logits[4] = {};
  bool throw_next = false;

  void encode(const int32_t* ids, const int32_t* lengths, int64_t sentences,
              int64_t source_len) override {
    record("encode " + std::to_string(ids[0]) + " " + std::to_string(lengths[0]) + " " +
           std::to_string(sentences) + " " + std::to_string(source_len));
  }
  void decode_step(const int32_t* tokens, int64_t beam, int64_t step, const int32_t* live) override {
    record("decode_step " + std::to_string(tokens[0]) + " " + std::to_string(beam) + " " +
           std::to_string(step) + " " + (live != nullptr ? std::to_string(live[0]) : "all"));
  }
  void top_k(const float* row_offsets, int64_t k, float* values, int32_t* ids) override {
    record("top_k " + std::to_string(row_offsets[0]) + " " + std::to_string(k));
    values[0] = -1.5f;
    ids[0] = 7;
  }
  float* host_logits() override {
    record("host_logits");
    return logits;
  }
  void reorder_cache(const int32_t* parents, int64_t step) override {
    record("reorder_cache " + std::to_string(parents[0]) + " " + std::to_string(step));
  }
  bool can_drop_sentences() const override { return true; }
  void keep_sentences(const int32_t* kept, int64_t count) override {
    record("keep_sentences " + std::to_string(kept[0]) + " " + std::to_string(count));
  }
  size_t arena_bytes() const override { return 12345; }

 private:
  void record(std::string call) {
    if (throw_next) throw std::runtime_error("module failed in " + call);
    calls.push_back(std::move(call));
  }
};

TEST(ModuleBackendAdapter, ForwardsEveryCallWithItsArgumentsAndResults) {
  auto owned = std::make_unique<RecordingBackend>();
  RecordingBackend& inner = *owned;
  std::unique_ptr<Backend> adapted = adapt_module_backend(std::move(owned));

  const int32_t ids[] = {11}, lengths[] = {3}, tokens[] = {5}, parents[] = {2}, kept[] = {1},
                live[] = {3};
  const float offsets[] = {0.25f};
  float value = 0;
  int32_t id = 0;
  adapted->encode(ids, lengths, 1, 3);
  adapted->decode_step(tokens, 4, 6, live);
  adapted->top_k(offsets, 1, &value, &id);
  EXPECT_EQ(adapted->host_logits(), inner.logits);
  adapted->reorder_cache(parents, 6);
  adapted->keep_sentences(kept, 1);
  EXPECT_TRUE(adapted->can_drop_sentences());
  EXPECT_EQ(adapted->arena_bytes(), 12345u);
  EXPECT_EQ(value, -1.5f);
  EXPECT_EQ(id, 7);
  const std::vector<std::string> expected = {
      "encode 11 3 1 3", "decode_step 5 4 6 3", "top_k 0.250000 1", "host_logits",
      "reorder_cache 2 6", "keep_sentences 1 1"};
  EXPECT_EQ(inner.calls, expected);
}

TEST(ModuleBackendAdapter, WhatTheModuleThrowsArrivesAsErrorWithItsMessage) {
  auto owned = std::make_unique<RecordingBackend>();
  owned->throw_next = true;
  std::unique_ptr<Backend> adapted = adapt_module_backend(std::move(owned));
  const int32_t tokens[] = {5};
  try {
    adapted->decode_step(tokens, 1, 0);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "module failed in decode_step 5 1 0 all");
  }
}

}  // namespace
}  // namespace xf::runtime
