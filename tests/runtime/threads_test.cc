// Threads, as translator.h and xf.h state them: translators on several threads sharing one
// Model give the single-threaded outputs; two threads calling one translator at once are
// serialized, never corrupt. Also run under ThreadSanitizer (the `tsan` preset, scripts/test.sh).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tiny_model.h"
#include "xf/format/model_file.h"
#include "xf/translator.h"
#include "xf/xf.h"

namespace {

// The tiny model file, in a folder removed when the test program ends.
class ModelFile {
 public:
  ModelFile() : dir_(xf::test::make_temp_dir("threads")), path_(dir_ + "/tiny.xfm") {
    xf::test::write_tiny_model(path_);
  }
  ~ModelFile() { std::filesystem::remove_all(dir_); }
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
};

const std::string& model_path() {
  static const ModelFile file;
  return file.path();
}

std::vector<std::string> texts(const std::vector<xf::TranslationResult>& results) {
  std::vector<std::string> out;
  for (const auto& r : results) out.push_back(r.hypotheses[0].text);
  return out;
}

xf::TranslatorOptions small_options() {
  xf::TranslatorOptions options;
  options.max_batch = 4;
  options.max_beam = 2;
  options.threads = 1;
  return options;
}

TEST(Threads, TranslatorsOnSeveralThreadsShareAModel) {
  auto model = xf::Model::open(model_path());
  constexpr int kThreads = 3;
  std::vector<std::vector<std::string>> inputs, expected(kThreads), got(kThreads);
  for (int t = 0; t < kThreads; ++t) inputs.push_back(xf::test::sample_sentences(10, 100 + t));
  {
    xf::Translator single(model, small_options());
    for (int t = 0; t < kThreads; ++t) expected[t] = texts(single.translate(inputs[t]));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      xf::Translator own(model, small_options());
      for (int round = 0; round < 2; ++round) got[t] = texts(own.translate(inputs[t]));
    });
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(got[t], expected[t]) << "thread " << t;
}

// As a server's request handlers would: one translator, each thread its own sentences, at once.
// Before the translator serialized its calls this corrupted the heap (realloc(): invalid
// pointer, or a segmentation fault).
TEST(Threads, OneTranslatorCalledFromTwoThreadsAtOnceIsSerialized) {
  xf_model* model = nullptr;
  ASSERT_EQ(xf_model_open(model_path().c_str(), &model), XF_OK) << xf_last_error();
  xf_translator_options options;
  xf_translator_options_init(&options);
  options.max_batch = 4;
  options.max_beam = 2;
  options.threads = 1;
  xf_translator* translator = nullptr;
  ASSERT_EQ(xf_translator_create(model, &options, &translator), XF_OK) << xf_last_error();

  constexpr int kThreads = 2, kRounds = 6;
  std::vector<std::vector<std::string>> inputs, expected(kThreads);
  for (int t = 0; t < kThreads; ++t) inputs.push_back(xf::test::sample_sentences(7, 200 + t));
  const auto translate = [&](int t, std::vector<std::string>& out) {
    std::vector<const char*> lines;
    for (const auto& s : inputs[t]) lines.push_back(s.c_str());
    xf_results* results = nullptr;
    if (xf_translate(translator, lines.data(), lines.size(), nullptr, &results) != XF_OK) {
      out = {std::string("error: ") + xf_last_error()};
      return;
    }
    out.clear();
    for (size_t i = 0; i < xf_results_count(results); ++i) out.push_back(xf_results_text(results, i, 0));
    xf_results_free(results);
  };
  for (int t = 0; t < kThreads; ++t) translate(t, expected[t]);

  std::vector<std::vector<std::vector<std::string>>> got(kThreads, std::vector<std::vector<std::string>>(kRounds));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) translate(t, got[t][round]);
    });
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t)
    for (int round = 0; round < kRounds; ++round)
      EXPECT_EQ(got[t][round], expected[t]) << "thread " << t << ", round " << round;
  xf_translator_free(translator);
  xf_model_free(model);
}

}  // namespace
