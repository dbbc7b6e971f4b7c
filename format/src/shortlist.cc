#include "xf/format/shortlist.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <utility>

#include "xf/error.h"

namespace xf {

namespace {
constexpr uint64_t kBinaryMagic = 0xF11A48D5013417F5ull;
constexpr size_t kBinaryHeaderWords = 6;  // magic, checksum, firstNum, bestNum, offsets, targets

// Marian's util::hashMem<uint64_t, uint64_t>: boost's hash_combine over std::hash (the identity
// for integers) of each word.
uint64_t marian_hash(const uint64_t* words, size_t count) {
  uint64_t seed = 0;
  for (size_t i = 0; i < count; ++i) seed ^= words[i] + 0x9e3779b9ull + (seed << 6) + (seed >> 2);
  return seed;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw Error(path + ": read failed");
  return std::move(bytes).str();
}
}  // namespace

void check_shortlist(const LexicalShortlist& s, uint32_t source_vocab_size, uint32_t target_vocab_size) {
  if (s.offsets.empty()) throw Error("shortlist has no offsets");
  if (s.offsets.size() > uint64_t{source_vocab_size} + 1)
    throw Error("shortlist has " + std::to_string(s.offsets.size()) + " offsets, the source vocabulary needs at most " +
                std::to_string(uint64_t{source_vocab_size} + 1));
  if (s.offsets.front() != 0) throw Error("shortlist offsets do not start at 0");
  if (s.offsets.back() != s.targets.size())
    throw Error("shortlist offsets end at " + std::to_string(s.offsets.back()) + ", it has " +
                std::to_string(s.targets.size()) + " targets");
  for (size_t i = 1; i < s.offsets.size(); ++i) {
    if (s.offsets[i] < s.offsets[i - 1])
      throw Error("shortlist offset " + std::to_string(i) + " is below the one before it");
    for (uint64_t j = s.offsets[i - 1]; j < s.offsets[i]; ++j) {
      if (s.targets[j] >= target_vocab_size)
        throw Error("shortlist target id " + std::to_string(s.targets[j]) + " of source id " + std::to_string(i - 1) +
                    " is outside the target vocabulary (" + std::to_string(target_vocab_size) + ")");
      if (j > s.offsets[i - 1] && s.targets[j] <= s.targets[j - 1])
        throw Error("shortlist targets of source id " + std::to_string(i - 1) + " are not strictly ascending");
    }
  }
}

LexicalShortlist read_text_shortlist(const std::string& path,
                                     const std::function<uint32_t(std::string_view)>& source_id_of,
                                     const std::function<uint32_t(std::string_view)>& target_id_of,
                                     uint32_t source_vocab_size, const TextShortlistOptions& options) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
  // Per source id, target id -> probability (the last one given, as Marian's loader keeps).
  std::vector<std::map<uint32_t, float>> candidates(source_vocab_size);
  std::string line;
  uint64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    std::istringstream fields(line);
    std::string target, source, probability, extra;
    if (!(fields >> target)) continue;  // an empty line
    float p = 0.0f;
    bool ok = static_cast<bool>(fields >> source >> probability) && !(fields >> extra);
    if (ok) {
      const char* end = probability.data() + probability.size();
      const auto [ptr, error] = std::from_chars(probability.data(), end, p);
      ok = error == std::errc() && ptr == end;
    }
    if (!ok)
      throw Error(path + ":" + std::to_string(line_number) +
                  ": expected 'target source probability', got '" + line + "'");
    if (source == "NULL" || target == "NULL") continue;
    const uint32_t s = source_id_of(source), t = target_id_of(target);
    if (s >= source_vocab_size) throw Error(path + ": internal: source id outside the vocabulary");
    candidates[s][t] = p;
  }
  if (in.bad()) throw Error(path + ": read failed");

  LexicalShortlist shortlist;
  shortlist.first_num = options.first_num;
  shortlist.best_num = options.best_num;
  shortlist.offsets.assign(1, 0);
  std::vector<std::pair<float, uint32_t>> by_probability;
  std::vector<uint32_t> kept;
  for (const auto& probabilities : candidates) {
    by_probability.clear();
    for (const auto& [t, p] : probabilities) by_probability.emplace_back(p, t);
    std::sort(by_probability.begin(), by_probability.end(), std::greater<>());
    kept.clear();
    for (const auto& [p, t] : by_probability) {
      if (kept.size() >= options.best_num || !(p > options.threshold)) break;
      kept.push_back(t);
    }
    std::sort(kept.begin(), kept.end());
    shortlist.targets.insert(shortlist.targets.end(), kept.begin(), kept.end());
    shortlist.offsets.push_back(shortlist.targets.size());
  }
  return shortlist;
}

