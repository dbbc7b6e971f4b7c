#pragma once
// The trainer's data pipeline: parallel text (TSV or the Hugging Face CSV export) -> UTF-8
// checked sentence pairs -> SentencePiece ids (cached in a binary file) -> length-filtered
// corpus -> batches of at most --batch-tokens padded tokens, grouped by length and shuffled
// deterministically by seed and epoch.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace xf::trainer {

// ---- Text ------------------------------------------------------------------------------------

struct TextPair {
  std::string source;
  std::string target;
};

// How to read a corpus file: which languages it holds, which direction to train, and what to do
// with a malformed pair (a line without a tab or with extra fields, invalid UTF-8, an empty
// side): skip it with a warning on stderr (the first kWarnedBadLines named, then a count by
// cause), or refuse the file when `strict` (--strict-data) or when more than `max_bad_share` of
// its pairs are malformed (it is then probably not in the expected format).
struct CorpusLanguages {
  std::string source = "en";  // --src-lang
  std::string target = "fr";  // --tgt-lang
  // A TSV file has no header: its two columns hold these languages, in order. The EN-FR data
  // set is English<TAB>French, so --src-lang fr --tgt-lang en swaps the columns.
  std::string tsv_first = "en";
  std::string tsv_second = "fr";
  bool strict = false;          // --strict-data: the first malformed pair is an error
  double max_bad_share = 0.01;  // --max-bad-lines PERCENT / 100
};

inline constexpr size_t kWarnedBadLines = 5;

// The CSV header column that holds `language` ("en" -> "English words/sentences",
// "fr" -> "French words/sentences"); throws xf::Error for another language.
std::string csv_column_for_language(const std::string& language);

// Parsers over a file's bytes; `label` names the file in errors ("<label>:<line>: <problem>").
// A pair is malformed (see CorpusLanguages) unless both fields are valid UTF-8 (checked with
// xf::is_valid_utf8, xf/utf8.h) and not empty.
// TSV: one pair per line, exactly two tab-separated fields, '\r\n' accepted; empty lines skipped.
std::vector<TextPair> parse_tsv(std::string_view text, const std::string& label,
                                const CorpusLanguages& languages);
// CSV (RFC 4180: quoted fields may hold commas, newlines and doubled quotes) with a header row
// naming the columns; the columns for the two languages are looked up by name.
std::vector<TextPair> parse_csv(std::string_view text, const std::string& label,
                                const CorpusLanguages& languages);
// Reads a file: CSV when its name ends in ".csv" or its first line names the CSV columns,
// TSV otherwise.
std::vector<TextPair> read_parallel_corpus(const std::string& path,
                                           const CorpusLanguages& languages);
// The same over bytes already read from `path`.
std::vector<TextPair> parse_parallel_corpus(std::string_view bytes, const std::string& path,
                                            const CorpusLanguages& languages);

// ---- Tokenizer -------------------------------------------------------------------------------

// Special ids shared with ModelConfig's defaults.
inline constexpr int32_t kPadId = 0;
inline constexpr int32_t kUnkId = 1;
inline constexpr int32_t kBosId = 2;
inline constexpr int32_t kEosId = 3;

struct SentencePieceTrainOptions {
  int vocab_size = 8000;
  std::string model_type = "unigram";  // unigram, bpe, char, word
  double character_coverage = 1.0;     // keep every accented letter
  size_t max_training_sentences = 2000000;
  int threads = 2;
};

// A SentencePiece model held by its serialized proto.
class Tokenizer {
 public:
  // Throws xf::Error("<label>: not a SentencePiece model") when the bytes do not parse, or when
  // the model's special ids differ from kPadId..kEosId.
  static Tokenizer from_model_proto(std::string model_proto, const std::string& label);
  static Tokenizer from_file(const std::string& path);
  // Trains one shared vocabulary over both sides of `pairs` through the C++ trainer API.
  static Tokenizer train(const std::vector<TextPair>& pairs,
                         const SentencePieceTrainOptions& options);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text) const;  // no BOS/EOS
  // Subword regularization (Kudo 2018): one of the `nbest` most likely segmentations of `text`,
  // segmentation s with chance proportional to P(s)^alpha, picked by `draw` in [0, 1) so that
  // the caller's generator decides (SentencePiece's own sampling draws from a process-wide one).
  // alpha 0 picks uniformly among the n best; a large alpha gives encode()'s. Unigram models
  // only: throws xf::Error for others.
  std::vector<int32_t> sample_encode(std::string_view text, int nbest, double alpha,
                                     double draw) const;
  std::string decode(const std::vector<int32_t>& ids) const;  // pad/BOS/EOS ids are skipped
  int vocab_size() const;
  std::string piece(int32_t id) const;  // "▁chat"; throws for an id outside the vocabulary
  const std::string& model_proto() const { return model_proto_; }

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string model_proto_;
};

