#pragma once
// Fresh random inputs for kernel tests. Every run draws a new seed from std::random_device;
// tests put SCOPED_TRACE(random.describe()) first so a failure prints the seed, and
// XF_TEST_SEED=<seed> replays that run.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace xf::test {

class RandomInputs {
 public:
  RandomInputs() : seed_(initial_seed()), engine_(seed_) {}

  std::string describe() const {
    return "random seed " + std::to_string(seed_) +
           " (replay with XF_TEST_SEED=" + std::to_string(seed_) + ")";
  }

  std::vector<float> uniform(size_t count, float low, float high) {
    std::uniform_real_distribution<float> distribution(low, high);
    std::vector<float> values(count);
    for (float& v : values) v = distribution(engine_);
    return values;
  }

  int64_t integer(int64_t low, int64_t high) {  // inclusive
    return std::uniform_int_distribution<int64_t>(low, high)(engine_);
  }

 private:
  static uint32_t initial_seed() {
    if (const char* replay = std::getenv("XF_TEST_SEED")) {
      return static_cast<uint32_t>(std::strtoul(replay, nullptr, 10));
    }
    return std::random_device{}();
  }

  uint32_t seed_;
  std::mt19937_64 engine_;
};

}  // namespace xf::test
