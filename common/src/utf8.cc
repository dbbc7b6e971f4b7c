// UTF-8 validity (utf8.h).
#include "xf/utf8.h"

#include "xf/error.h"

namespace xf {
namespace {

// Byte offset of the first malformed sequence, or text.size() when all is well.
size_t first_invalid_utf8_byte(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const unsigned lead = (unsigned char)text[pos];
    size_t length;
    unsigned min_second = 0x80, max_second = 0xBF;  // allowed range of the second byte
    if (lead < 0x80) {
      ++pos;
      continue;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) min_second = 0xA0;  // overlong
      if (lead == 0xED) max_second = 0x9F;  // surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) min_second = 0x90;  // overlong
      if (lead == 0xF4) max_second = 0x8F;  // past U+10FFFF
    } else {
      return pos;
    }
    if (pos + length > text.size()) return pos;
    const unsigned second = (unsigned char)text[pos + 1];
    if (second < min_second || second > max_second) return pos;
    for (size_t i = 2; i < length; ++i) {
      const unsigned continuation = (unsigned char)text[pos + i];
      if (continuation < 0x80 || continuation > 0xBF) return pos;
    }
    pos += length;
  }
  return pos;
}

}  // namespace

bool is_valid_utf8(std::string_view text) { return first_invalid_utf8_byte(text) == text.size(); }

void check_utf8(std::string_view text, const std::string& where) {
  const size_t bad = first_invalid_utf8_byte(text);
  if (bad != text.size()) throw Error(where + ": invalid UTF-8 at byte " + std::to_string(bad + 1));
}

}  // namespace xf
