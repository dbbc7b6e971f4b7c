#include "output_shortlist.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "xf/error.h"
#include "xf/format/model_file.h"
#include "xf/model.h"
#include "xf/weight_layout.h"

namespace xf::runtime {

OutputShortlist::OutputShortlist(LexicalShortlist lists, uint32_t target_vocab_size, bool shared_vocabulary,
                                 int64_t max_sentences)
    : lists_(std::move(lists)), target_vocab_size_(target_vocab_size), shared_(shared_vocabulary),
      chosen_(target_vocab_size), own_(static_cast<size_t>(std::max<int64_t>(max_sentences, 1)) * target_vocab_size) {
  ids_.reserve(target_vocab_size);
}

const std::vector<int32_t>& OutputShortlist::select(const int32_t* source_ids, const int32_t* source_lengths,
                                                    int64_t sentences, int64_t stride) {
  if (own_.size() < static_cast<size_t>(sentences) * target_vocab_size_)
    own_.resize(static_cast<size_t>(sentences) * target_vocab_size_);
  // Locals throughout: a store through an int32 or byte pointer could otherwise be the member
  // vocabulary size or a vector's pointer, reloaded at every element (2.6% of a student's time).
  const uint32_t vocab = target_vocab_size_;
  uint8_t* chosen = chosen_.data();
  std::fill(chosen, chosen + vocab, 0);
  const uint64_t first = std::min<uint64_t>(lists_.first_num, vocab);
  const uint64_t listed = lists_.source_ids();
  const uint32_t* targets = lists_.targets.data();
  const uint64_t* offsets = lists_.offsets.data();
  for (int64_t s = 0; s < sentences; ++s) {
    uint8_t* own = own_.data() + s * vocab;
    std::fill(own, own + vocab, 0);
    std::fill(own, own + first, 1);
    for (int32_t t = 0; t < source_lengths[s]; ++t) {
      const int32_t id = source_ids[s * stride + t];
      if (shared_) own[id] = 1;
      if (static_cast<uint64_t>(id) >= listed) continue;
      for (uint64_t j = offsets[id]; j < offsets[id + 1]; ++j) own[targets[j]] = 1;
    }
    uint32_t count = 0;
    for (uint32_t i = 0; i < vocab; ++i) count += own[i];
    for (uint64_t i = lists_.first_num; i < vocab && count % 8 != 0; ++i)
      if (!own[i]) {
        own[i] = 1;
        ++count;
      }
    for (uint32_t i = 0; i < vocab; ++i) chosen[i] |= own[i];
  }
  // The chosen ids, 8 flags at a time (a few percent of them are chosen).
  ids_.clear();
  for (uint32_t i = 0; i < vocab; i += 8) {
    uint64_t flags = 0;
    std::memcpy(&flags, chosen + i, std::min<uint32_t>(8, vocab - i));
    for (; flags != 0; flags &= flags - 1) ids_.push_back(static_cast<int32_t>(i + __builtin_ctzll(flags) / 8));
  }
  return ids_;
}

ShortlistColumnLayout::ShortlistColumnLayout(int64_t max_sentences, int64_t target_vocab_size)
    : vocab_(target_vocab_size), keys_(target_vocab_size), ids_(target_vocab_size), column_of_(target_vocab_size),
      touched_(target_vocab_size / kPanelRows + 1), run_offsets_(max_sentences + 1),
      runs_(2 * max_sentences * (target_vocab_size / kPanelRows + 1)) {}

void ShortlistColumnLayout::arrange(const int32_t* ids, int64_t count, const uint8_t* sentence_targets,
                                    int64_t sentences) {
  if (count > vocab_ || sentences + 1 > static_cast<int64_t>(run_offsets_.size()))
    throw Error("internal: a shortlist layout outside its plan");
  for (int64_t j = 0; j < count; ++j) keys_[j] = Key{0, 0, static_cast<int32_t>(j)};
  for (int64_t s = 0; s < sentences; ++s) {
    const uint8_t* own = sentence_targets + s * vocab_;
    const uint64_t bit = uint64_t{1} << (63 - s % 64);
    for (int64_t j = 0; j < count; ++j)
      if (own[ids[j]]) keys_[j].shared_by |= bit, ++keys_[j].readers;
  }
  // Columns of several sentences first, by their readers (the first reader's leading), then each
  // sentence's own; ties in id order. The result does not depend on the order: only the work does.
  std::sort(keys_.begin(), keys_.begin() + count, [](const Key& a, const Key& b) {
    const bool a_shared = a.readers > 1, b_shared = b.readers > 1;
    if (a_shared != b_shared) return a_shared;
    if (a.shared_by != b.shared_by) return a.shared_by > b.shared_by;
    return a.j < b.j;
  });
  for (int64_t c = 0; c < count; ++c) {
    ids_[c] = ids[keys_[c].j];
    column_of_[keys_[c].j] = static_cast<int32_t>(c);
  }
  count_ = count;
  run_offsets_[0] = 0;
}

void ShortlistColumnLayout::add_runs(int64_t s, const int32_t* columns, int64_t size) {
  const int64_t panels = (count_ + kPanelRows - 1) / kPanelRows;
  std::fill(touched_.begin(), touched_.begin() + panels, 0);
  for (int64_t i = 0; i < size; ++i) touched_[columns[i] / kPanelRows] = 1;
  int64_t run_count = run_offsets_[s];
  for (int64_t p = 0; p < panels; ++p) {
    if (!touched_[p]) continue;
    const int32_t begin = static_cast<int32_t>(p * kPanelRows), end = std::min<int32_t>(begin + kPanelRows, count_);
    if (p > 0 && touched_[p - 1]) {
      runs_[2 * run_count - 1] = end;  // the run goes on
    } else {
      runs_[2 * run_count] = begin;
      runs_[2 * run_count + 1] = end;
      ++run_count;
    }
  }
  run_offsets_[s + 1] = static_cast<int32_t>(run_count);
}

namespace {
// Piece -> id over every id of one side, the unknown id for a piece the vocabulary lacks.
std::unordered_map<std::string, uint32_t> piece_ids(std::vector<std::string> pieces) {
  std::unordered_map<std::string, uint32_t> ids;
  for (uint32_t i = 0; i < pieces.size(); ++i) ids.emplace(std::move(pieces[i]), i);
  return ids;
}
}  // namespace

std::unique_ptr<OutputShortlist> load_output_shortlist(const Model& model, const TranslatorOptions& options) {
  const ModelConfig& c = model.config();
  const ModelFile& file = model.file();
  // One vocabulary for both sides: a shared table, or one vocabulary list or tokenizer serving both.
  const bool shared = c.shared_embeddings ||
                      (c.source_vocab_size == c.target_vocab_size && file.target_tokenizer() == file.source_tokenizer() &&
                       file.target_vocabulary().size() == file.source_vocabulary().size() &&
                       (file.source_vocabulary().empty() ||
                        file.target_vocabulary().data() == file.source_vocabulary().data()));
  if (options.shortlist == "none") return nullptr;
  if (options.shortlist.empty()) {
    if (!file.shortlist()) return nullptr;
    return std::make_unique<OutputShortlist>(*file.shortlist(), c.target_vocab_size, shared, options.max_batch);
  }
  const std::string& path = options.shortlist;
  LexicalShortlist lists;
  try {
    if (is_binary_shortlist(path)) {
      lists = read_binary_shortlist(path);
    } else {
      if (!model.has_tokenizer())
        throw Error(path + ": a text shortlist needs the model's vocabularies (the model has no tokenizer)");
      auto all_ids = [](uint32_t size) {
        std::vector<int32_t> ids(size);
        for (uint32_t i = 0; i < size; ++i) ids[i] = static_cast<int32_t>(i);
        return ids;
      };
      const std::vector<int32_t> source_all = all_ids(c.source_vocab_size), target_all = all_ids(c.target_vocab_size);
      const auto source = piece_ids(model.source_pieces(source_all.data(), source_all.size()));
      const auto target = piece_ids(model.target_pieces(target_all.data(), target_all.size()));
      const uint32_t unk = static_cast<uint32_t>(c.unk_id);
      auto lookup = [unk](const std::unordered_map<std::string, uint32_t>& ids) {
        return [&ids, unk](std::string_view piece) {
          const auto it = ids.find(std::string(piece));
          return it == ids.end() ? unk : it->second;
        };
      };
      TextShortlistOptions text;
      text.first_num = static_cast<uint32_t>(options.shortlist_first);
      text.best_num = static_cast<uint32_t>(options.shortlist_best);
      text.threshold = options.shortlist_threshold;
      lists = read_text_shortlist(path, lookup(source), lookup(target), c.source_vocab_size, text);
    }
    try {
      check_shortlist(lists, c.source_vocab_size, c.target_vocab_size);
    } catch (const Error& e) {
      throw Error(path + ": " + e.what() + " (does it belong to this model?)");
    }
  } catch (const Error& e) {
    throw Error(std::string("shortlist ") + e.what());
  }
  return std::make_unique<OutputShortlist>(std::move(lists), c.target_vocab_size, shared, options.max_batch);
}

}  // namespace xf::runtime
