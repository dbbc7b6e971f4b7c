// Python-compatible whitespace and sacreBLEU's 13a tokenizer.
#include <string>

#include "unicode.h"
#include "xf/error.h"
#include "xf/metrics.h"

namespace xf::metrics {
namespace detail {

size_t whitespace_length_at(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) -> unsigned { return i < text.size() ? (unsigned char)text[i] : 0u; };
  const unsigned b0 = byte(pos);
  if ((b0 >= 0x09 && b0 <= 0x0D) || (b0 >= 0x1C && b0 <= 0x20)) return 1;
  if (b0 == 0xC2) return (byte(pos + 1) == 0x85 || byte(pos + 1) == 0xA0) ? 2 : 0;  // U+0085, U+00A0
  const unsigned b1 = byte(pos + 1), b2 = byte(pos + 2);
  if (b0 == 0xE1) return (b1 == 0x9A && b2 == 0x80) ? 3 : 0;  // U+1680
  if (b0 == 0xE3) return (b1 == 0x80 && b2 == 0x80) ? 3 : 0;  // U+3000
  if (b0 == 0xE2) {
    if (b1 == 0x80 && ((b2 >= 0x80 && b2 <= 0x8A) || b2 == 0xA8 || b2 == 0xA9 || b2 == 0xAF))
      return 3;  // U+2000..U+200A, U+2028, U+2029, U+202F
    if (b1 == 0x81 && b2 == 0x9F) return 3;  // U+205F
  }
  return 0;
}

std::u32string code_points_without_whitespace(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    if (const size_t space = whitespace_length_at(text, pos)) {
      pos += space;
      continue;
    }
    const unsigned lead = (unsigned char)text[pos];
    const size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    char32_t cp = length == 1 ? lead : length == 2 ? (lead & 0x1F) : length == 3 ? (lead & 0x0F) : (lead & 0x07);
    for (size_t i = 1; i < length && pos + i < text.size(); ++i) cp = (cp << 6) | ((unsigned char)text[pos + i] & 0x3F);
    out.push_back(cp);
    pos += length;
  }
  return out;
}

}  // namespace detail

namespace {

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  std::string out;
  size_t start = 0, found;
  while ((found = text.find(from, start)) != std::string::npos) {
    out.append(text, start, found - start);
    out.append(to);
    start = found + from.size();
  }
  if (start == 0) return;
  out.append(text, start, std::string::npos);
  text.swap(out);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_period_or_comma(char c) { return c == '.' || c == ','; }

// The characters of 13a's first regex, [\{-\~\[-\` -\&\(-\+\:-\@\/]: ASCII symbols and
// punctuation except ' , - . (and the space itself, which it also pads).
bool is_13a_symbol(char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
         (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}

// Python's re.sub for a two-character pattern: scan left to right, replace non-overlapping
// matches. Working on bytes gives the same result as on code points here, because every
// match has an ASCII character on the side where a multi-byte character could be split.
template <typename Matches, typename Replace>
std::string substitute_pairs(const std::string& text, Matches matches, Replace replace) {
  std::string out;
  out.reserve(text.size() + text.size() / 2);
  size_t pos = 0;
  while (pos < text.size()) {
    if (pos + 1 < text.size() && matches(text[pos], text[pos + 1])) {
      replace(out, text[pos], text[pos + 1]);
      pos += 2;
    } else {
      out.push_back(text[pos++]);
    }
  }
  return out;
}

}  // namespace

std::string_view rstrip_whitespace(std::string_view text) {
  // Whitespace code points are at most 3 bytes long: test the last 1, 2 and 3 bytes.
  for (;;) {
    size_t strip = 0;
    for (size_t length = 1; length <= 3 && length <= text.size() && strip == 0; ++length)
      if (detail::whitespace_length_at(text, text.size() - length) == length) strip = length;
    if (strip == 0) return text;
    text.remove_suffix(strip);
  }
}

std::string tokenize_13a(std::string_view input) {
  // Language-independent part, in sacreBLEU's order (the unescapes run one after another, so
  // "&amp;lt;" becomes "<").
  std::string line(input);
  replace_all(line, "<skipped>", "");
  replace_all(line, "-\n", "");
  replace_all(line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    replace_all(line, "&quot;", "\"");
    replace_all(line, "&amp;", "&");
    replace_all(line, "&lt;", "<");
    replace_all(line, "&gt;", ">");
  }

  // ' \1 ' around every symbol, on the line padded with a space on each side.
  std::string padded;
  padded.reserve(line.size() * 2 + 2);
  padded.push_back(' ');
  for (char c : line) {
    if (is_13a_symbol(c)) {
      padded.push_back(' ');
      padded.push_back(c);
      padded.push_back(' ');
    } else {
      padded.push_back(c);
    }
  }
  padded.push_back(' ');

  // ([^0-9])([\.,]) -> '\1 \2 ': period and comma unless preceded by a digit.
  std::string text = substitute_pairs(
      padded, [](char a, char b) { return !is_digit(a) && is_period_or_comma(b); },
      [](std::string& out, char a, char b) { out += a, out += ' ', out += b, out += ' '; });
  // ([\.,])([^0-9]) -> ' \1 \2': period and comma unless followed by a digit.
  text = substitute_pairs(
      text, [](char a, char b) { return is_period_or_comma(a) && !is_digit(b); },
      [](std::string& out, char a, char b) { out += ' ', out += a, out += ' ', out += b; });
  // ([0-9])(-) -> '\1 \2 ': a dash after a digit.
  text = substitute_pairs(
      text, [](char a, char b) { return is_digit(a) && b == '-'; },
      [](std::string& out, char a, char b) { out += a, out += ' ', out += b, out += ' '; });

  // ' '.join(text.split()): single spaces between tokens, none at the ends.
  std::string tokens;
  tokens.reserve(text.size());
  size_t pos = 0;
  bool pending_space = false;
  while (pos < text.size()) {
    if (const size_t space = detail::whitespace_length_at(text, pos)) {
      pending_space = !tokens.empty();
      pos += space;
      continue;
    }
    if (pending_space) tokens.push_back(' ');
    pending_space = false;
    tokens.push_back(text[pos++]);
  }
  return tokens;
}

}  // namespace xf::metrics
