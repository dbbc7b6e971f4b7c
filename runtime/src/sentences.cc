#include "xf/sentences.h"

#include <algorithm>
#include <iterator>

namespace xf {
namespace {

// Moses' nonbreaking_prefix.en: a period after these does not end a sentence.
constexpr std::string_view kNonbreaking[] = {
    "Adj",  "Adm",  "Adv",  "Asst", "Bart", "Bldg", "Brig", "Bros", "Capt", "Cmdr", "Col", "Comdr", "Con",
    "Corp", "Cpl",  "DR",   "Dr",   "Drs",  "Ens",  "Gen",  "Gov",  "Hon",  "Hr",   "Hosp", "Insp", "Lt",
    "MM",   "MR",   "MRS",  "MS",   "Maj",  "Messrs", "Mlle", "Mme", "Mr",  "Mrs",  "Ms",   "Msgr", "Op",
    "Ord",  "Pfc",  "Ph",   "Prof", "Pvt",  "Rep",  "Reps", "Res",  "Rev",  "Rt",   "Sen",  "Sens", "Sfc",
    "Sgt",  "Sr",   "St",   "Supt", "Surg", "v",    "vs",   "i.e",  "rev",  "e.g",  "Jan",  "Feb",  "Mar",
    "Apr",  "Jun",  "Jul",  "Aug",  "Sep",  "Sept", "Oct",  "Nov",  "Dec"};
// ... and these only before a number (No. 5, Art. 3, pp. 12).
constexpr std::string_view kNumericOnly[] = {"No", "Nos", "Art", "Nr", "pp"};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ascii_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_ascii_alpha(char c) { return is_ascii_upper(c) || (c >= 'a' && c <= 'z'); }

// Does a sentence start at text[at]: an uppercase letter or a digit, after any opening quotes,
// brackets, ¿ or ¡? (Uppercase: A-Z and Latin-1's À-Þ, the letters of the source languages
// xf meets.)
bool starts_sentence(std::string_view text, size_t at) {
  while (at < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[at]);
    if (c == '"' || c == '\'' || c == '(' || c == '[') {
      ++at;
    } else if (text.compare(at, 3, "\u201C") == 0 || text.compare(at, 3, "\u2018") == 0) {
      at += 3;  // “ ‘
    } else if (text.compare(at, 2, "\u00AB") == 0 || text.compare(at, 2, "\u00BF") == 0 ||
               text.compare(at, 2, "\u00A1") == 0) {
      at += 2;  // « ¿ ¡
    } else {
      if (is_ascii_upper(text[at]) || is_digit(text[at])) return true;
      // À-Þ but not ×: C3 80..9E, C3 97 excluded.
      if (c == 0xC3 && at + 1 < text.size()) {
        const unsigned char next = static_cast<unsigned char>(text[at + 1]);
        return next >= 0x80 && next <= 0x9E && next != 0x97;
      }
      return false;
    }
  }
  return false;
}

// The closing marks a sentence's end may carry after its punctuation: quotes and brackets.
size_t skip_closing(std::string_view text, size_t at) {
  for (;;) {
    if (at < text.size() && (text[at] == '"' || text[at] == '\'' || text[at] == ')' || text[at] == ']')) {
      ++at;
    } else if (text.compare(at, 3, "\u201D") == 0 || text.compare(at, 3, "\u2019") == 0) {
      at += 3;  // ” ’
    } else if (text.compare(at, 2, "\u00BB") == 0) {
      at += 2;  // »
    } else {
      return at;
    }
  }
}

// A period at text[dot] (one, not an ellipsis) after the word before it: does it end a sentence
// whose next one starts at `next`?
bool period_ends_sentence(std::string_view text, size_t line_begin, size_t dot, size_t next) {
  size_t word_begin = dot;
  while (word_begin > line_begin && !is_space(text[word_begin - 1])) --word_begin;
  std::string_view word = text.substr(word_begin, dot - word_begin);
  // Opening marks before the word ("(Dr.") are not part of it.
  while (!word.empty() && !is_ascii_alpha(word.front()) && !is_digit(word.front()) &&
         static_cast<unsigned char>(word.front()) < 0x80)
    word.remove_prefix(1);
  if (word.empty()) return true;
  const auto listed = [&](const auto& list) { return std::find(std::begin(list), std::end(list), word) != std::end(list); };
  if (listed(kNonbreaking)) return false;
  if (word.size() == 1 && is_ascii_upper(word[0])) return false;  // an initial: J. Smith
  if (listed(kNumericOnly) && next < text.size() && is_digit(text[next])) return false;
  // An abbreviation with periods inside (U.S., a.m.): letters and periods only.
  const bool letters_and_periods =
      std::all_of(word.begin(), word.end(), [](char c) { return is_ascii_alpha(c) || c == '.'; });
  if (letters_and_periods && word.find('.') != std::string_view::npos) return false;
  return true;
}

void split_line(std::string_view text, size_t begin, size_t end, std::vector<SentenceSpan>& spans) {
  size_t start = begin;
  while (start < end && is_space(text[start])) ++start;
  size_t at = start;
  while (at < end) {
    const char c = text[at];
    const bool ellipsis = text.compare(at, 3, "\u2026") == 0;  // …
    if (c != '.' && c != '!' && c != '?' && !ellipsis) {
      ++at;
      continue;
    }
    // The run of final punctuation (?!, ..., …), then closing quotes and brackets.
    size_t after = at;
    size_t periods = 0;
    while (after < end) {
      if (text[after] == '.' ) {
        ++periods;
        ++after;
      } else if (text[after] == '!' || text[after] == '?') {
        ++after;
      } else if (text.compare(after, 3, "\u2026") == 0) {
        periods += 3;
        after += 3;
      } else {
        break;
      }
    }
    const bool lone_period = periods == 1 && after == at + 1;
    const size_t sentence_end = std::min(skip_closing(text, after), end);
    size_t next = sentence_end;
    while (next < end && is_space(text[next])) ++next;
    const bool boundary = next > sentence_end && next < end && starts_sentence(text.substr(0, end), next) &&
                          (!lone_period || period_ends_sentence(text, begin, at, next));
    if (boundary) {
      spans.push_back({start, sentence_end});
      start = next;
      at = next;
    } else {
      at = std::max(after, at + 1);
    }
  }
  size_t last = end;
  while (last > start && is_space(text[last - 1])) --last;
  if (last > start) spans.push_back({start, last});
}

}  // namespace

