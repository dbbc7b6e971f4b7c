// The communicator's pieces that need no second process: how a global batch is shared out among
// ranks, and a single process's exchanges leaving data as it is.
#include <gtest/gtest.h>

#include <numeric>

#include "xf/trainer/communicator.h"

namespace xf::trainer {
namespace {

TEST(Communicator, RankSharesCoverTheBatchOnceInOrderAndDifferByAtMostOneRow) {
  for (size_t rows : {0u, 1u, 2u, 3u, 7u, 8u, 33u}) {
    std::vector<uint32_t> batch(rows);
    std::iota(batch.begin(), batch.end(), 100u);
    for (int ranks : {1, 2, 3, 4, 8}) {
      std::vector<uint32_t> joined;
      size_t smallest = rows, largest = 0;
      for (int rank = 0; rank < ranks; ++rank) {
        auto share = rank_share(batch, rank, ranks);
        joined.insert(joined.end(), share.begin(), share.end());
        smallest = std::min(smallest, share.size());
        largest = std::max(largest, share.size());
      }
      EXPECT_EQ(joined, batch) << rows << " rows, " << ranks << " ranks";
      EXPECT_LE(largest - smallest, 1u) << rows << " rows, " << ranks << " ranks";
    }
  }
  // Fewer rows than ranks: the first ranks take one row each, the last idle.
  EXPECT_EQ(rank_share(std::vector<int>{5}, 0, 2), std::vector<int>{5});
  EXPECT_EQ(rank_share(std::vector<int>{5}, 1, 2), std::vector<int>{});
}

TEST(Communicator, OneProcessKeepsItsDataAndHasNoPeers) {
  SingleProcess one;
  EXPECT_EQ(one.rank(), 0);
  EXPECT_EQ(one.size(), 1);
  std::vector<float> values = {1.5f, -2.0f};
  one.all_reduce_sum(values.data(), values.size());
  EXPECT_EQ(values, (std::vector<float>{1.5f, -2.0f}));
  std::string text = "vocabulary";
  broadcast_string(one, &text, 0);
  EXPECT_EQ(text, "vocabulary");
}

}  // namespace
}  // namespace xf::trainer