// The SentencePiece model of only the pieces `kept` (ascending ids, the special ids 0..3 among
// them): piece kept[i] becomes id i, with its score and type. What a model decodes through it
// reads as through the full one; encoding can only use the kept pieces. The self-test samples a
// trained model may carry are dropped (they were segmented with every piece). Edits the proto's
// wire format (field 1 holds the pieces), so no protobuf library is needed.
std::string sentencepiece_model_subset(std::string_view model_proto,
                                       const std::vector<int32_t>& kept);

// ---- Tokenized corpus ------------------------------------------------------------------------

// Sentence pairs as ids, without BOS/EOS, in one flat buffer.
struct TokenizedCorpus {
  std::vector<int32_t> ids;        // all sentences: source 0, target 0, source 1, ...
  std::vector<uint64_t> offsets;   // [2 * pairs + 1]: source i is ids[offsets[2i], offsets[2i+1])

  size_t size() const { return offsets.empty() ? 0 : (offsets.size() - 1) / 2; }
  size_t source_length(size_t pair) const { return offsets[2 * pair + 1] - offsets[2 * pair]; }
  size_t target_length(size_t pair) const { return offsets[2 * pair + 2] - offsets[2 * pair + 1]; }
  const int32_t* source(size_t pair) const { return ids.data() + offsets[2 * pair]; }
  const int32_t* target(size_t pair) const { return ids.data() + offsets[2 * pair + 1]; }
  void add(const std::vector<int32_t>& source_ids, const std::vector<int32_t>& target_ids);
};

TokenizedCorpus tokenize_corpus(const std::vector<TextPair>& pairs, const Tokenizer& tokenizer);

// 64-bit FNV-1a, for cache keys.
uint64_t fnv1a_64(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ull);

// The cache key: a hash of the corpus file's bytes, the languages and the tokenizer model.
uint64_t corpus_cache_key(std::string_view file_bytes, const CorpusLanguages& languages,
                          const Tokenizer& tokenizer);
// Binary cache file: magic "XFTC", version, key, then offsets and ids. load returns false when
// the file is absent or was made for another key (a stale cache is ignored, never trusted);
// throws xf::Error when a file with the right key is truncated.
void save_tokenized_corpus(const std::string& path, uint64_t key, const TokenizedCorpus& corpus);
bool load_tokenized_corpus(const std::string& path, uint64_t key, TokenizedCorpus* corpus);

// Reads `path`, tokenizes it (or loads the cache file in `cache_dir`, writing it when missing;
// an empty cache_dir disables the cache) and returns the corpus.
TokenizedCorpus load_corpus(const std::string& path, const CorpusLanguages& languages,
                            const Tokenizer& tokenizer, const std::string& cache_dir);

struct LengthFilterStats {
  size_t kept = 0;
  size_t dropped_empty = 0;
  size_t dropped_long = 0;
};
// Keeps pairs whose both sides have 1..max_length tokens.
TokenizedCorpus filter_by_length(const TokenizedCorpus& corpus, size_t max_length,
                                 LengthFilterStats* stats = nullptr);

// ---- Batching --------------------------------------------------------------------------------

// Tokens a pair occupies in a batch: the source gets EOS appended, the target input gets BOS
// prepended (and the target output EOS appended), so both grow by one.
inline size_t padded_source_length(const TokenizedCorpus& c, size_t pair) {
  return c.source_length(pair) + 1;
}
inline size_t padded_target_length(const TokenizedCorpus& c, size_t pair) {
  return c.target_length(pair) + 1;
}

// One batch as indices into the corpus.
using BatchIndices = std::vector<uint32_t>;

