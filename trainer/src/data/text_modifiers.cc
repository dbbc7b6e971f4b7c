// Training-time text modifiers (text_modifiers.h): case, final punctuation, typos, subword
// sampling.
#include "xf/trainer/text_modifiers.h"

#include <algorithm>
#include <string>
#include <vector>

#include "xf/error.h"

namespace xf::trainer {
namespace {

// ---- Code points (the input is valid UTF-8: the corpus reader checked it) ------------------

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    char32_t cp = length == 1 ? lead : lead & (0x7F >> length);
    for (size_t k = 1; k < length && i + k < text.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    }
    out.push_back(cp);
    i += length;
  }
  return out;
}

void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode_utf8(const std::u32string& code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t cp : code_points) append_utf8(cp, &out);
  return out;
}

// Latin Extended-A (U+0100..U+017F) pairs an upper case letter with the next code point, upper
// on even code points in U+0100..U+0137 and U+014A..U+0177, on odd ones in U+0139..U+0148 and
// U+0179..U+017E; U+0138 (kra) and U+0149 have no pair.
bool extended_a_upper(char32_t cp) {
  if ((cp >= 0x100 && cp <= 0x137) || (cp >= 0x14A && cp <= 0x177)) return cp % 2 == 0;
  if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) return cp % 2 == 1;
  return false;
}
bool extended_a_lower(char32_t cp) {
  if ((cp >= 0x100 && cp <= 0x137) || (cp >= 0x14A && cp <= 0x177)) return cp % 2 == 1;
  if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) return cp % 2 == 0;
  return false;
}

char32_t to_lower(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;  // À..Þ except ×
  if (cp == 0x178) return 0xFF;                                  // Ÿ
  if (extended_a_upper(cp)) return cp + 1;
  return cp;
}

char32_t to_upper(char32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return cp - 32;  // à..þ except ÷
  if (cp == 0xFF) return 0x178;                                  // ÿ
  if (extended_a_lower(cp)) return cp - 1;
  return cp;
}

bool is_space(char32_t cp) { return cp == ' ' || cp == '\t' || cp == 0xA0 || cp == 0x202F; }

bool is_final_punctuation(char32_t cp) {
  return cp == '.' || cp == '!' || cp == '?' || cp == ';' || cp == ':' || cp == ',' ||
         cp == 0x2026;
}

bool is_ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// The keys next to each letter on a QWERTY keyboard, 'a' first.
constexpr const char* kNeighbourKeys[26] = {
    "qwsz", "vghn", "xdfv", "serfcx", "wrsd", "drtgvc", "ftyhbv", "gyujnb", "uojk",
    "huikmn", "jiolm", "kop", "njk", "bhjm", "ipkl", "ol", "wa", "etdf", "awedxz", "ryfg",
    "yihj", "cfgb", "qeas", "zsdc", "tugh", "asx"};

// A draw in [0, 1) from 53 bits, as plan_joins draws its probability.
double unit_draw(SplitMix64& rng) { return static_cast<double>(rng.next() >> 11) * 0x1p-53; }

}  // namespace

std::string lowercase_text(std::string_view text) {
  std::u32string cps = decode_utf8(text);
  for (char32_t& cp : cps) cp = to_lower(cp);
  return encode_utf8(cps);
}

std::string uppercase_text(std::string_view text) {
  std::u32string cps = decode_utf8(text);
  for (char32_t& cp : cps) cp = to_upper(cp);
  return encode_utf8(cps);
}

std::string titlecase_text(std::string_view text) {
  std::u32string cps = decode_utf8(text);
  bool word_start = true;
  for (char32_t& cp : cps) {
    if (is_space(cp)) {
      word_start = true;
      continue;
    }
    cp = word_start ? to_upper(cp) : to_lower(cp);
    word_start = false;
  }
  return encode_utf8(cps);
}

std::string without_final_punctuation(std::string_view text) {
  std::u32string cps = decode_utf8(text);
  size_t end = cps.size();
  // Trailing spaces first, then the punctuation with the spaces between its marks.
  while (end > 0 && is_space(cps[end - 1])) --end;
  const size_t text_end = end;
  while (end > 0 && (is_final_punctuation(cps[end - 1]) || is_space(cps[end - 1]))) --end;
  if (end == text_end) return std::string(text);
  while (end > 0 && is_space(cps[end - 1])) --end;
  if (end == 0) return std::string(text);
  cps.resize(end);
  return encode_utf8(cps);
}

std::string with_typo(std::string_view text, TypoKind kind, uint64_t choice) {
  std::vector<size_t> places;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!is_ascii_letter(text[i])) continue;
    if (kind == TypoKind::swap &&
        !(i + 1 < text.size() && is_ascii_letter(text[i + 1]) && text[i + 1] != text[i])) {
      continue;
    }
    places.push_back(i);
  }
  if (places.empty()) return std::string(text);
  const size_t at = places[choice % places.size()];
  std::string out(text);
  switch (kind) {
    case TypoKind::swap:
      std::swap(out[at], out[at + 1]);
      break;
    case TypoKind::drop:
      out.erase(at, 1);
      break;
    case TypoKind::repeat:
      out.insert(at, 1, out[at]);
      break;
    case TypoKind::neighbour_key: {
      const bool upper = out[at] >= 'A' && out[at] <= 'Z';
      const std::string_view keys = kNeighbourKeys[(upper ? out[at] - 'A' : out[at] - 'a')];
      // A second use of `choice` for the key, decorrelated from the place.
      const char key = keys[(choice / places.size()) % keys.size()];
      out[at] = upper ? static_cast<char>(key - 32) : key;
      break;
    }
  }
  return out;
}

