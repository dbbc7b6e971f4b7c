// Streaming (TranslateOptions::callback) and asynchronous translation (translate_async): every
// sentence's streamed tokens are its result's, in order, then one end; greedy tokens come step
// by step while the batch decodes; asynchronous results equal synchronous ones.
#include <gtest/gtest.h>

#include <dirent.h>

#include <future>
#include <map>
#include <numeric>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "search_support.h"
#include "tiny_model.h"
#include "xf/error.h"
#include "xf/translator.h"

namespace xf {
namespace {

struct Streamed {
  std::map<std::pair<size_t, size_t>, std::vector<int32_t>> tokens;  // (index, sentence) -> ids
  std::map<std::pair<size_t, size_t>, std::vector<size_t>> ends;      // -> the lengths its ends gave
  std::vector<size_t> order;                                          // index of each call
  StreamCallback callback() {
    return [this](const StreamStep& step) {
      order.push_back(step.index);
      if (step.id < 0) ends[{step.index, step.sentence}].push_back(step.length);
      else {
        const auto key = std::make_pair(step.index, step.sentence);
        EXPECT_TRUE(ends[key].empty()) << "a token after the end of " << step.index;
        tokens[{step.index, step.sentence}].push_back(step.id);
      }
    };
  }
};

TEST(Streaming, TokensAreTheResultsInOrderThenOneEnd) {
  auto model = Model::open(test::tiny_model_file());
  Translator translator(model, test::plan_options(8, 4));
  auto sources = test::random_source_ids(7, model->config().source_vocab_size, 51, 10);
  sources.insert(sources.begin() + 2, std::vector<int32_t>{});  // an empty line
  for (int beam : {1, 4}) {
    SCOPED_TRACE("beam " + std::to_string(beam));
    Streamed streamed;
    TranslateOptions options = test::beam_options(beam, beam == 1 ? 1 : 2);
    options.callback = streamed.callback();
    std::vector<TokenTranslation> results, plain;
    translator.translate_ids(sources, options, results);
    options.callback = nullptr;
    translator.translate_ids(sources, options, plain);
    for (size_t i = 0; i < sources.size(); ++i) {
      const auto& best = results[i].hypotheses[0].ids;
      EXPECT_EQ(best, plain[i].hypotheses[0].ids) << "streaming changed sentence " << i;
      const auto key = std::make_pair(i, size_t{0});
      EXPECT_EQ(streamed.tokens[key], best) << "sentence " << i;
      EXPECT_EQ(streamed.ends[key], std::vector<size_t>{best.size()}) << "sentence " << i;
    }
    EXPECT_EQ(streamed.ends.size(), sources.size());
    if (beam == 1) {
      // Greedy streams each token in the decoder step that chose it: every sentence's token k
      // comes before any sentence's token k + 1 (the steps are in order), so the first tokens
      // arrive one step after the call starts, not when the batch is done.
      std::map<size_t, size_t> position;
      size_t last = 0, steps_seen = 0;
      for (size_t k = 0; k < streamed.order.size(); ++k) {
        const size_t index = streamed.order[k];
        const size_t at = position[index]++;
        EXPECT_GE(at + 1, last) << "call " << k << ": a token of an earlier step after a later one";
        last = std::max(last, at + 1);
        steps_seen = std::max(steps_seen, at + 1);
      }
      EXPECT_GT(steps_seen, 3u);
    }
  }
}

TEST(Streaming, TextCallsNameTheTextAndItsSentence) {
  auto model = Model::open(test::tiny_model_file());
  Translator translator(model, test::plan_options(8, 4));
  const auto words = test::sample_sentences(4, 9);
  const std::vector<std::string> texts = {"The " + words[0] + ". A " + words[1] + "!", "", words[2]};
  Streamed streamed;
  TranslateOptions options;
  options.beam = 1;
  options.callback = streamed.callback();
  const auto results = translator.translate(texts, options);
  TranslateOptions whole;
  whole.beam = 1;
  whole.disable_sentence_splitting = true;
  const auto parts = translator.translate({"The " + words[0] + ".", "A " + words[1] + "!"}, whole);
  EXPECT_EQ((streamed.tokens[{0, 0}]), parts[0].hypotheses[0].ids);
  EXPECT_EQ((streamed.tokens[{0, 1}]), parts[1].hypotheses[0].ids);
  EXPECT_EQ((streamed.ends[{1, 0}]), std::vector<size_t>{0}) << "an empty text ends too";
  EXPECT_EQ((streamed.tokens[{2, 0}]), results[2].hypotheses[0].ids);
  EXPECT_EQ(streamed.ends.size(), 4u);
}

TEST(Streaming, AsyncResultsEqualSyncOnes) {
  auto model = Model::open(test::tiny_model_file());
  Translator translator(model, test::plan_options(8, 4));
  const auto texts = test::sample_sentences(12, 21);
  TranslateOptions options;
  options.n_best = 2;
  auto first = translator.translate_async(texts, options);
  auto second = translator.translate_async({texts[3], texts[1]}, options);  // waits for the first
  const auto sync = translator.translate(texts, options);
  const auto got = first.get();
  ASSERT_EQ(got.size(), sync.size());
  for (size_t i = 0; i < sync.size(); ++i) {
    ASSERT_EQ(got[i].hypotheses.size(), sync[i].hypotheses.size());
    for (size_t h = 0; h < sync[i].hypotheses.size(); ++h) {
      EXPECT_EQ(got[i].hypotheses[h].text, sync[i].hypotheses[h].text) << i;
      EXPECT_EQ(got[i].hypotheses[h].score, sync[i].hypotheses[h].score) << i;
    }
  }
  const auto pair = second.get();
  EXPECT_EQ(pair[0].hypotheses[0].text, sync[3].hypotheses[0].text);
  EXPECT_EQ(pair[1].hypotheses[0].text, sync[1].hypotheses[0].text);
  // An error reaches the future.
  TranslateOptions bad;
  bad.beam = 99;
  auto failing = translator.translate_async(texts, bad);
  EXPECT_THROW(failing.get(), Error);
}

int threads_of_this_process() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
    closedir(dir);
  }
  return count;
}