// The batches of one epoch: pairs sorted by length (ties broken by a seeded random key), cut
// greedily so that rows * max(longest source, longest target) <= batch_tokens (lengths as
// padded_*_length), then the batch order shuffled by (seed, epoch). Every pair appears exactly
// once. shuffle=false keeps the sorted order with no randomness (validation).
// Throws xf::Error when a single pair needs more than batch_tokens.
std::vector<BatchIndices> plan_batches(const TokenizedCorpus& corpus, size_t batch_tokens,
                                       uint64_t seed, uint64_t epoch, bool shuffle = true);

// ---- Joined examples (--join-probability) ---------------------------------------------------

// The corpus holds few long sentences, so a model trained on it alone fails on long input.
// Examples made of several pairs (their sources concatenated, their targets likewise) teach it
// longer ones. With SentencePiece, whose pieces never span a space, the ids of "A" then "B" are
// the ids of the text "A B".
struct JoinOptions {
  double probability = 0;  // chance that an example is a join (0: the corpus as it is)
  size_t max_pairs = 4;    // a join takes 2..max_pairs pairs, each count equally likely
  size_t max_length = 0;   // tokens a side of a join may hold (0: no limit)
};

// One epoch's examples as groups of pair indices. The pairs are taken in an order shuffled by
// (seed, epoch); each example starts at the next pair and is, with `probability`, a join of k
// pairs (k uniform in 2..max_pairs), ending early when the next pair would take a side past
// max_length; otherwise that pair alone. Every pair is in exactly one example, so an epoch still
// sees each pair once. Depends only on (corpus lengths, options, seed, epoch).
std::vector<BatchIndices> plan_joins(const TokenizedCorpus& corpus, const JoinOptions& options,
                                     uint64_t seed, uint64_t epoch);
// The corpus of those examples: each group's sources concatenated, and its targets.
TokenizedCorpus join_pairs(const TokenizedCorpus& corpus, const std::vector<BatchIndices>& groups);

// A seed for one epoch's randomness of one `purpose` (1: tie-breaks, 2: batch order, 3: joins,
// 4: text modifiers), so epoch e's examples never depend on earlier epochs.
uint64_t epoch_seed(uint64_t seed, uint64_t epoch, uint64_t purpose);

class CorpusModifier;  // text_modifiers.h

// Where the data iterator stands; saved in checkpoints so a resume continues exactly.
struct DataPosition {
  uint64_t epoch = 0;        // 0-based
  uint64_t batch_index = 0;  // next batch within the epoch
  uint64_t seed = 0;
};

// Walks the epochs' batch plans in order. With text modifiers or joins, each epoch has its own
// examples (the modifier applied to the corpus, then join_pairs of plan_joins over that),
// rebuilt from (seed, epoch) alone, so a resume at any position continues exactly.
class BatchIterator {
 public:
  BatchIterator(const TokenizedCorpus& corpus, size_t batch_tokens, DataPosition start,
                const JoinOptions& joins = {});
  BatchIterator(const TokenizedCorpus& corpus, size_t batch_tokens, DataPosition start,
                const JoinOptions& joins, std::unique_ptr<const CorpusModifier> modifier);
  ~BatchIterator();
  // The next batch; moves to the next epoch (a new shuffle) when one ends. Its indices are
  // into corpus(), which changes with the epoch when modifiers or joins are on.
  const BatchIndices& next();
  const TokenizedCorpus& corpus() const { return *epoch_corpus_; }
  DataPosition position() const { return position_; }
  size_t batches_per_epoch() const { return plan_.size(); }

 private:
  void plan_epoch();
  const TokenizedCorpus& corpus_;
  size_t batch_tokens_;
  JoinOptions joins_;
  std::unique_ptr<const CorpusModifier> modifier_;
  TokenizedCorpus modified_;  // this epoch's corpus when a modifier is active
  TokenizedCorpus joined_;    // this epoch's examples when joins are on
  const TokenizedCorpus* epoch_corpus_ = nullptr;  // corpus_, modified_ or joined_
  DataPosition position_;
  std::vector<BatchIndices> plan_;
  uint64_t plan_epoch_ = ~0ull;
};

// A small deterministic generator (SplitMix64): the same sequence on every platform, unlike
// std::shuffle over std::mt19937.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t bound) { return next() % bound; }  // bound > 0; bias negligible here
  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

// Reads a whole file; throws xf::Error("<path>: cannot read ...").
std::string read_file_bytes(const std::string& path);

}  // namespace xf::trainer
