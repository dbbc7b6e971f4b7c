#include "search.h"

#include <cstring>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend.h"
#include "memory_plan.h"
#include "output_shortlist.h"
#include "xf/error.h"
#include "xf/kernels/softmax.h"
#include "xf/model.h"

namespace xf::runtime {

void Backend::keep_sentences(const int32_t*, int64_t) {
  throw Error("internal: this backend cannot drop sentences from a batch");
}

void Backend::restrict_output(const int32_t*, int64_t count, const uint8_t*) {
  if (count != 0) throw Error("internal: this backend cannot restrict its output layer to a shortlist");
}

namespace {

constexpr float kBanned = -std::numeric_limits<float>::infinity();

// SplitMix64: a tiny generator whose sequence is the same on every platform.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A sentence's own stream: the same for a seed and index whatever the batching.
uint64_t sentence_stream(uint64_t seed, int64_t index) {
  uint64_t state = seed;
  return next_random(state) ^ (static_cast<uint64_t>(index) * 0xd1b54a32d192ed03ull);
}

// Each vector sized to `count` elements (plan time: decoding never resizes).
template <typename... Vectors>
void resize_each(size_t count, Vectors&... vectors) {
  (vectors.resize(count), ...);
}

}  // namespace

Search::Search(const MemoryPlan& plan, const ModelConfig& config) : plan_(plan), config_(config) {
  const int64_t max_beam = plan.max_beam, rows = plan.max_rows, len = plan.max_target_len;
  // Per sentence: a beam of max_beam ends with exactly max_beam finished hypotheses.
  max_finished_ = max_beam;
  source_ids_.resize(plan.max_sentences * plan.max_source_len);
  resize_each(plan.max_sentences, source_lengths_, max_length_, sentence_indices_, prefixes_, rng_,
              done_, live_, finished_count_, slot_sentence_, kept_slots_);  // one a sentence
  resize_each(rows, tokens_, log_probs_, parents_);                     // one a decoder row
  resize_each(rows * len, history_[0], history_[1]);
  resize_each(rows * (max_beam + 1), top_values_, top_ids_);
  candidates_.resize(max_beam * max_beam);
  finished_ids_.resize(plan.max_sentences * max_finished_ * len);
  finished_.resize(plan.max_sentences * max_finished_);
  resize_each(config.target_vocab_size, seen_, sample_ids_, sample_weights_);  // one a token
}

void Search::translate(Backend& backend, int64_t sentences, int64_t source_len, int64_t beam,
                       const TranslateOptions& given_options, TokenTranslation* const* results) {
  // The Translator gives every option a value; a test driving the search directly may not.
  const TranslateOptions options = given_options.with_defaults(DecodingDefaults{});
  backend.encode(source_ids_.data(), source_lengths_.data(), sentences, source_len);
  if (shortlist != nullptr) {
    const std::vector<int32_t>& ids = shortlist->select(source_ids_.data(), source_lengths_.data(), sentences, source_len);
    backend.restrict_output(ids.data(), static_cast<int64_t>(ids.size()), shortlist->sentence_targets(0));
  }
  for (int64_t s = 0; s < sentences; ++s) {
    max_length_[s] = max_output_length(plan_, options, source_lengths_[s]);
    rng_[s] = sentence_stream(options.seed, sentence_indices_[s]);
    done_[s] = 0;
    live_[s] = 1;
    finished_count_[s] = 0;
    slot_sentence_[s] = static_cast<int32_t>(s);
  }
  if (beam == 1 && use_greedy_for_beam_one)
    greedy(backend, sentences, options);
  else
    beam_search(backend, sentences, beam, options);
  write_results(sentences, options.n_best, results);
}

int32_t Search::forced_token(int64_t sentence, int64_t step) const {
  const std::vector<int32_t>* prefix = prefixes_[sentence];
  return prefix != nullptr && step < static_cast<int64_t>(prefix->size()) ? (*prefix)[step] : -1;
}

void Search::adjust_logits(float* logits, const int32_t* ids, int64_t count,
                           const TranslateOptions& options) {
  if (options.disable_unk) logits[config_.unk_id] = kBanned;
  if (count < options.min_decoding_length) logits[config_.eos_id] = kBanned;
  const float penalty = *options.repetition_penalty;
  if (penalty != 1.0f) {
    ++stamp_;  // each distinct token is penalized once
    for (int64_t i = 0; i < count; ++i) {
      if (seen_[ids[i]] == stamp_) continue;
      seen_[ids[i]] = stamp_;
      float& logit = logits[ids[i]];
      logit = logit < 0.0f ? logit * penalty : logit / penalty;
    }
  }
  // Every earlier n-gram whose first n - 1 tokens equal the last n - 1 bans its last token.
  const int64_t n = *options.no_repeat_ngram_size;
  if (n > 0 && count >= n) {
    const int32_t* suffix = ids + count - (n - 1);
    for (int64_t i = 0; i + n - 1 < count; ++i)
      if (std::equal(ids + i, ids + i + n - 1, suffix)) logits[ids[i + n - 1]] = kBanned;
  }
}

int64_t Search::loop_guard_cut(const int32_t* ids, int64_t count, int64_t source_tokens) {
  constexpr int64_t n = 4;  // a phrase, not a word: short n-grams repeat in normal text
  if (count <= source_tokens || count < 3 * n) return count;
  // The two latest earlier occurrences of the last 4-gram: the loop's second turn begins at the
  // later one.
  const int32_t* last = ids + count - n;
  int64_t later = -1;
  for (int64_t i = count - n - 1; i >= 0; --i) {
    if (!std::equal(ids + i, ids + i + n, last)) continue;
    if (later >= 0) return later;
    later = i;
  }
  return count;
}

int32_t Search::sample(const float* log_probs, int64_t sentence, const TranslateOptions& options) {
  const int64_t vocab = config_.target_vocab_size;
  const int64_t k = options.sampling_topk <= 0 ? vocab : std::min<int64_t>(options.sampling_topk, vocab);
  int32_t* ids = sample_ids_.data();
  for (int64_t v = 0; v < vocab; ++v) ids[v] = static_cast<int32_t>(v);
  // A total order (ties to the lower id), so the candidates' order is the same everywhere.
  auto more_likely = [&](int32_t a, int32_t b) {
    return log_probs[a] != log_probs[b] ? log_probs[a] > log_probs[b] : a < b;
  };
  if (k < vocab)
    std::partial_sort(ids, ids + k, ids + vocab, more_likely);
  else
    std::sort(ids, ids + vocab, more_likely);
  // Weights p^(1/T), relative to the best candidate; banned tokens weigh nothing.
  float* weights = sample_weights_.data();
  const float inverse_temperature = 1.0f / options.sampling_temperature;
  double total = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    weights[i] = std::exp((log_probs[ids[i]] - log_probs[ids[0]]) * inverse_temperature);
    total += weights[i];
  }
  // Nucleus: the most likely candidates until their share reaches top-p.
  int64_t kept = k;
  if (options.sampling_topp < 1.0f) {
    double share = 0.0;
    for (int64_t i = 0; i < k; ++i) {
      share += weights[i];
      if (share >= options.sampling_topp * total) {
        kept = i + 1;
        total = share;
        break;
      }
    }
  }
  const double u = static_cast<double>(next_random(rng_[sentence]) >> 11) * 0x1.0p-53 * total;
  double cumulative = 0.0;
  for (int64_t i = 0; i < kept; ++i) {
    cumulative += weights[i];
    if (u < cumulative) return ids[i];
  }
  return ids[0];  // rounding: u at the very top of the range
}

