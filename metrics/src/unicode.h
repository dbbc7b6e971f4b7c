#pragma once
// UTF-8 helpers shared by the metrics (internal). Inputs are assumed valid UTF-8.
#include <cstddef>
#include <string>
#include <string_view>

namespace xf::metrics::detail {

// Byte length of the whitespace code point starting at text[pos] (Python's str.isspace():
// \t \n \v \f \r, U+001C..U+001F, space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
// U+2029, U+202F, U+205F, U+3000), or 0 when that code point is not whitespace.
size_t whitespace_length_at(std::string_view text, size_t pos);

// The code points of `text` with all whitespace removed (chrF's view of a sentence).
std::u32string code_points_without_whitespace(std::string_view text);

}  // namespace xf::metrics::detail
