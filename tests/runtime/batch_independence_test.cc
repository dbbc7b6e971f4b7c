// A sentence translates the same alone and inside a batch of 32, greedy and beam 4, with the
// bundled int8 model (int8 products quantize their input per row) and its f32 conversion, and with
// the bundled student (SSRU decoder, its stored shortlist: a batch's shortlist is the union of its
// sentences' candidates, so the output layer's rows differ with the batch).
// Before the per-row scales, 20 of the first 200 test.tsv sentences changed with the batch.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

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

std::vector<std::vector<int32_t>> translate(xf::Translator& translator, const std::vector<std::string>& lines,
                                            int beam, bool alone) {
  xf::TranslateOptions options;
  options.beam = beam;
  std::vector<std::vector<int32_t>> ids;
  if (alone) {
    for (const auto& line : lines) ids.push_back(translator.translate({line}, options)[0].hypotheses[0].ids);
  } else {
    for (const auto& result : translator.translate(lines, options)) ids.push_back(result.hypotheses[0].ids);
  }
  return ids;
}

void expect_batch_independent(std::optional<xf::DType> weight_dtype, const std::string& model = kModel) {
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
    for (size_t i = 0; i < lines.size(); ++i)
      EXPECT_EQ(alone[i], batched[i]) << "beam " << beam << ", sentence " << i + 1 << ": " << lines[i];
  }
}

TEST(BatchIndependence, Int8ModelAloneOrInABatchOf32) { expect_batch_independent(std::nullopt); }

TEST(BatchIndependence, F32ModelAloneOrInABatchOf32) { expect_batch_independent(xf::DType::f32); }

TEST(BatchIndependence, StudentWithItsShortlistAloneOrInABatchOf32) {
  expect_batch_independent(std::nullopt, kStudent);
}

}  // namespace