ModifierDraw draw_modifiers(const ModifierOptions& options, SplitMix64& rng) {
  using Case = ModifierDraw::Case;
  ModifierDraw draw;
  const double case_draw = unit_draw(rng);
  const double punctuation_draw = unit_draw(rng);
  const double typo_draw = unit_draw(rng);
  if (case_draw < options.uppercase) {
    draw.letter_case = Case::upper;
  } else if (case_draw < options.uppercase + options.titlecase) {
    draw.letter_case = Case::title;
  } else if (case_draw < options.uppercase + options.titlecase + options.lowercase) {
    draw.letter_case = Case::lower;
  }
  draw.drop_final_punctuation = punctuation_draw < options.no_final_punctuation;
  draw.typo = typo_draw < options.typo;
  if (draw.typo) {
    draw.typo_kind = static_cast<TypoKind>(rng.below(kTypoKinds));
    draw.typo_choice = rng.next();
  }
  draw.resegment = unit_draw(rng) < options.subword_sampling;
  if (draw.resegment) draw.segmentation_pick = unit_draw(rng);
  return draw;
}

TextPair modify_pair(const TextPair& pair, const ModifierDraw& draw) {
  using Case = ModifierDraw::Case;
  TextPair out = pair;
  switch (draw.letter_case) {
    case Case::as_written:
      break;
    case Case::upper:
      out.source = uppercase_text(out.source);
      out.target = uppercase_text(out.target);
      break;
    case Case::title:
      out.source = titlecase_text(out.source);
      out.target = titlecase_text(out.target);
      break;
    case Case::lower:
      out.source = lowercase_text(out.source);
      break;
  }
  if (draw.drop_final_punctuation) out.source = without_final_punctuation(out.source);
  if (draw.typo) out.source = with_typo(out.source, draw.typo_kind, draw.typo_choice);
  return out;
}

CorpusModifier::CorpusModifier(const ModifierOptions& options, const Tokenizer& tokenizer,
                               size_t max_length)
    : options_(options), tokenizer_(&tokenizer), max_length_(max_length) {
  // Say so before the first epoch, not in the middle of one.
  if (options_.subword_sampling > 0) {
    try {
      tokenizer.sample_encode("a", kSubwordSamplingNBest, options_.subword_alpha, 0);
    } catch (const Error& e) {
      throw Error(std::string("--modify-subword-sampling: ") + e.what());
    }
  }
}

TokenizedCorpus CorpusModifier::apply(const TokenizedCorpus& corpus, uint64_t seed,
                                      uint64_t epoch) const {
  if (!active()) return corpus;
  const uint64_t epoch_base = epoch_seed(seed, epoch, 4);
  TokenizedCorpus out;
  out.ids.reserve(corpus.ids.size() + corpus.ids.size() / 8);
  out.offsets.reserve(corpus.offsets.size());
  out.offsets.push_back(0);
  for (size_t i = 0; i < corpus.size(); ++i) {
    std::vector<int32_t> source(corpus.source(i), corpus.source(i) + corpus.source_length(i));
    std::vector<int32_t> target(corpus.target(i), corpus.target(i) + corpus.target_length(i));
    // The pair's own generator: SplitMix64 of (epoch seed + i) hashed once, so neighbouring
    // pairs' sequences do not overlap.
    SplitMix64 rng(SplitMix64(epoch_base + i).next());
    const ModifierDraw draw = draw_modifiers(options_, rng);
    const bool has_unknown = std::count(source.begin(), source.end(), kUnkId) > 0 ||
                             std::count(target.begin(), target.end(), kUnkId) > 0;
    if ((draw.changes_text() || draw.resegment) && !has_unknown) {
      const TextPair original{tokenizer_->decode(source), tokenizer_->decode(target)};
      const TextPair modified = modify_pair(original, draw);
      std::vector<int32_t> new_source =
          draw.resegment ? tokenizer_->sample_encode(modified.source, kSubwordSamplingNBest,
                                                     options_.subword_alpha, draw.segmentation_pick)
          : modified.source != original.source ? tokenizer_->encode(modified.source)
                                               : source;
      std::vector<int32_t> new_target = modified.target != original.target
                                            ? tokenizer_->encode(modified.target)
                                            : target;
      const auto fits = [&](const std::vector<int32_t>& ids) {
        return !ids.empty() && (max_length_ == 0 || ids.size() <= max_length_);
      };
      if (fits(new_source) && fits(new_target)) {
        source = std::move(new_source);
        target = std::move(new_target);
      }
    }
    out.add(source, target);
  }
  return out;
}

}  // namespace xf::trainer
