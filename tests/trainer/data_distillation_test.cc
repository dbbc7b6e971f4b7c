// Sequence-level distillation's data side (xf/trainer/distillation.h): degenerate outputs, the
// n-best choice by sentence BLEU, the progress record, and the output a killed run resumes.
// xf-distill killed at random moments: tests/tools/distill_test.cc, scripts/stress/distill_kills.sh.
#include <gtest/gtest.h>

#include <fstream>

#include "run_command.h"
#include "temp_dir.h"
#include "xf/error.h"
#include "xf/trainer/data.h"
#include "xf/trainer/distillation.h"

namespace xf::trainer {
namespace {

TEST(DegenerateOutput, KeepsOrdinaryTranslations) {
  const DegenerateFilters filters;
  EXPECT_EQ(degenerate_output("The cat sleeps.", "Le chat dort.", filters), DropReason::kept);
  EXPECT_EQ(degenerate_output("Go!", "Allez-y !", filters), DropReason::kept);
  // Short pairs are not judged by their ratio: "Hi." -> "Bonjour à vous." (1 -> 3 words).
  EXPECT_EQ(degenerate_output("Hi.", "Bonjour à vous tous.", filters), DropReason::kept);
  // A word used a few times is not a loop: "de" three times, no 3-gram thrice.
  EXPECT_EQ(degenerate_output("the book of Mary and the book of Paul and the pen of John",
                              "le livre de Marie et le livre de Paul et le stylo de Jean", filters),
            DropReason::kept);
}

TEST(DegenerateOutput, DropsEmptyOutputs) {
  const DegenerateFilters filters;
  EXPECT_EQ(degenerate_output("The cat sleeps.", "", filters), DropReason::empty);
  EXPECT_EQ(degenerate_output("The cat sleeps.", "  \t ", filters), DropReason::empty);
}

TEST(DegenerateOutput, DropsLengthRatiosFarOff) {
  DegenerateFilters filters;
  filters.repeat_ngram = 0;  // the ratio alone
  const std::string six = "one two three four five six", seven = six + " seven";
  EXPECT_EQ(degenerate_output("a b", seven, filters), DropReason::length_ratio);  // 7 > 3 x 2
  EXPECT_EQ(degenerate_output(seven, "a b", filters), DropReason::length_ratio);  // the other way
  EXPECT_EQ(degenerate_output("a b", six, filters), DropReason::kept);            // 6 = 3 x 2
  filters.max_length_ratio = 2;
  EXPECT_EQ(degenerate_output("a b c", seven, filters), DropReason::length_ratio);
  filters.max_length_ratio = 0;  // off
  EXPECT_EQ(degenerate_output("a", six + " " + six, filters), DropReason::kept);
}

TEST(DegenerateOutput, DropsRepeatedNgrams) {
  const DegenerateFilters filters;  // a 3-gram more than twice
  EXPECT_EQ(degenerate_output("very very good", "très très très très très bien", filters), DropReason::repeats);
  EXPECT_EQ(degenerate_output("a b a b", "a b a b a b a b", filters), DropReason::repeats);
  EXPECT_EQ(degenerate_output("x y z", "et le chat, et le chat, et le chat.", filters), DropReason::kept);  // "chat," vs "chat."
  EXPECT_EQ(degenerate_output("x y z", "et le chat et le chat et le chat", filters), DropReason::repeats);
  DegenerateFilters allow;
  allow.max_repeats = 3;
  EXPECT_EQ(degenerate_output("x y z", "et le chat et le chat et le chat", allow), DropReason::kept);
  allow.repeat_ngram = 0;
  EXPECT_EQ(degenerate_output("a b a b", "a b a b a b a b", allow), DropReason::kept);
}

TEST(BestBySentenceBleu, PicksTheCandidateClosestToTheReference) {
  const std::string reference = "le chat noir dort sur le tapis rouge";
  EXPECT_EQ(best_by_sentence_bleu({"un chat dort", "le chat noir dort sur le tapis rouge", "le chien"}, reference), 1u);
  EXPECT_EQ(best_by_sentence_bleu({"le chien", "le chat noir dort sur le tapis"}, reference), 1u);
  // Equal scores: the first, which the teacher scored best.
  EXPECT_EQ(best_by_sentence_bleu({"rien", "nada", "le chat noir dort"}, reference), 2u);
  EXPECT_EQ(best_by_sentence_bleu({"a", "b"}, reference), 0u);
  EXPECT_THROW(best_by_sentence_bleu({}, reference), Error);
}

TEST(DistillProgress, RoundTripsAndRefusesMalformedRecords) {
  DistillProgress p;
  p.settings = "in=x model=y beam=4";
  p.pairs_done = 12;
  p.pairs_total = 30;
  p.output_bytes = 345;
  p.dropped[0] = 9;
  p.dropped[1] = 1;
  p.dropped[2] = 1;
  p.dropped[3] = 1;
  p.source_too_long = 0;
  p.nbest_changed = 4;
  const std::string text = format_progress(p);
  EXPECT_EQ(format_progress(parse_progress(text, "rec")), text);
  EXPECT_THROW(parse_progress(text.substr(0, text.size() - 4), "rec"), Error);  // no "end"
  EXPECT_THROW(parse_progress("hello\n", "rec"), Error);
  std::string bad = text;
  bad.replace(bad.find("pairs_done 12"), 13, "pairs_done x");
  EXPECT_THROW(parse_progress(bad, "rec"), Error);
}

std::string slurp(const std::string& path) { return xf::test::read_file(path); }

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::app) << text;
}

