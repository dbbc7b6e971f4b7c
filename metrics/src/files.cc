// Reading hypothesis and reference files for xf-eval.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "xf/error.h"
#include "xf/metrics.h"

namespace xf::metrics {

std::vector<std::string> read_text_lines(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error("cannot open " + path + ": " + std::strerror(errno));
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) throw Error("cannot read " + path);
  const std::string text = contents.str();

  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    check_utf8(line, path + ":" + std::to_string(lines.size() + 1));
    lines.push_back(std::move(line));
    begin = end + 1;
  }
  return lines;
}

GroupedReferences group_references_by_source(const std::string& tsv_path, int source_column, int target_column) {
  if (source_column < 0 || target_column < 0 || source_column == target_column)
    throw Error("TSV columns must be distinct and non-negative (source " + std::to_string(source_column) +
                ", target " + std::to_string(target_column) + ")");
  GroupedReferences grouped;
  std::unordered_map<std::string, size_t> group_of_source;
  const std::vector<std::string> lines = read_text_lines(tsv_path);
  const size_t needed_columns = static_cast<size_t>(std::max(source_column, target_column)) + 1;
  for (size_t line_number = 1; line_number <= lines.size(); ++line_number) {
    const std::string& line = lines[line_number - 1];
    std::vector<std::string> columns;
    for (size_t begin = 0;;) {
      const size_t tab = line.find('\t', begin);
      columns.push_back(line.substr(begin, tab == std::string::npos ? std::string::npos : tab - begin));
      if (tab == std::string::npos) break;
      begin = tab + 1;
    }
    if (columns.size() < needed_columns)
      throw Error(tsv_path + ":" + std::to_string(line_number) + ": expected at least " +
                  std::to_string(needed_columns) + " tab-separated columns, found " + std::to_string(columns.size()));
    const std::string& source = columns[source_column];
    const auto [entry, is_new] = group_of_source.emplace(source, grouped.sources.size());
    if (is_new) {
      grouped.sources.push_back(source);
      grouped.references.emplace_back();
    }
    grouped.references[entry->second].push_back(columns[target_column]);
  }
  return grouped;
}

std::vector<std::vector<std::string>> references_per_line(
    const std::vector<std::vector<std::string>>& reference_files, const std::vector<std::string>& paths) {
  if (reference_files.size() != paths.size()) throw Error("references_per_line: one path per reference file");
  std::vector<std::vector<std::string>> per_line;
  if (reference_files.empty()) return per_line;
  per_line.resize(reference_files[0].size());
  for (size_t file = 0; file < reference_files.size(); ++file) {
    if (reference_files[file].size() != per_line.size())
      throw Error("reference file " + paths[file] + " has " + std::to_string(reference_files[file].size()) +
                  " lines but " + paths[0] + " has " + std::to_string(per_line.size()));
    for (size_t line = 0; line < per_line.size(); ++line) per_line[line].push_back(reference_files[file][line]);
  }
  return per_line;
}

}  // namespace xf::metrics