bool is_binary_shortlist(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), sizeof magic) && magic == kBinaryMagic;
}

LexicalShortlist read_binary_shortlist(const std::string& path) {
  const std::string bytes = read_whole_file(path);
  constexpr size_t kHeaderBytes = kBinaryHeaderWords * sizeof(uint64_t);
  if (bytes.size() < kHeaderBytes)
    throw Error(path + ": truncated: " + std::to_string(bytes.size()) + " bytes is too short for a shortlist header");
  uint64_t header[kBinaryHeaderWords];
  std::memcpy(header, bytes.data(), kHeaderBytes);
  if (header[0] != kBinaryMagic) throw Error(path + ": not a binary shortlist (wrong magic)");
  const uint64_t offsets = header[4], targets = header[5];
  const uint64_t room = bytes.size() - kHeaderBytes;
  if (offsets > room / sizeof(uint64_t) || targets > (room - offsets * sizeof(uint64_t)) / sizeof(uint32_t) ||
      kHeaderBytes + offsets * sizeof(uint64_t) + targets * sizeof(uint32_t) != bytes.size())
    throw Error(path + ": the header's " + std::to_string(offsets) + " offsets and " + std::to_string(targets) +
                " targets disagree with the file's " + std::to_string(bytes.size()) + " bytes");
  std::vector<uint64_t> words((bytes.size() - 2 * sizeof(uint64_t)) / sizeof(uint64_t));
  std::memcpy(words.data(), bytes.data() + 2 * sizeof(uint64_t), words.size() * sizeof(uint64_t));
  if (marian_hash(words.data(), words.size()) != header[1])
    throw Error(path + ": shortlist checksum mismatch (corrupt file)");
  if (header[2] > UINT32_MAX || header[3] > UINT32_MAX)
    throw Error(path + ": firstNum " + std::to_string(header[2]) + " or bestNum " + std::to_string(header[3]) +
                " is out of range");
  LexicalShortlist shortlist;
  shortlist.first_num = static_cast<uint32_t>(header[2]);
  shortlist.best_num = static_cast<uint32_t>(header[3]);
  shortlist.offsets.resize(offsets);
  shortlist.targets.resize(targets);
  std::memcpy(shortlist.offsets.data(), bytes.data() + kHeaderBytes, offsets * sizeof(uint64_t));
  std::memcpy(shortlist.targets.data(), bytes.data() + kHeaderBytes + offsets * sizeof(uint64_t),
              targets * sizeof(uint32_t));
  return shortlist;
}

std::vector<uint8_t> binary_shortlist_bytes(const LexicalShortlist& s) {
  const uint64_t header[kBinaryHeaderWords] = {kBinaryMagic, 0, s.first_num, s.best_num, s.offsets.size(),
                                               s.targets.size()};
  std::vector<uint8_t> bytes(sizeof header + s.offsets.size() * sizeof(uint64_t) + s.targets.size() * sizeof(uint32_t));
  std::memcpy(bytes.data(), header, sizeof header);
  std::memcpy(bytes.data() + sizeof header, s.offsets.data(), s.offsets.size() * sizeof(uint64_t));
  std::memcpy(bytes.data() + sizeof header + s.offsets.size() * sizeof(uint64_t), s.targets.data(),
              s.targets.size() * sizeof(uint32_t));
  std::vector<uint64_t> words((bytes.size() - 2 * sizeof(uint64_t)) / sizeof(uint64_t));
  std::memcpy(words.data(), bytes.data() + 2 * sizeof(uint64_t), words.size() * sizeof(uint64_t));
  const uint64_t checksum = marian_hash(words.data(), words.size());
  std::memcpy(bytes.data() + sizeof(uint64_t), &checksum, sizeof checksum);
  return bytes;
}

}  // namespace xf