std::vector<SentenceSpan> split_sentences(std::string_view text) {
  std::vector<SentenceSpan> spans;
  size_t line_begin = 0;
  while (line_begin <= text.size()) {
    size_t line_end = text.find('\n', line_begin);
    if (line_end == std::string_view::npos) line_end = text.size();
    split_line(text, line_begin, line_end, spans);
    line_begin = line_end + 1;
  }
  return spans;
}

Paragraphs::Paragraphs(const std::vector<std::string>& texts, bool split)
    : Paragraphs(texts, std::vector<bool>(texts.size(), split)) {}

Paragraphs::Paragraphs(const std::vector<std::string>& texts, const std::vector<bool>& split) {
  first_.reserve(texts.size() + 1);
  for (size_t t = 0; t < texts.size(); ++t) {
    const std::string& text = texts[t];
    first_.push_back(sentences_.size());
    const std::vector<SentenceSpan> spans =
        split[t] ? split_sentences(text) : std::vector<SentenceSpan>{{0, text.size()}};
    if (spans.empty()) {
      sentences_.emplace_back();
      gaps_.emplace_back();
      continue;
    }
    for (size_t i = 0; i < spans.size(); ++i) {
      sentences_.emplace_back(text, spans[i].begin, spans[i].end - spans[i].begin);
      gaps_.push_back(i + 1 < spans.size() ? text.substr(spans[i].end, spans[i + 1].begin - spans[i].end) : "");
    }
  }
  first_.push_back(sentences_.size());
}

std::string Paragraphs::join(size_t text, const std::vector<std::string>& translations) const {
  std::string out;
  for (size_t i = first(text); i < first(text + 1); ++i) out += translations[i] + gaps_[i];
  return out;
}

}  // namespace xf
