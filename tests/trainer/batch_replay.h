#pragma once
// The data tests' replay check: a batch's examples by their tokens, and the batches of three
// epochs recorded from a straight iterator and replayed by iterators started at saved positions
// (the first, the second, an epoch's last and first, one inside the third epoch).
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "xf/trainer/data.h"

namespace xf::trainer::testing {

using Example = std::pair<std::vector<int32_t>, std::vector<int32_t>>;

inline std::vector<Example> examples_of(const BatchIterator& it, const BatchIndices& batch) {
  std::vector<Example> out;
  const TokenizedCorpus& c = it.corpus();
  for (uint32_t i : batch) {
    out.emplace_back(std::vector<int32_t>(c.source(i), c.source(i) + c.source_length(i)),
                     std::vector<int32_t>(c.target(i), c.target(i) + c.target_length(i)));
  }
  return out;
}

// make(position) -> BatchIterator. Returns the straight run's batches (three epochs); the
// replays are checked with ASSERTs (a test calls it under ASSERT_NO_FATAL_FAILURE).
template <typename Make>
std::vector<std::vector<Example>> expect_replays_from_saved_positions(Make make,
                                                                      const DataPosition& start) {
  BatchIterator straight = make(start);
  const size_t per_epoch = straight.batches_per_epoch();
  EXPECT_GT(per_epoch, 3u);
  std::vector<std::vector<Example>> sequence;
  std::vector<DataPosition> positions;
  for (size_t i = 0; i < 3 * per_epoch; ++i) {
    positions.push_back(straight.position());
    sequence.push_back(examples_of(straight, straight.next()));
  }
  for (size_t k : {size_t{0}, size_t{1}, per_epoch - 1, per_epoch, 2 * per_epoch + 1}) {
    if (k >= sequence.size()) continue;
    BatchIterator resumed = make(positions[k]);
    for (size_t i = k; i < sequence.size(); ++i) {
      const std::vector<Example> replayed = examples_of(resumed, resumed.next());
      EXPECT_EQ(replayed, sequence[i]) << "resumed at " << k << ", batch " << i;
      if (replayed != sequence[i]) break;
    }
  }
  return sequence;
}

}  // namespace xf::trainer::testing