// Many calls at once: they queue for one worker thread (not a thread each, waiting on the
// Translator's lock), run in the order they were made, and a Translator destroyed with calls
// still queued finishes them before it goes.
TEST(Streaming, AsyncCallsQueueInOrderOnOneThread) {
  auto model = Model::open(test::tiny_model_file());
  const auto texts = test::sample_sentences(4, 33);
  const int calls = 40;
  std::vector<std::future<std::vector<TranslationResult>>> pending;
  std::mutex mutex;
  std::vector<int> started;  // each call's number, when its first token streams
  int added_threads = 0;
  {
    Translator translator(model, test::plan_options(8, 4));
    const int before = threads_of_this_process();
    for (int call = 0; call < calls; ++call) {
      TranslateOptions options;
      options.callback = [&, call](const StreamStep&) {
        std::lock_guard<std::mutex> lock(mutex);
        if (started.empty() || started.back() != call) started.push_back(call);
      };
      pending.push_back(translator.translate_async(texts, options));
    }
    added_threads = threads_of_this_process() - before;
  }  // destroyed with calls still queued
  EXPECT_LE(added_threads, 1) << "a thread per call";
  const auto sync = Translator(model, test::plan_options(8, 4)).translate(texts);
  for (auto& future : pending) {
    const auto got = future.get();
    ASSERT_EQ(got.size(), sync.size());
    for (size_t i = 0; i < sync.size(); ++i) EXPECT_EQ(got[i].hypotheses[0].text, sync[i].hypotheses[0].text);
  }
  std::vector<int> in_order(calls);
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_EQ(started, in_order);
}

}  // namespace
}  // namespace xf