void Search::add_finished(int64_t sentence, const int32_t* ids, int64_t id_count, int64_t length,
                          float log_prob, const TranslateOptions& options) {
  int64_t& count = finished_count_[sentence];
  if (count >= max_finished_) throw Error("internal: more finished hypotheses than planned");
  Finished& f = finished_[sentence * max_finished_ + count];
  f.ids = finished_ids_.data() + (sentence * max_finished_ + count) * plan_.max_target_len;
  std::copy(ids, ids + id_count, f.ids);
  f.id_count = id_count;
  f.length = length;
  f.log_prob = log_prob;
  f.score = log_prob / length_normalizer(*options.length_normalization, length, *options.length_penalty);
  ++count;
}

int64_t Search::drop_finished(Backend& backend, int64_t slots, int64_t beam, int32_t* history) {
  const int64_t stride = plan_.max_target_len;
  int64_t kept = 0;
  for (int64_t slot = 0; slot < slots; ++slot) {
    if (done_[slot]) continue;
    // Kept slots move towards the front, so every copy below reads a row not yet overwritten.
    for (int64_t j = 0; j < beam; ++j) {
      const int64_t from = slot * beam + j, to = kept * beam + j;
      parents_[to] = parents_[from];
      tokens_[to] = tokens_[from];
      log_probs_[to] = log_probs_[from];
      if (from != to) std::memcpy(history + to * stride, history + from * stride, sizeof(int32_t) * stride);
    }
    kept_slots_[kept] = static_cast<int32_t>(slot);
    slot_sentence_[kept] = slot_sentence_[slot];
    live_[kept] = live_[slot];
    done_[kept] = 0;
    ++kept;
  }
  backend.keep_sentences(kept_slots_.data(), kept);
  return kept;
}

