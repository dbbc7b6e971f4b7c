#pragma once
// Sequence-level distillation's data side (xf-distill): which teacher outputs are degenerate,
// which of an n-best list to keep, and the output file that a killed run resumes by pair.
#include <cstdint>
#include <string>
#include <vector>

namespace xf::trainer {

// ---- Degenerate outputs ----------------------------------------------------------------------

// Lengths are counted in words (whitespace-separated, xf::metrics::count_words), so that the
// rules read the same whatever the tokenizer.
struct DegenerateFilters {
  // A pair whose longer side has more than this many times the words of its shorter side (and
  // at least kMinWordsForRatio words) is dropped; 0: no check.
  double max_length_ratio = 3.0;
  // An output in which some n-gram of `repeat_ngram` words occurs more than `max_repeats` times
  // is dropped ("très très très très très", "a b a b a b a b"); 0: no check.
  int repeat_ngram = 3;
  int max_repeats = 2;
};
inline constexpr int64_t kMinWordsForRatio = 6;

enum class DropReason { kept, empty, length_ratio, repeats };
inline constexpr int kDropReasons = 4;
const char* drop_reason_name(DropReason reason);  // "kept", "empty", "length ratio", "repeated n-grams"

// Why `output`, the teacher's translation of `source`, is unfit as a training target
// (DropReason::kept when it is fit).
DropReason degenerate_output(const std::string& source, const std::string& output,
                             const DegenerateFilters& filters);

// ---- n-best --------------------------------------------------------------------------------

// The index of the candidate with the highest sentence BLEU against `reference` (sacreBLEU's
// sentence_bleu: effective order), the first on ties, since candidates come best-scored first.
// Bergamot keeps that one of the teacher's n-best. Throws xf::Error when there is no candidate.
size_t best_by_sentence_bleu(const std::vector<std::string>& candidates, const std::string& reference);

// ---- Resumable output ------------------------------------------------------------------------

// What a run has done, kept in "<output>.progress" and replaced atomically after each chunk's
// rows are appended to the output and fsync'ed. `output_bytes` is the output's length at that
// moment: a resumed run cuts the output back to it, so rows appended after the last record (a
// chunk cut short by a kill, a torn last line) are dropped and written again, never twice.
struct DistillProgress {
  std::string settings;       // what the run was started with; a resume must match it
  uint64_t pairs_done = 0;    // corpus pairs translated (kept or dropped), from the first
  uint64_t pairs_total = 0;   // pairs in the corpus
  uint64_t output_bytes = 0;
  uint64_t dropped[kDropReasons] = {};  // by reason; dropped[kept] counts the kept pairs
  uint64_t source_too_long = 0;         // pairs not translated: longer than the plan
  uint64_t nbest_changed = 0;           // n-best: pairs whose kept output is not the 1-best
};

// Appends chunks of rows to `output` so that a kill at any moment loses no pair and repeats
// none. Opening resumes from "<output>.progress" when it exists (its settings must equal
// `settings`: xf::Error otherwise) and starts a fresh output when neither exists; an output
// without a progress record is refused rather than overwritten.
class ResumableOutput {
 public:
  ResumableOutput(const std::string& output, const std::string& settings, uint64_t pairs_total);
  ~ResumableOutput();
  ResumableOutput(const ResumableOutput&) = delete;
  ResumableOutput& operator=(const ResumableOutput&) = delete;

  const DistillProgress& progress() const { return progress_; }
  bool resumed() const { return resumed_; }
  // Appends `rows` (whole lines), fsyncs, then records `done`: progress() with the chunk's
  // pairs counted (its output_bytes as it was; the rows' length is added here).
  void commit(const std::string& rows, const DistillProgress& done);

  static std::string progress_path(const std::string& output) { return output + ".progress"; }

 private:
  std::string path_;
  int fd_ = -1;
  DistillProgress progress_;
  bool resumed_ = false;
};

// The record's text and back (xf::Error naming `label` on a malformed record).
std::string format_progress(const DistillProgress& progress);
DistillProgress parse_progress(const std::string& text, const std::string& label);

}  // namespace xf::trainer
