// A sentence translates the same (ids and score) alone and inside a batch of 32, greedy and beam 4, with the
// bundled int8 model (int8 products quantize their input per row) and its f32 conversion, and with
// the bundled student (SSRU decoder, its stored shortlist: a batch's shortlist is the union of its
// sentences' candidates, so the output layer's rows differ with the batch).
// Before the per-row scales, 20 of the first 200 test.tsv sentences changed with the batch.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "xf/kernels_cpu/isa.h"
#include "xf/translator.h"

namespace {

const std::string kModel = std::string(XF_SOURCE_DIR) + "/models/enfr.xfm";
const std::string kStudent = std::string(XF_SOURCE_DIR) + "/models/enfr-student.xfm";

// 32 ordinary sentences, plus a long one and an odd one, which set the batch's extremes.
std::vector<std::string> sentences() {
  const char* subjects[] = {"The teacher", "My brother", "Our neighbours", "The old man"};
  const char* predicates[] = {"wants to buy a new car.",  "has never seen the sea.",
                              "is reading a long book.",  "will arrive tomorrow morning.",
                              "forgot his keys at home.", "likes to walk in the park.",
                              "doesn't understand French.", "is waiting for the bus."};
  std::vector<std::string> out;
  for (const char* s : subjects)
    for (const char* p : predicates) out.push_back(std::string(s) + " " + p);
  out.push_back("When the rain finally stopped after three long days, the farmers went back to their "
                "fields, the children ran outside to play, and the whole village seemed to breathe again.");
  out.push_back("ZZZ!!! 1234567 ??? $$$ ### QQQQ xyzzy 99999 ... WHAT?!");
  return out;
}

// Each line's best hypothesis: its ids and score.
std::vector<std::pair<std::vector<int32_t>, float>> translate(xf::Translator& translator,
                                                              const std::vector<std::string>& lines, int beam,
                                                              bool alone) {
  xf::TranslateOptions options;
  options.beam = beam;
  std::vector<std::pair<std::vector<int32_t>, float>> best;
  auto keep = [&](const auto& t) { best.emplace_back(t.hypotheses[0].ids, t.hypotheses[0].score); };
  if (alone) {
    for (const auto& line : lines) keep(translator.translate({line}, options)[0]);
  } else {
    for (const auto& result : translator.translate(lines, options)) keep(result);
  }
  return best;
}

// exact_scores: the scores too, bit for bit.
void expect_batch_independent(std::optional<xf::DType> weight_dtype, const std::string& model = kModel,
                              bool exact_scores = true) {
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " is not in this checkout";
  xf::TranslatorOptions options;
  options.max_batch = 32;
  options.max_beam = 4;
  options.threads = 2;
  options.weight_dtype = weight_dtype;
  xf::Translator translator(xf::Model::open(model), options);
  const std::vector<std::string> lines = sentences();
  for (int beam : {1, 4}) {
    const auto batched = translate(translator, lines, beam, false);
    const auto alone = translate(translator, lines, beam, true);
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(alone[i].first, batched[i].first) << "beam " << beam << ", sentence " << i + 1 << ": " << lines[i];
      if (exact_scores)
        EXPECT_EQ(alone[i].second, batched[i].second) << "beam " << beam << ", sentence " << i + 1 << ": " << lines[i];
    }
  }
}

TEST(BatchIndependence, Int8ModelAloneOrInABatchOf32) { expect_batch_independent(std::nullopt); }

// f32 scores bit for bit where one row's sums do not depend on the row count (AVX-512); below,
// xf's AVX2 panel kernel and oneDNN's SSE4.1 gemm sum a row in an order that does (open), so
// there only the ids.
TEST(BatchIndependence, F32ModelAloneOrInABatchOf32) {
  const xf::cpu::CpuIsa isa = xf::cpu::cpu_isa();
  expect_batch_independent(xf::DType::f32, kModel, isa == xf::cpu::CpuIsa::avx512 || isa == xf::cpu::CpuIsa::avx512_vnni);
}

TEST(BatchIndependence, StudentWithItsShortlistAloneOrInABatchOf32) {
  expect_batch_independent(std::nullopt, kStudent);
}

}  // namespace