void Search::greedy(Backend& backend, int64_t sentences, const TranslateOptions& options) {
  // Row = slot: the sentences still decoding, in order; finished ones are dropped from the batch
  // when the backend can (their slots are then reused by the ones after them).
  const int64_t stride = plan_.max_target_len;
  int32_t* history = history_[0].data();
  for (int64_t s = 0; s < sentences; ++s) {
    tokens_[s] = config_.bos_id;
    log_probs_[s] = 0.0f;
  }
  const bool can_drop = backend.can_drop_sentences();
  const bool sampling = options.sampling() || always_sample;
  const bool adjust = options.adjusts_logits();
  const bool guard = !options.disable_loop_guard;
  const bool stream = static_cast<bool>(options.callback);
  const int64_t vocab = config_.target_vocab_size;
  int64_t slots = sentences;
  const int64_t longest = *std::max_element(max_length_.begin(), max_length_.begin() + sentences);
  bool forced = false;
  for (int64_t s = 0; s < sentences; ++s) forced |= prefixes_[s] != nullptr;
  const bool needs_logits = adjust || sampling || forced;
  const bool skip_unk = !allow_unk && backend.top_k_has_spare();
  const int64_t k = skip_unk ? 2 : 1;  // the best, and the next in case the best is unknown
  for (int64_t step = 0; step < longest; ++step) {
    backend.decode_step(tokens_.data(), 1, step);
    // Null unless an option needs it (checked before); not asked for otherwise, since a
    // shortlist's logits are spread over whole rows for it.
    float* logits = needs_logits ? backend.host_logits() : nullptr;
    if (adjust)
      for (int64_t slot = 0; slot < slots; ++slot)
        if (!done_[slot]) adjust_logits(logits + slot * vocab, history + slot * stride, step, options);
    if (!sampling) backend.top_k(nullptr, k, top_values_.data(), top_ids_.data());
    bool active = false, finished_now = false;
    for (int64_t slot = 0; slot < slots; ++slot) {
      parents_[slot] = static_cast<int32_t>(slot);
      if (done_[slot]) continue;
      const int64_t s = slot_sentence_[slot];
      int32_t token = forced_token(s, step);
      if (token >= 0 || sampling) {
        float* row = logits + slot * vocab;
        cpu::log_softmax(row, 1, vocab, 1);
        if (token < 0) {
          if (!allow_unk) row[config_.unk_id] = kBanned;  // after the softmax: the others keep theirs
          token = sample(row, s, options);
        }
        log_probs_[slot] += row[token];
      } else {
        const int64_t at = slot * k + (skip_unk && top_ids_[slot * k] == config_.unk_id ? 1 : 0);
        token = top_ids_[at];
        log_probs_[slot] += top_values_[at];
      }
      int32_t* ids = history + slot * stride;
      const size_t index = static_cast<size_t>(sentence_indices_[s]);
      if (token == config_.eos_id) {
        add_finished(s, ids, step, step + 1, log_probs_[slot], options);
        done_[slot] = finished_now = 1;
        if (stream) options.callback({index, 0, -1, static_cast<size_t>(step)});
        continue;
      }
      ids[step] = token;
      tokens_[slot] = token;
      const int64_t kept = guard ? loop_guard_cut(ids, step + 1, source_lengths_[s]) : step + 1;
      if (stream) options.callback({index, 0, token, 0});
      if (step + 1 == max_length_[s] || kept <= step) {
        add_finished(s, ids, kept, kept == step + 1 ? kept : kept + 1, log_probs_[slot], options);
        done_[slot] = finished_now = 1;
        // The loop guard may have cut tokens already streamed: the end says how many are kept.
        if (stream) options.callback({index, 0, -1, static_cast<size_t>(kept)});
      } else {
        active = true;
      }
    }
    if (!active) break;
    if (finished_now && can_drop) {
      slots = drop_finished(backend, slots, 1, history);
      backend.reorder_cache(parents_.data(), step);
    }
  }
}

