#pragma once
// UTF-8 validity, as Python's strict utf-8 decoder judges it: shared by the runtime (source
// text), the trainer (corpora) and the metrics (hypotheses and references).
#include <string>
#include <string_view>

namespace xf {

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF: what Python's strict utf-8 decoder accepts).
bool is_valid_utf8(std::string_view text);
// Throws xf::Error("<where>: invalid UTF-8 at byte N") when `text` is not valid UTF-8.
void check_utf8(std::string_view text, const std::string& where);

}  // namespace xf
