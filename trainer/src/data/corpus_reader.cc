// Parallel text readers: TSV and the Hugging Face CSV export, with UTF-8 validation.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "xf/error.h"
#include "xf/trainer/data.h"
#include "xf/utf8.h"

namespace xf::trainer {
namespace {

const char* kEnglishCsvColumn = "English words/sentences";
const char* kFrenchCsvColumn = "French words/sentences";

std::string_view strip_carriage_return(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// Malformed pairs of one file: each skipped with a warning (the first few) and counted by cause,
// or an error when the policy is strict; finish() prints the counts and refuses a file with too
// many.
class MalformedPairs {
 public:
  enum Cause { missing_field, extra_fields, invalid_utf8, empty_side, kCauses };

  MalformedPairs(const std::string& label, const CorpusLanguages& policy) : label_(label), policy_(policy) {}

  // Records the malformed pair at `line` (throws "<label>:<line>: <problem>" when strict).
  void add(Cause cause, size_t line, const std::string& problem) {
    const std::string where = label_ + ":" + std::to_string(line) + ": " + problem;
    if (policy_.strict) throw Error(where);
    if (total() < kWarnedBadLines) std::fprintf(stderr, "warning: %s; pair skipped\n", where.c_str());
    ++counts_[cause];
  }

  // Checks a pair's fields; false (recorded) when one is malformed.
  bool check_fields(std::string_view first, std::string_view second, size_t line) {
    if (!is_valid_utf8(first) || !is_valid_utf8(second)) {
      add(invalid_utf8, line, "invalid UTF-8");
      return false;
    }
    if (first.empty() || second.empty()) {
      add(empty_side, line, "empty " + std::string(first.empty() ? "first" : "second") + " field");
      return false;
    }
    return true;
  }

  // After the last of `pairs` (good and malformed) pairs.
  void finish(size_t pairs) const {
    const size_t bad = total();
    if (bad == 0) return;
    static const char* const names[kCauses] = {"with a field missing", "with extra fields", "with invalid UTF-8",
                                               "with an empty side"};
    std::string causes;
    for (int c = 0; c < kCauses; ++c)
      if (counts_[c] > 0) causes += (causes.empty() ? "" : ", ") + std::to_string(counts_[c]) + " " + names[c];
    std::fprintf(stderr, "warning: %s: skipped %zu of %zu pairs (%s)\n", label_.c_str(), bad, pairs, causes.c_str());
    if (static_cast<double>(bad) > policy_.max_bad_share * static_cast<double>(pairs)) {
      char share[64];
      std::snprintf(share, sizeof share, "%.4g%%, more than --max-bad-lines %.4g%%", 100.0 * bad / pairs,
                    100.0 * policy_.max_bad_share);
      throw Error(label_ + ": " + std::to_string(bad) + " of " + std::to_string(pairs) + " pairs are malformed (" +
                  share + "): is it in the expected format?");
    }
  }

 private:
  size_t total() const {
    size_t n = 0;
    for (size_t c : counts_) n += c;
    return n;
  }

  const std::string& label_;
  const CorpusLanguages& policy_;
  size_t counts_[kCauses] = {};
};

bool starts_with_bom(std::string_view text) { return text.substr(0, 3) == "\xEF\xBB\xBF"; }

}  // namespace

std::string csv_column_for_language(const std::string& language) {
  if (language == "en") return kEnglishCsvColumn;
  if (language == "fr") return kFrenchCsvColumn;
  throw Error("language '" + language + "': the CSV export has columns for en and fr only");
}

std::vector<TextPair> parse_tsv(std::string_view text, const std::string& label,
                                const CorpusLanguages& languages) {
  bool first_is_source;
  if (languages.source == languages.tsv_first && languages.target == languages.tsv_second) {
    first_is_source = true;
  } else if (languages.source == languages.tsv_second && languages.target == languages.tsv_first) {
    first_is_source = false;
  } else {
    throw Error(label + ": a TSV file holds " + languages.tsv_first + " and " +
                languages.tsv_second + ", not " + languages.source + "-" + languages.target);
  }
  if (starts_with_bom(text)) text.remove_prefix(3);

  std::vector<TextPair> pairs;
  MalformedPairs malformed(label, languages);
  size_t line_number = 0, seen = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = strip_carriage_return(text.substr(start, end - start));
    start = end + 1;
    ++line_number;
    if (line.empty()) continue;
    ++seen;
    if (!is_valid_utf8(line)) {
      malformed.add(MalformedPairs::invalid_utf8, line_number, "invalid UTF-8");
      continue;
    }
    size_t tab = line.find('\t');
    if (tab == std::string_view::npos) {
      malformed.add(MalformedPairs::missing_field, line_number, "expected two tab-separated fields, found one");
      continue;
    }
    if (line.find('\t', tab + 1) != std::string_view::npos) {
      malformed.add(MalformedPairs::extra_fields, line_number, "expected two tab-separated fields, found more");
      continue;
    }
    if (!malformed.check_fields(line.substr(0, tab), line.substr(tab + 1), line_number)) continue;
    std::string first(line.substr(0, tab));
    std::string second(line.substr(tab + 1));
    if (first_is_source) {
      pairs.push_back({std::move(first), std::move(second)});
    } else {
      pairs.push_back({std::move(second), std::move(first)});
    }
  }
  malformed.finish(seen);
  return pairs;
}

namespace {

// One RFC 4180 record: fields, and the line it started on (for errors).
struct CsvRecord {
  std::vector<std::string> fields;
  size_t line = 0;
};

// Splits CSV text into records. Quoted fields may hold separators, newlines and "" for a quote.
std::vector<CsvRecord> split_csv_records(std::string_view text, const std::string& label) {
  std::vector<CsvRecord> records;
  size_t i = 0;
  size_t line = 1;
  while (i < text.size()) {
    CsvRecord record;
    record.line = line;
    std::string field;
    bool record_done = false;
    while (!record_done) {
      field.clear();
      if (i < text.size() && text[i] == '"') {
        size_t quote_line = line;
        ++i;
        while (true) {
          if (i >= text.size()) {
            throw Error(label + ":" + std::to_string(quote_line) +
                        ": quoted field is not closed");
          }
          char c = text[i++];
          if (c == '"') {
            if (i < text.size() && text[i] == '"') {
              field.push_back('"');
              ++i;
            } else {
              break;
            }
          } else {
            if (c == '\n') ++line;
            field.push_back(c);
          }
        }
        // After the closing quote: a separator, end of line, or end of text.
        if (i < text.size() && text[i] == '\r') ++i;
        if (i < text.size() && text[i] != ',' && text[i] != '\n') {
          throw Error(label + ":" + std::to_string(line) +
                      ": unexpected character after a closing quote");
        }
      } else {
        while (i < text.size() && text[i] != ',' && text[i] != '\n') field.push_back(text[i++]);
        if (!field.empty() && field.back() == '\r') field.pop_back();
      }
      record.fields.push_back(field);
      if (i >= text.size()) {
        record_done = true;
      } else if (text[i] == ',') {
        ++i;
      } else {  // '\n'
        ++i;
        ++line;
        record_done = true;
      }
    }
    // A blank line is one empty field: skip it.
    if (record.fields.size() == 1 && record.fields[0].empty()) continue;
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace

std::vector<TextPair> parse_csv(std::string_view text, const std::string& label,
                                const CorpusLanguages& languages) {
  if (starts_with_bom(text)) text.remove_prefix(3);
  std::vector<CsvRecord> records = split_csv_records(text, label);
  if (records.empty()) throw Error(label + ": empty CSV file (no header)");
  const std::string source_column = csv_column_for_language(languages.source);
  const std::string target_column = csv_column_for_language(languages.target);
  const CsvRecord& header = records[0];
  auto find_column = [&](const std::string& name) {
    for (size_t c = 0; c < header.fields.size(); ++c) {
      if (header.fields[c] == name) return c;
    }
    throw Error(label + ":1: the CSV header has no column '" + name + "'");
  };
  size_t source_index = find_column(source_column);
  size_t target_index = find_column(target_column);

  std::vector<TextPair> pairs;
  pairs.reserve(records.size() - 1);
  MalformedPairs malformed(label, languages);
  for (size_t r = 1; r < records.size(); ++r) {
    const CsvRecord& record = records[r];
    if (record.fields.size() != header.fields.size()) {
      malformed.add(record.fields.size() < header.fields.size() ? MalformedPairs::missing_field
                                                                : MalformedPairs::extra_fields,
                    record.line, "expected " + std::to_string(header.fields.size()) + " fields, found " +
                                     std::to_string(record.fields.size()));
      continue;
    }
    bool valid = true;
    for (const std::string& field : record.fields) valid = valid && is_valid_utf8(field);
    if (!valid) {
      malformed.add(MalformedPairs::invalid_utf8, record.line, "invalid UTF-8");
      continue;
    }
    if (!malformed.check_fields(record.fields[source_index], record.fields[target_index], record.line)) continue;
    pairs.push_back({record.fields[source_index], record.fields[target_index]});
  }
  malformed.finish(records.size() - 1);
  return pairs;
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  // A directory opens, and reads as empty.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(path + ": is a directory, not a file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw Error(path + ": read error");
  return buffer.str();
}

std::vector<TextPair> read_parallel_corpus(const std::string& path,
                                           const CorpusLanguages& languages) {
  return parse_parallel_corpus(read_file_bytes(path), path, languages);
}

std::vector<TextPair> parse_parallel_corpus(std::string_view bytes, const std::string& path,
                                            const CorpusLanguages& languages) {
  bool is_csv = path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
  if (!is_csv) {
    std::string_view first_line = bytes.substr(0, first_line.find('\n'));
    is_csv = first_line.find(kEnglishCsvColumn) != std::string_view::npos ||
             first_line.find(kFrenchCsvColumn) != std::string_view::npos;
  }
  return is_csv ? parse_csv(bytes, path, languages) : parse_tsv(bytes, path, languages);
}

}  // namespace xf::trainer
