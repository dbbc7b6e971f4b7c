#pragma once
// Paragraphs into sentences and back: people paste paragraphs, and a model trained on sentences
// translates a paragraph best one sentence at a time (as Bergamot does inside Firefox).
//
//   xf::Paragraphs paragraphs(texts, /*split=*/true);
//   ... translate paragraphs.sentences() (one batch), into `outputs` ...
//   std::string text = paragraphs.join(k, outputs);  // text k, its sentences translated
//
// The splitter is rule-based, as Moses' split-sentences.perl is (no model, no network): a
// sentence ends at . ! ? or an ellipsis (with any closing quotes or brackets after it) followed
// by white space and then an uppercase letter or a digit (after any opening quotes, brackets or
// ¿ ¡). A period does not end a sentence after a nonbreaking prefix of English (Mr. Dr. e.g.
// a single capital letter: Moses' nonbreaking_prefix.en; No. Art. pp. only before a number), nor
// after a word with a period inside (U.S.). A line break always ends a sentence. The list is
// English's: the source language of xf's own models (for another source language it only
// splits less well).
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "xf/export.h"

namespace xf {

// [begin, end) byte offsets of a sentence within its text.
struct SentenceSpan {
  size_t begin = 0, end = 0;
};

// The sentences of a text, in order, without the white space around them: what lies between two
// spans (and before the first, after the last) is the text's own spacing and line breaks. A
// text of white space only has none.
XF_API std::vector<SentenceSpan> split_sentences(std::string_view text);

// Texts cut into the sentences to translate, and each text joined back from their translations.
class XF_API Paragraphs {
 public:
  // split false: each text is one sentence as it is (translated exactly as before splitting).
  Paragraphs(const std::vector<std::string>& texts, bool split);
  // split[i]: whether text i is split.
  Paragraphs(const std::vector<std::string>& texts, const std::vector<bool>& split);

  // Every text's sentences, text after text; a text without any has one empty sentence, so that
  // each text has at least one (an empty line translates to an empty line).
  const std::vector<std::string>& sentences() const { return sentences_; }
  // Text `text`'s sentences: sentences()[first(text)] onwards, count(text) of them.
  size_t first(size_t text) const { return first_[text]; }
  size_t count(size_t text) const { return first_[text + 1] - first_[text]; }
  size_t texts() const { return first_.size() - 1; }

  // Text `text` with each sentence replaced by translations[first(text) + i], the white space
  // and line breaks between sentences as in the text (not those before the first sentence or
  // after the last: a one-sentence text gives its sentence's translation alone).
  std::string join(size_t text, const std::vector<std::string>& translations) const;
  // What join() writes after sentence `sentence`: the spacing before the next one of its text
  // ("" after a text's last).
  const std::string& gap(size_t sentence) const { return gaps_[sentence]; }

 private:
  std::vector<std::string> sentences_;
  std::vector<size_t> first_;       // [texts + 1]
  std::vector<std::string> gaps_;   // [sentences]: what follows each sentence within its text
};

}  // namespace xf