TEST(ResumableOutput, ResumesFromTheRecordCuttingRowsWrittenAfterIt) {
  xf::test::TempDir dir("distill");
  const std::string out = dir.file("out.tsv");
  {
    ResumableOutput output(out, "s", 10);
    EXPECT_FALSE(output.resumed());
    DistillProgress done = output.progress();
    done.pairs_done = 3;
    done.dropped[0] = 2;
    done.dropped[1] = 1;
    output.commit("a\tA\nb\tB\n", done);
    EXPECT_EQ(output.progress().output_bytes, 8u);
  }
  // A kill after rows were appended but before their record, the last line torn.
  write(out, "c\tC\nd\t");
  {
    ResumableOutput output(out, "s", 10);
    EXPECT_TRUE(output.resumed());
    EXPECT_EQ(output.progress().pairs_done, 3u);
    EXPECT_EQ(output.progress().dropped[1], 1u);
    EXPECT_EQ(slurp(out), "a\tA\nb\tB\n");
    DistillProgress done = output.progress();
    done.pairs_done = 10;
    done.dropped[0] = 9;
    output.commit("c\tC\nd\tD\n", done);
  }
  EXPECT_EQ(slurp(out), "a\tA\nb\tB\nc\tC\nd\tD\n");
  EXPECT_EQ(parse_progress(slurp(ResumableOutput::progress_path(out)), "rec").pairs_done, 10u);
}

TEST(ResumableOutput, RefusesOtherSettingsAndAnOutputWithoutRecord) {
  xf::test::TempDir dir("distill");
  const std::string out = dir.file("out.tsv");
  { ResumableOutput output(out, "beam=4", 10); }
  EXPECT_THROW(ResumableOutput(out, "beam=5", 10), Error);
  EXPECT_THROW(ResumableOutput(out, "beam=4", 11), Error);
  const std::string lone = dir.file("lone.tsv");
  write(lone, "x\ty\n");
  EXPECT_THROW(ResumableOutput(lone, "beam=4", 10), Error);
  EXPECT_EQ(slurp(lone), "x\ty\n");  // untouched
}

TEST(ResumableOutput, RefusesAnOutputShorterThanItsRecord) {
  xf::test::TempDir dir("distill");
  const std::string out = dir.file("out.tsv");
  {
    ResumableOutput output(out, "s", 4);
    DistillProgress done = output.progress();
    done.pairs_done = 2;
    output.commit("a\tA\nb\tB\n", done);
  }
  std::ofstream(out, std::ios::trunc) << "a\tA\n";
  EXPECT_THROW(ResumableOutput(out, "s", 4), Error);
}

}  // namespace
}  // namespace xf::trainer