void Search::score(Backend& backend, int64_t sentences, int64_t source_len, ScoringResult* const* results) {
  backend.encode(source_ids_.data(), source_lengths_.data(), sentences, source_len);
  if (shortlist != nullptr) backend.restrict_output(nullptr, 0);
  const int64_t vocab = config_.target_vocab_size;
  int64_t longest = 0;
  for (int64_t s = 0; s < sentences; ++s) {
    const std::vector<int32_t>* target = prefixes_[s];
    ScoringResult& result = *results[s];
    result.ids.clear();
    if (target != nullptr) result.ids.assign(target->begin(), target->end());
    result.ids.push_back(config_.eos_id);
    result.log_probs.assign(result.ids.size(), 0.0f);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(result.ids.size()));
    tokens_[s] = config_.bos_id;
    done_[s] = 0;
    slot_sentence_[s] = static_cast<int32_t>(s);
  }
  // Every row feeds its target's next token; a sentence whose EOS is scored leaves the batch.
  const bool can_drop = backend.can_drop_sentences();
  int64_t slots = sentences;
  for (int64_t step = 0; step < longest; ++step) {
    backend.decode_step(tokens_.data(), 1, step);
    float* logits = backend.host_logits();
    bool active = false, finished_now = false;
    for (int64_t slot = 0; slot < slots; ++slot) {
      parents_[slot] = static_cast<int32_t>(slot);
      if (done_[slot]) continue;
      ScoringResult& result = *results[slot_sentence_[slot]];
      float* row = logits + slot * vocab;
      cpu::log_softmax(row, 1, vocab, 1);
      const int32_t token = result.ids[step];
      result.log_probs[step] = row[token];
      if (token == config_.eos_id) {
        done_[slot] = finished_now = 1;
      } else {
        tokens_[slot] = token;
        active = true;
      }
    }
    if (!active) break;
    if (finished_now && can_drop) {
      slots = drop_finished(backend, slots, 1, history_[0].data());
      backend.reorder_cache(parents_.data(), step);
    }
  }
}

void Search::beam_search(Backend& backend, int64_t sentences, int64_t beam,
                         const TranslateOptions& options) {
  // The beam of a sentence shrinks as its hypotheses finish: with f finished, the best beam - f
  // continuations of the beam - f live hypotheses are kept (tests/reference/README.md). Live
  // hypotheses occupy the first rows of their slot's beam rows, best first. Finished sentences
  // are dropped from the batch when the backend can.
  const int64_t stride = plan_.max_target_len;
  for (int64_t row = 0; row < sentences * beam; ++row) {
    tokens_[row] = config_.bos_id;
    log_probs_[row] = 0.0f;
  }
  const bool can_drop = backend.can_drop_sentences();
  const bool adjust = options.adjusts_logits();
  const bool guard = !options.disable_loop_guard;
  // The backend computes the live hypotheses' rows alone (at the first step one a sentence),
  // unless the logits are read on the host by row (adjusted, or a forced target prefix).
  bool forced = false;
  for (int64_t s = 0; s < sentences; ++s) forced |= prefixes_[s] != nullptr;
  const int32_t* live_rows = adjust || forced ? nullptr : live_.data();
  const int64_t vocab = config_.target_vocab_size;
  // Each row's best `beam` continuations, the unknown token skipped (allow_unk): one more asked.
  const bool skip_unk = !allow_unk && backend.top_k_has_spare();
  const int64_t k = skip_unk ? beam + 1 : beam;
  int64_t slots = sentences;
  int current = 0;
  const int64_t longest = *std::max_element(max_length_.begin(), max_length_.begin() + sentences);
  for (int64_t step = 0; step < longest; ++step) {
    backend.decode_step(tokens_.data(), beam, step, live_rows);
    // Null unless an option needs it (checked before); see greedy().
    float* logits = adjust || forced ? backend.host_logits() : nullptr;
    if (adjust)
      for (int64_t slot = 0; slot < slots; ++slot)
        for (int64_t j = 0; !done_[slot] && j < live_[slot]; ++j) {
          const int64_t row = slot * beam + j;
          adjust_logits(logits + row * vocab, history_[current].data() + row * stride, step, options);
        }
    // A row's best `beam` continuations hold every one of its candidates that can make the top
    // beam - f.
    backend.top_k(log_probs_.data(), k, top_values_.data(), top_ids_.data());
    const int32_t* history = history_[current].data();
    int32_t* next_history = history_[1 - current].data();
    bool active = false, reorder = false, finished_now = false;
    for (int64_t slot = 0; slot < slots; ++slot) {
      const int64_t first_row = slot * beam;
      for (int64_t j = 0; j < beam; ++j) parents_[first_row + j] = static_cast<int32_t>(first_row + j);
      if (done_[slot]) continue;
      const int64_t s = slot_sentence_[slot];
      // Live hypotheses: one at the first step (every row holds BOS) and while a target prefix
      // is forced, then beam - f.
      const int64_t live = live_[slot];
      int64_t width = beam - finished_count_[s];
      Candidate* c = candidates_.data();
      const int32_t forced = forced_token(s, step);
      if (forced >= 0) {
        float* row = logits + first_row * vocab;
        cpu::log_softmax(row, 1, vocab, 1);
        c[0] = {log_probs_[first_row] + row[forced], forced, 0, 0};
        width = 1;
      } else {
        for (int64_t j = 0; j < live; ++j)
          for (int64_t i = 0, taken = 0; i < k && taken < beam; ++i) {
            const int64_t at = (first_row + j) * k + i;
            if (skip_unk && top_ids_[at] == config_.unk_id) continue;
            c[j * beam + taken] = {top_values_[at], top_ids_[at], static_cast<int32_t>(j), static_cast<int32_t>(taken)};
            ++taken;
          }
        // Equal scores keep the order of (live rank, token id), as a stable sort of all live x vocab.
        std::partial_sort(c, c + width, c + live * beam, [](const Candidate& a, const Candidate& b) {
          if (a.log_prob != b.log_prob) return a.log_prob > b.log_prob;
          if (a.parent != b.parent) return a.parent < b.parent;
          return a.order < b.order;
        });
      }
      const bool last_step = step + 1 == max_length_[s];
      int64_t next_live = 0;
      for (int64_t i = 0; i < width; ++i) {
        if (c[i].log_prob == kBanned) continue;  // a repeated n-gram (fewer allowed than the beam)
        const int64_t parent_row = first_row + c[i].parent;
        const int32_t* prefix = history + parent_row * stride;
        if (c[i].token == config_.eos_id) {
          add_finished(s, prefix, step, step + 1, c[i].log_prob, options);
          continue;
        }
        const int64_t row = first_row + next_live;
        int32_t* ids = next_history + row * stride;
        std::copy(prefix, prefix + step, ids);
        ids[step] = c[i].token;
        const int64_t kept = guard ? loop_guard_cut(ids, step + 1, source_lengths_[s]) : step + 1;
        if (last_step || kept <= step) {
          add_finished(s, ids, kept, kept == step + 1 ? kept : kept + 1, c[i].log_prob, options);
          continue;
        }
        parents_[row] = static_cast<int32_t>(parent_row);
        reorder |= parent_row != row;
        tokens_[row] = c[i].token;
        log_probs_[row] = c[i].log_prob;
        ++next_live;
      }
      live_[slot] = static_cast<int32_t>(next_live);
      if (next_live == 0) {
        done_[slot] = finished_now = true;  // every beam has ended
        if (options.callback) stream_best(s, options.callback);
      } else {
        active = true;
      }
    }
    current = 1 - current;
    if (!active) break;
    if (finished_now && can_drop) {
      slots = drop_finished(backend, slots, beam, history_[current].data());
      reorder = true;
    }
    if (reorder) backend.reorder_cache(parents_.data(), step);
  }
}

