#pragma once
// The trainer tests' toy task: reverse a letter sequence ("abc<TAB>cba"), with the options of a
// tiny model that trains on it in milliseconds.
#include <cstdint>
#include <fstream>
#include <map>
#include <random>
#include <string>

namespace xf::trainer {

// Writes `pairs` random pairs to <dir>/train.tsv and returns its path.
inline std::string write_reverse_corpus(const std::string& dir, int pairs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> length(3, 6), letter(0, 5);
  std::string path = dir + "/train.tsv";
  std::ofstream out(path);
  for (int i = 0; i < pairs; ++i) {
    std::string s;
    for (int k = length(rng); k > 0; --k) s.push_back(static_cast<char>('a' + letter(rng)));
    out << s << "\t" << std::string(s.rbegin(), s.rend()) << "\n";
  }
  return path;
}

// xf-train's options (name -> value) for a 1+1 layer, d_model 16 model on that corpus.
// `overrides` replace or add options.
inline std::map<std::string, std::string> tiny_run(const std::string& train, const std::string& out,
                                                   const std::map<std::string, std::string>& overrides = {}) {
  std::map<std::string, std::string> values = {
          {"train", train},        {"out", out},           {"spm-type", "char"},
          {"vocab-size", "20"},    {"layers", "1"},        {"d-model", "16"},
          {"heads", "2"},          {"d-ff", "32"},         {"dropout", "0.1"},
          {"batch-tokens", "60"},  {"warmup", "10"},       {"threads", "1"},
          {"log-every", "1000"},   {"valid-every", "0"},   {"save-every", "0"},
          {"max-length", "20"},    {"max-positions", "32"}, {"seed", "5"}};
  for (const auto& [name, value] : overrides) values[name] = value;
  return values;
}

}  // namespace xf::trainer
