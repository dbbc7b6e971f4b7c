// Tokenized corpus: tokenization, the binary cache file, and the length filter.
#include <sys/stat.h>

#include <cstring>
#include <fstream>

#include "xf/error.h"
#include "xf/format/model_writer.h"
#include "xf/trainer/data.h"

namespace xf::trainer {

void TokenizedCorpus::add(const std::vector<int32_t>& source_ids,
                          const std::vector<int32_t>& target_ids) {
  if (offsets.empty()) offsets.push_back(0);
  ids.insert(ids.end(), source_ids.begin(), source_ids.end());
  offsets.push_back(ids.size());
  ids.insert(ids.end(), target_ids.begin(), target_ids.end());
  offsets.push_back(ids.size());
}

TokenizedCorpus tokenize_corpus(const std::vector<TextPair>& pairs, const Tokenizer& tokenizer) {
  TokenizedCorpus corpus;
  corpus.offsets.reserve(2 * pairs.size() + 1);
  corpus.offsets.push_back(0);
  for (const TextPair& pair : pairs) corpus.add(tokenizer.encode(pair.source), tokenizer.encode(pair.target));
  return corpus;
}

uint64_t fnv1a_64(std::string_view bytes, uint64_t seed) {
  uint64_t hash = seed;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

uint64_t corpus_cache_key(std::string_view file_bytes, const CorpusLanguages& languages,
                          const Tokenizer& tokenizer) {
  uint64_t key = fnv1a_64(file_bytes);
  key = fnv1a_64(languages.source + "\t" + languages.target + "\t" + languages.tsv_first + "\t" +
                     languages.tsv_second,
                 key);
  return fnv1a_64(tokenizer.model_proto(), key);
}

namespace {

constexpr char kCacheMagic[4] = {'X', 'F', 'T', 'C'};
constexpr uint32_t kCacheVersion = 1;

// Header of the cache file (host byte order: a cache is local to the machine that made it).
struct CacheHeader {
  char magic[4];
  uint32_t version;
  uint64_t key;
  uint64_t offset_count;
  uint64_t id_count;
};

}  // namespace

void save_tokenized_corpus(const std::string& path, uint64_t key, const TokenizedCorpus& corpus) {
  CacheHeader header{};
  std::memcpy(header.magic, kCacheMagic, 4);
  header.version = kCacheVersion;
  header.key = key;
  header.offset_count = corpus.offsets.size();
  header.id_count = corpus.ids.size();
  std::string bytes(reinterpret_cast<const char*>(&header), sizeof(header));
  bytes.append(reinterpret_cast<const char*>(corpus.offsets.data()),
               corpus.offsets.size() * sizeof(uint64_t));
  bytes.append(reinterpret_cast<const char*>(corpus.ids.data()), corpus.ids.size() * sizeof(int32_t));
  write_file_atomically(path, bytes.data(), bytes.size());
}

bool load_tokenized_corpus(const std::string& path, uint64_t key, TokenizedCorpus* corpus) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  CacheHeader header{};
  if (!in.read(reinterpret_cast<char*>(&header), sizeof(header))) return false;
  if (std::memcmp(header.magic, kCacheMagic, 4) != 0 || header.version != kCacheVersion ||
      header.key != key) {
    return false;
  }
  struct stat info{};
  if (stat(path.c_str(), &info) != 0) return false;
  uint64_t expected = sizeof(header) + header.offset_count * sizeof(uint64_t) +
                      header.id_count * sizeof(int32_t);
  if (header.offset_count == 0 || header.offset_count % 2 != 1 ||
      static_cast<uint64_t>(info.st_size) != expected) {
    throw Error(path + ": tokenized corpus cache is truncated or corrupt; delete it");
  }
  TokenizedCorpus loaded;
  loaded.offsets.resize(header.offset_count);
  loaded.ids.resize(header.id_count);
  in.read(reinterpret_cast<char*>(loaded.offsets.data()), header.offset_count * sizeof(uint64_t));
  in.read(reinterpret_cast<char*>(loaded.ids.data()), header.id_count * sizeof(int32_t));
  if (!in) throw Error(path + ": read error in tokenized corpus cache");
  for (size_t i = 0; i + 1 < loaded.offsets.size(); ++i) {
    if (loaded.offsets[i] > loaded.offsets[i + 1]) {
      throw Error(path + ": tokenized corpus cache has decreasing offsets; delete it");
    }
  }
  if (loaded.offsets.front() != 0 || loaded.offsets.back() != loaded.ids.size()) {
    throw Error(path + ": tokenized corpus cache offsets do not cover the ids; delete it");
  }
  *corpus = std::move(loaded);
  return true;
}

TokenizedCorpus load_corpus(const std::string& path, const CorpusLanguages& languages,
                            const Tokenizer& tokenizer, const std::string& cache_dir) {
  std::string bytes = read_file_bytes(path);
  std::string cache_path;
  uint64_t key = 0;
  if (!cache_dir.empty()) {
    key = corpus_cache_key(bytes, languages, tokenizer);
    char name[64];
    std::snprintf(name, sizeof(name), "/corpus-%016llx.bin", static_cast<unsigned long long>(key));
    cache_path = cache_dir + name;
    TokenizedCorpus cached;
    if (load_tokenized_corpus(cache_path, key, &cached)) return cached;
  }
  std::vector<TextPair> pairs = parse_parallel_corpus(bytes, path, languages);
  TokenizedCorpus corpus = tokenize_corpus(pairs, tokenizer);
  if (!cache_path.empty()) save_tokenized_corpus(cache_path, key, corpus);
  return corpus;
}

TokenizedCorpus filter_by_length(const TokenizedCorpus& corpus, size_t max_length,
                                 LengthFilterStats* stats) {
  LengthFilterStats counts;
  TokenizedCorpus kept;
  kept.offsets.push_back(0);
  for (size_t i = 0; i < corpus.size(); ++i) {
    size_t s = corpus.source_length(i), t = corpus.target_length(i);
    if (s == 0 || t == 0) {
      ++counts.dropped_empty;
      continue;
    }
    if (s > max_length || t > max_length) {
      ++counts.dropped_long;
      continue;
    }
    ++counts.kept;
    kept.ids.insert(kept.ids.end(), corpus.source(i), corpus.source(i) + s);
    kept.offsets.push_back(kept.ids.size());
    kept.ids.insert(kept.ids.end(), corpus.target(i), corpus.target(i) + t);
    kept.offsets.push_back(kept.ids.size());
  }
  if (stats) *stats = counts;
  return kept;
}

}  // namespace xf::trainer
