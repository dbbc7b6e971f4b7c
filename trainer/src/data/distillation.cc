// Sequence-level distillation's data side: degenerate outputs, n-best choice, resumable output.
#include "xf/trainer/distillation.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>

#include "xf/error.h"
#include "xf/format/model_writer.h"
#include "xf/metrics.h"
#include "xf/trainer/data.h"

namespace xf::trainer {
namespace {

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

bool has_repeated_ngram(const std::vector<std::string>& words, int n, int max_repeats) {
  if (n <= 0 || words.size() < static_cast<size_t>(n)) return false;
  std::map<std::vector<std::string>, int> counts;
  for (size_t i = 0; i + n <= words.size(); ++i)
    if (++counts[std::vector<std::string>(words.begin() + i, words.begin() + i + n)] > max_repeats) return true;
  return false;
}

const char* const kRecordHeader = "xf-distill progress 1";

}  // namespace

const char* drop_reason_name(DropReason reason) {
  switch (reason) {
    case DropReason::kept: return "kept";
    case DropReason::empty: return "empty";
    case DropReason::length_ratio: return "length ratio";
    case DropReason::repeats: return "repeated n-grams";
  }
  return "?";
}

DropReason degenerate_output(const std::string& source, const std::string& output,
                             const DegenerateFilters& filters) {
  const std::vector<std::string> words = words_of(output);
  if (words.empty()) return DropReason::empty;
  if (filters.max_length_ratio > 0) {
    const int64_t out_words = static_cast<int64_t>(words.size());
    const int64_t source_words = metrics::count_words(source);
    const int64_t longer = std::max(out_words, source_words);
    const int64_t shorter = std::max<int64_t>(1, std::min(out_words, source_words));
    if (longer >= kMinWordsForRatio && static_cast<double>(longer) > filters.max_length_ratio * shorter)
      return DropReason::length_ratio;
  }
  if (filters.repeat_ngram > 0 && has_repeated_ngram(words, filters.repeat_ngram, filters.max_repeats))
    return DropReason::repeats;
  return DropReason::kept;
}

size_t best_by_sentence_bleu(const std::vector<std::string>& candidates, const std::string& reference) {
  if (candidates.empty()) throw Error("best_by_sentence_bleu: no candidate");
  const std::vector<std::string> references = {reference};
  size_t best = 0;
  double best_bleu = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const double bleu =
        metrics::bleu_from_stats(metrics::bleu_sentence_stats(candidates[i], references), /*effective_order=*/true)
            .score;
    if (bleu > best_bleu) {
      best_bleu = bleu;
      best = i;
    }
  }
  return best;
}

std::string format_progress(const DistillProgress& p) {
  std::ostringstream out;
  out << kRecordHeader << "\n"
      << "settings " << p.settings << "\n"
      << "pairs_done " << p.pairs_done << "\n"
      << "pairs_total " << p.pairs_total << "\n"
      << "output_bytes " << p.output_bytes << "\n"
      << "kept " << p.dropped[0] << "\n"
      << "empty " << p.dropped[1] << "\n"
      << "length_ratio " << p.dropped[2] << "\n"
      << "repeats " << p.dropped[3] << "\n"
      << "source_too_long " << p.source_too_long << "\n"
      << "nbest_changed " << p.nbest_changed << "\n"
      << "end\n";
  return out.str();
}

DistillProgress parse_progress(const std::string& text, const std::string& label) {
  DistillProgress p;
  std::istringstream in(text);
  std::string line;
  const auto bad = [&](const std::string& what) { return Error(label + ": not a progress record of xf-distill (" + what + ")"); };
  if (!std::getline(in, line) || line != kRecordHeader) throw bad("first line");
  if (!std::getline(in, line) || line.rfind("settings ", 0) != 0) throw bad("settings");
  p.settings = line.substr(9);
  uint64_t* const fields[] = {&p.pairs_done, &p.pairs_total, &p.output_bytes, &p.dropped[0], &p.dropped[1],
                              &p.dropped[2], &p.dropped[3], &p.source_too_long, &p.nbest_changed};
  const char* const names[] = {"pairs_done", "pairs_total", "output_bytes", "kept", "empty",
                               "length_ratio", "repeats", "source_too_long", "nbest_changed"};
  for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); ++i) {
    std::string name;
    if (!std::getline(in, line)) throw bad(names[i]);
    std::istringstream fields_in(line);
    if (!(fields_in >> name >> *fields[i]) || name != names[i]) throw bad(names[i]);
  }
  // A record is replaced by rename, so a torn one cannot be seen; "end" still checks it is whole.
  if (!std::getline(in, line) || line != "end") throw bad("end");
  return p;
}

ResumableOutput::ResumableOutput(const std::string& output, const std::string& settings, uint64_t pairs_total)
    : path_(output) {
  const std::string record_path = progress_path(output);
  struct stat st {};
  const bool record_exists = ::stat(record_path.c_str(), &st) == 0;
  const std::string record = record_exists ? read_file_bytes(record_path) : std::string();
  st = {};
  const bool output_exists = ::stat(output.c_str(), &st) == 0;
  if (record_exists) {
    progress_ = parse_progress(record, record_path);
    if (progress_.settings != settings)
      throw Error(record_path + ": the run was started with other settings (" + progress_.settings +
                  "); remove " + output + " and " + record_path + " to start again");
    if (progress_.pairs_total != pairs_total)
      throw Error(record_path + ": the run had " + std::to_string(progress_.pairs_total) +
                  " pairs, the corpus now has " + std::to_string(pairs_total));
    const uint64_t output_size = output_exists ? static_cast<uint64_t>(st.st_size) : 0;
    if (output_size < progress_.output_bytes)
      throw Error(output + ": shorter than its progress record says (" + std::to_string(progress_.output_bytes) +
                  " bytes): was it changed?");
    resumed_ = true;
  } else {
    if (output_exists)
      throw Error(output + ": exists without a progress record (" + record_path + "); remove it or choose another output");
    progress_.settings = settings;
    progress_.pairs_total = pairs_total;
    const std::string first = format_progress(progress_);
    write_file_atomically(record_path, first.data(), first.size());
  }
  fd_ = ::open(output.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(output + ": cannot write the output: " + std::strerror(errno));
  // Rows after the record's length are from a chunk whose record was never written: cut them.
  if (::ftruncate(fd_, static_cast<off_t>(progress_.output_bytes)) != 0 ||
      ::lseek(fd_, static_cast<off_t>(progress_.output_bytes), SEEK_SET) < 0)
    throw Error(output + ": cannot cut the output back to its last record: " + std::strerror(errno));
}

ResumableOutput::~ResumableOutput() {
  if (fd_ >= 0) ::close(fd_);
}

void ResumableOutput::commit(const std::string& rows, const DistillProgress& done) {
  if (done.output_bytes != progress_.output_bytes || done.settings != progress_.settings)
    throw Error(path_ + ": commit: the progress given is not this output's");
  write_all(fd_, rows.data(), rows.size(), path_);
  if (::fsync(fd_) != 0) throw Error(path_ + ": fsync failed: " + std::strerror(errno));
  progress_ = done;
  progress_.output_bytes += rows.size();
  const std::string record = format_progress(progress_);
  write_file_atomically(progress_path(path_), record.data(), record.size());
}

}  // namespace xf::trainer
