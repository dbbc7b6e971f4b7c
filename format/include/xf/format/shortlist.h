#pragma once
// Lexical shortlists as Marian makes them: for each source id, the target ids it can translate
// to. Read from Marian's text form (extract_lex's lex.s2t, "target source probability" lines)
// or marian-conv's binary form (lex.*.s2t.bin), or stored in a model file (ModelWriter,
// ModelFile::shortlist). Which rows a batch's output layer covers is the runtime's business
// (runtime/src/shortlist.h); this file knows the bytes and the pruning a file gets when read.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace xf {

struct LexicalShortlist {
  uint32_t first_num = 0;  // the target ids [0, first_num) (the most frequent) are always in
  uint32_t best_num = 0;   // the most candidates a source id kept when the list was made
  // offsets[s] .. offsets[s + 1]: source id s's candidates in `targets`, ascending. At most
  // source_vocab_size + 1 entries; source ids past the end have no candidates.
  std::vector<uint64_t> offsets{0};
  std::vector<uint32_t> targets;

  uint64_t source_ids() const { return offsets.empty() ? 0 : offsets.size() - 1; }
};

// Throws xf::Error naming the first problem: no offsets, more offsets than the source
// vocabulary needs, offsets not starting at 0 or decreasing or not ending at the targets' count,
// a target id outside the target vocabulary, a source id's targets not strictly ascending.
void check_shortlist(const LexicalShortlist& shortlist, uint32_t source_vocab_size,
                     uint32_t target_vocab_size);

// How a text shortlist is pruned as it is read (Marian's `--shortlist lex.s2t FIRST BEST
// THRESHOLD`, defaults 100 100 0): per source piece, its candidates by probability (the higher
// target id first among equals), at most best_num of them, each with a probability above
// `threshold`. A pair given twice keeps its last probability; a line whose source or target is
// NULL is skipped.
struct TextShortlistOptions {
  uint32_t first_num = 100;
  uint32_t best_num = 100;
  float threshold = 0.0f;
};

// Reads Marian's text form. id_of maps a piece to its id on that side (an unknown piece: the
// unknown id, as Marian's vocabularies do). Throws xf::Error("<path>: ...") for a file that does
// not open or a line that is not "target source probability" (`<path>:<line>: ...`).
LexicalShortlist read_text_shortlist(const std::string& path,
                                     const std::function<uint32_t(std::string_view)>& source_id_of,
                                     const std::function<uint32_t(std::string_view)>& target_id_of,
                                     uint32_t source_vocab_size, const TextShortlistOptions& options);

// Marian's binary form (marian-conv --shortlist): six little-endian u64 (magic 0xF11A48D5013417F5,
// checksum, firstNum, bestNum, offset count, target count), the u64 offsets, the u32 targets.
// The checksum is Marian's util::hashMem of the u64 words after the first two.
bool is_binary_shortlist(const std::string& path);  // the file starts with the magic
// Throws xf::Error("<path>: ...") for a short file, a wrong magic, sizes that disagree with the
// file's length, or a checksum mismatch; the lists are then checked by the caller against the
// model (check_shortlist).
LexicalShortlist read_binary_shortlist(const std::string& path);
std::vector<uint8_t> binary_shortlist_bytes(const LexicalShortlist& shortlist);

}  // namespace xf
