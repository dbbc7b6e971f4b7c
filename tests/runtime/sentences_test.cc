// Sentence splitting (xf/sentences.h): the splitter on a table of hard cases, paragraphs cut and
// joined back with their own spacing, and the Translator translating a paragraph as its
// sentences (one batch) while a one-sentence text stays exactly as without splitting.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tiny_model.h"
#include "xf/sentences.h"
#include "xf/translator.h"

namespace xf {
namespace {

std::vector<std::string> sentences_of(const std::string& text) {
  std::vector<std::string> out;
  for (const SentenceSpan& span : split_sentences(text)) out.push_back(text.substr(span.begin, span.end - span.begin));
  return out;
}

struct Case {
  const char* what;
  std::string text;
  std::vector<std::string> sentences;
};

TEST(SentenceSplitter, HardCases) {
  const std::vector<Case> cases = {
      {"plain", "I came. I saw. I won.", {"I came.", "I saw.", "I won."}},
      {"question and exclamation", "Are you there? Yes! Come in.", {"Are you there?", "Yes!", "Come in."}},
      {"no final punctuation", "It is late. We should go", {"It is late.", "We should go"}},
      {"one sentence", "Hello, how are you?", {"Hello, how are you?"}},
      {"title", "Mr. Smith met Dr. Jones at St. Paul's.", {"Mr. Smith met Dr. Jones at St. Paul's."}},
      {"initials", "J. R. R. Tolkien wrote it. He was English.", {"J. R. R. Tolkien wrote it.", "He was English."}},
      {"acronym with periods", "He lives in the U.S. He likes it.", {"He lives in the U.S. He likes it."}},
      {"e.g. and i.e.", "Take fruit, e.g. Apples. Then rest.", {"Take fruit, e.g. Apples.", "Then rest."}},
      {"decimals", "It costs 3.50 dollars. That is 2.5 times more.", {"It costs 3.50 dollars.", "That is 2.5 times more."}},
      {"numeric-only prefix before a number", "See No. 5 below. No. It is not.", {"See No. 5 below.", "No.", "It is not."}},
      {"lowercase after a period", "Use the e.g. form. or not", {"Use the e.g. form. or not"}},
      {"double quotes", "He said \"Stop.\" Then he left.", {"He said \"Stop.\"", "Then he left."}},
      {"curly quotes", "\u201CWhere are you?\u201D \u201CAt home.\u201D", {"\u201CWhere are you?\u201D", "\u201CAt home.\u201D"}},
      {"brackets", "It works (mostly.) Try it.", {"It works (mostly.)", "Try it."}},
      {"ellipsis then capital", "Wait... What happened?", {"Wait...", "What happened?"}},
      {"ellipsis then lowercase", "Wait... what happened?", {"Wait... what happened?"}},
      {"unicode ellipsis", "Well\u2026 Maybe.", {"Well\u2026", "Maybe."}},
      {"several spaces", "One.   Two.\tThree.", {"One.", "Two.", "Three."}},
      {"no space after period", "Go.Now.", {"Go.Now."}},
      {"accented capital", "C'est fini. \u00C9coute.", {"C'est fini.", "\u00C9coute."}},
      {"digit starts", "Add them. 3 are left.", {"Add them.", "3 are left."}},
      {"inverted question mark", "Bien. \u00BFY t\u00FA?", {"Bien.", "\u00BFY t\u00FA?"}},
      {"line breaks", "First line\nSecond. Third.\n\nLast", {"First line", "Second.", "Third.", "Last"}},
      {"white space only", "  \t ", {}},
      {"empty", "", {}},
      {"leading and trailing spaces", "  Hi. Bye.  ", {"Hi.", "Bye."}},
  };
  for (const Case& c : cases) EXPECT_EQ(sentences_of(c.text), c.sentences) << c.what << ": " << c.text;
}

TEST(SentenceSplitter, ParagraphsJoinWithTheirOwnSpacing) {
  const std::vector<std::string> texts = {"One.  Two!\nThree?", "", "  Alone.  ", "A. B"};
  const Paragraphs paragraphs(texts, true);
  EXPECT_EQ(paragraphs.sentences(),
            (std::vector<std::string>{"One.", "Two!", "Three?", "", "Alone.", "A. B"}));
  ASSERT_EQ(paragraphs.texts(), 4u);
  EXPECT_EQ(paragraphs.count(1), 1u) << "an empty text has one empty sentence";
  // The identity: each sentence by itself gives the text back, less its outer spaces.
  EXPECT_EQ(paragraphs.join(0, paragraphs.sentences()), "One.  Two!\nThree?");
  EXPECT_EQ(paragraphs.join(2, paragraphs.sentences()), "Alone.");
  const std::vector<std::string> upper = {"ONE", "TWO", "THREE", "", "ALONE", "AB"};
  EXPECT_EQ(paragraphs.join(0, upper), "ONE  TWO\nTHREE");
  EXPECT_EQ(paragraphs.join(1, upper), "");
  EXPECT_EQ(paragraphs.join(3, upper), "AB");

  const Paragraphs whole(texts, false);
  EXPECT_EQ(whole.sentences(), texts) << "without splitting, each text is one sentence as it is";
}

// A paragraph's translation is its sentences' translations (each alone, splitting off) joined
// with its spacing; one-sentence texts and empty lines are translated as without splitting.
TEST(SentenceSplitter, TranslatorTranslatesAParagraphByItsSentences) {
  TranslatorOptions topts;
  topts.max_batch = 8;
  Translator translator(Model::open(test::tiny_model_file()), topts);
  const std::vector<std::string> words = test::sample_sentences(6, 3);
  const std::string a = "The " + words[0] + ".", b = "A " + words[1] + "!", c = "Why " + words[2] + "?";
  const std::vector<std::string> texts = {a + "  " + b + "\n" + c, "", words[3], "The " + words[4] + "."};
  TranslateOptions whole;
  whole.disable_sentence_splitting = true;
  for (int beam : {1, 3}) {
    SCOPED_TRACE("beam " + std::to_string(beam));
    TranslateOptions split;
    split.beam = whole.beam = beam;
    split.n_best = whole.n_best = beam == 1 ? 1 : 2;
    const auto results = translator.translate(texts, split);
    const auto parts = translator.translate({a, b, c}, whole);
    const auto unsplit = translator.translate(texts, whole);
    ASSERT_EQ(results.size(), texts.size());
    ASSERT_EQ(results[0].hypotheses.size(), static_cast<size_t>(split.n_best));
    for (int h = 0; h < split.n_best; ++h) {
      const Hypothesis& got = results[0].hypotheses[h];
      EXPECT_EQ(got.text, parts[0].hypotheses[h].text + "  " + parts[1].hypotheses[h].text + "\n" +
                              parts[2].hypotheses[h].text);
      std::vector<int32_t> ids;
      float log_prob = 0.0f;
      for (const auto& part : parts) {
        ids.insert(ids.end(), part.hypotheses[h].ids.begin(), part.hypotheses[h].ids.end());
        log_prob += part.hypotheses[h].log_prob;
      }
      EXPECT_EQ(got.ids, ids);
      EXPECT_FLOAT_EQ(got.log_prob, log_prob);
    }
    EXPECT_NE(results[0].hypotheses[0].text, unsplit[0].hypotheses[0].text) << "splitting should matter here";
    for (size_t i = 1; i < texts.size(); ++i) {
      ASSERT_EQ(results[i].hypotheses.size(), unsplit[i].hypotheses.size()) << "text " << i;
      for (size_t h = 0; h < results[i].hypotheses.size(); ++h) {
        EXPECT_EQ(results[i].hypotheses[h].text, unsplit[i].hypotheses[h].text) << "text " << i;
        EXPECT_EQ(results[i].hypotheses[h].ids, unsplit[i].hypotheses[h].ids) << "text " << i;
        EXPECT_EQ(results[i].hypotheses[h].score, unsplit[i].hypotheses[h].score) << "text " << i;
      }
    }
  }
  // A target prefix starts the paragraph's first sentence.
  TranslateOptions defaults, unsplit_defaults;
  unsplit_defaults.disable_sentence_splitting = true;
  const auto prefixed = translator.translate({a + " " + b}, defaults, {"the"});
  const auto first = translator.translate({a}, unsplit_defaults, {"the"});
  const auto second = translator.translate({b}, unsplit_defaults);
  EXPECT_EQ(prefixed[0].hypotheses[0].text, first[0].hypotheses[0].text + " " + second[0].hypotheses[0].text);
}

}  // namespace
}  // namespace xf