void Search::stream_best(int64_t sentence, const StreamCallback& callback) const {
  // The first of the best scores: write_results' order (a stable sort, best first).
  const Finished* f = finished_.data() + sentence * max_finished_;
  const Finished* best = f;
  for (int64_t i = 1; i < finished_count_[sentence]; ++i)
    if (f[i].score > best->score) best = f + i;
  const size_t index = static_cast<size_t>(sentence_indices_[sentence]);
  for (int64_t i = 0; i < best->id_count; ++i) callback({index, 0, best->ids[i], 0});
  callback({index, 0, -1, static_cast<size_t>(best->id_count)});
}

void Search::write_results(int64_t sentences, int64_t n_best, TokenTranslation* const* results) {
  for (int64_t s = 0; s < sentences; ++s) {
    Finished* f = finished_.data() + s * max_finished_;
    const int64_t count = finished_count_[s];
    // Best score first; equal scores keep the order they finished in (std::stable_sort may allocate).
    for (int64_t i = 1; i < count; ++i)
      for (int64_t j = i; j > 0 && f[j].score > f[j - 1].score; --j) std::swap(f[j], f[j - 1]);
    std::vector<TokenHypothesis>& hypotheses = results[s]->hypotheses;
    const int64_t kept = std::min(n_best, count);
    hypotheses.resize(kept);
    for (int64_t i = 0; i < kept; ++i) {
      TokenHypothesis& h = hypotheses[i];
      if (h.ids.capacity() < static_cast<size_t>(plan_.max_target_len)) h.ids.reserve(plan_.max_target_len);
      h.ids.assign(f[i].ids, f[i].ids + f[i].id_count);
      h.score = f[i].score;
      h.log_prob = f[i].log_prob;
    }
  }
}

}  // namespace xf::runtime
