// The C API: status codes and messages instead of exceptions, and the same translations as the
// C++ API.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tiny_model.h"
#include "xf/format/shortlist.h"
#include "xf/translator.h"
#include "xf/xf.h"

namespace {

const std::string& model_path() {
  static const std::string path = xf::test::tiny_model_file();
  return path;
}

// The test model opened and a translator of at most 4 sentences over it (the caller frees both),
// with ASSERT failures (call it under ASSERT_NO_FATAL_FAILURE).
void open_translator(xf_model** model, xf_translator** translator) {
  ASSERT_EQ(xf_model_open(model_path().c_str(), model), XF_OK) << xf_last_error();
  xf_translator_options topts;
  xf_translator_options_init(&topts);
  topts.max_batch = 4;
  ASSERT_EQ(xf_translator_create(*model, &topts, translator), XF_OK) << xf_last_error();
}

TEST(CApi, OpenReportsTheFileAtFault) {
  xf_model* model = reinterpret_cast<xf_model*>(0x1);
  EXPECT_EQ(xf_model_open("/nonexistent/model.xfm", &model), XF_ERROR);
  EXPECT_EQ(model, nullptr);
  EXPECT_NE(std::string(xf_last_error()).find("/nonexistent/model.xfm"), std::string::npos) << xf_last_error();
  EXPECT_EQ(xf_model_open(nullptr, &model), XF_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(xf_model_open(model_path().c_str(), nullptr), XF_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(xf_last_error()), "");
}

TEST(CApi, TranslatesLikeTheCppApi) {
  xf_model* model = nullptr;
  ASSERT_EQ(xf_model_open(model_path().c_str(), &model), XF_OK) << xf_last_error();
  EXPECT_STREQ(xf_last_error(), "");
  xf_translator_options topts;
  xf_translator_options_init(&topts);
  topts.max_batch = 4;
  topts.max_beam = 3;
  xf_translator* translator = nullptr;
  ASSERT_EQ(xf_translator_create(model, &topts, &translator), XF_OK) << xf_last_error();
  xf_model_free(model);  // the translator keeps it alive

  const std::vector<std::string> lines = xf::test::sample_sentences(6, 31);
  std::vector<const char*> pointers;
  for (const auto& l : lines) pointers.push_back(l.c_str());
  xf_translate_options options;
  xf_translate_options_init(&options);
  options.n_best = 2;
  xf_results* results = nullptr;
  ASSERT_EQ(xf_translate(translator, pointers.data(), pointers.size(), &options, &results), XF_OK)
      << xf_last_error();

  xf::TranslatorOptions cpp_options;
  cpp_options.max_batch = 4;
  cpp_options.max_beam = 3;
  xf::Translator cpp(xf::Model::open(model_path()), cpp_options);
  xf::TranslateOptions cpp_translate;
  cpp_translate.n_best = 2;
  const auto expected = cpp.translate(lines, cpp_translate);

  ASSERT_EQ(xf_results_count(results), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_EQ(xf_results_hypotheses(results, i), 2u);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(std::string(xf_results_text(results, i, k)), expected[i].hypotheses[k].text);
      size_t length = 0;
      const int32_t* ids = xf_results_ids(results, i, k, &length);
      EXPECT_EQ(std::vector<int32_t>(ids, ids + length), expected[i].hypotheses[k].ids);
      EXPECT_FLOAT_EQ(xf_results_score(results, i, k), expected[i].hypotheses[k].score);
    }
  }
  EXPECT_EQ(xf_results_text(results, lines.size(), 0), nullptr);
  EXPECT_EQ(xf_results_text(results, 0, 2), nullptr);
  EXPECT_TRUE(std::isnan(xf_results_score(results, 0, 5)));
  xf_results_free(results);

  // Token ids: the same hypotheses as the text path on the tokenizer's ids.
  const auto ids = cpp.model().encode_source(lines[0]);
  const int32_t* sources[] = {ids.data()};
  const size_t lengths[] = {ids.size()};
  ASSERT_EQ(xf_translate_ids(translator, sources, lengths, 1, &options, &results), XF_OK) << xf_last_error();
  size_t length = 0;
  const int32_t* out = xf_results_ids(results, 0, 0, &length);
  EXPECT_EQ(std::vector<int32_t>(out, out + length), expected[0].hypotheses[0].ids);
  EXPECT_STREQ(xf_results_text(results, 0, 0), "");
  xf_results_free(results);
  xf_translator_free(translator);
}

// Every decoding option reaches the C++ API: the same translations as TranslateOptions with the
// same values, for text and ids with target prefixes.
TEST(CApi, DecodingOptionsMatchTheCppApi) {
  xf_model* model = nullptr;
  xf_translator* translator = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_translator(&model, &translator));
  xf::Translator cpp(xf::Model::open(model_path()), {});

  const std::vector<std::string> lines = xf::test::sample_sentences(5, 32);
  const std::vector<std::string> prefixes = {"the", "", "a cat", "", "the dog"};
  std::vector<const char*> line_pointers, prefix_pointers;
  for (const auto& l : lines) line_pointers.push_back(l.c_str());
  for (const auto& p : prefixes) prefix_pointers.push_back(p.c_str());

  xf_translate_options options;
  xf_translate_options_init(&options);
  options.beam = 1;
  options.max_decoding_length = 9;
  options.max_batch_size = 20;
  options.batch_type = XF_BATCH_TOKENS;
  options.sampling_topk = 4;
  options.sampling_topp = 0.9f;
  options.sampling_temperature = 1.3f;
  options.seed = 11;
  options.repetition_penalty = 1.2f;
  options.no_repeat_ngram_size = 2;
  options.min_decoding_length = 3;
  options.disable_unk = 1;
  options.target_prefix = prefix_pointers.data();
  xf::TranslateOptions same;
  same.beam = 1;
  same.max_decoding_length = 9;
  same.max_batch_size = 20;
  same.batch_type = xf::BatchType::tokens;
  same.sampling_topk = 4;
  same.sampling_topp = 0.9f;
  same.sampling_temperature = 1.3f;
  same.seed = 11;
  same.repetition_penalty = 1.2f;
  same.no_repeat_ngram_size = 2;
  same.min_decoding_length = 3;
  same.disable_unk = true;
  const auto expected = cpp.translate(lines, same, prefixes);
  const auto plain = cpp.translate(lines, {});

  xf_results* results = nullptr;
  ASSERT_EQ(xf_translate(translator, line_pointers.data(), lines.size(), &options, &results), XF_OK)
      << xf_last_error();
  size_t differ = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(std::string(xf_results_text(results, i, 0)), expected[i].hypotheses[0].text) << "line " << i;
    differ += expected[i].hypotheses[0].ids != plain[i].hypotheses[0].ids;
  }
  EXPECT_GT(differ, 0u) << "the options should change some translations";
  xf_results_free(results);

  // Ids with id prefixes.
  std::vector<std::vector<int32_t>> source_ids, prefix_ids;
  std::vector<const int32_t*> source_pointers, prefix_id_pointers;
  std::vector<size_t> source_lengths, prefix_lengths;
  for (size_t i = 0; i < lines.size(); ++i) {
    source_ids.push_back(cpp.model().encode_source(lines[i]));
    prefix_ids.push_back(cpp.model().encode_target(prefixes[i]));
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    source_pointers.push_back(source_ids[i].data());
    source_lengths.push_back(source_ids[i].size());
    prefix_id_pointers.push_back(prefix_ids[i].data());
    prefix_lengths.push_back(prefix_ids[i].size());
  }
  options.target_prefix = nullptr;
  options.target_prefix_ids = prefix_id_pointers.data();
  options.target_prefix_lengths = prefix_lengths.data();
  ASSERT_EQ(xf_translate_ids(translator, source_pointers.data(), source_lengths.data(), lines.size(), &options,
                             &results), XF_OK) << xf_last_error();
  for (size_t i = 0; i < lines.size(); ++i) {
    size_t length = 0;
    const int32_t* out = xf_results_ids(results, i, 0, &length);
    EXPECT_EQ(std::vector<int32_t>(out, out + length), expected[i].hypotheses[0].ids) << "line " << i;
  }
  xf_results_free(results);

  options.batch_type = static_cast<xf_batch_type>(7);
  EXPECT_EQ(xf_translate(translator, line_pointers.data(), lines.size(), &options, &results), XF_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(xf_last_error()).find("batch_type"), std::string::npos) << xf_last_error();
  options.batch_type = XF_BATCH_EXAMPLES;
  options.beam = 2;
  EXPECT_EQ(xf_translate(translator, line_pointers.data(), lines.size(), &options, &results), XF_ERROR);
  EXPECT_NE(std::string(xf_last_error()).find("needs greedy search"), std::string::npos) << xf_last_error();
  xf_translator_free(translator);
  xf_model_free(model);
}

TEST(CApi, ErrorsBecomeStatusCodes) {
  xf_model* model = nullptr;
  ASSERT_EQ(xf_model_open(model_path().c_str(), &model), XF_OK);
  xf_translator_options topts;
  xf_translator_options_init(&topts);
  topts.max_source_len = 4;
  topts.max_beam = 2;
  xf_translator* translator = nullptr;
  topts.max_batch = 0;
  EXPECT_EQ(xf_translator_create(model, &topts, &translator), XF_ERROR);
  EXPECT_NE(std::string(xf_last_error()).find("max_batch"), std::string::npos);
  topts.max_batch = 2;
  ASSERT_EQ(xf_translator_create(model, &topts, &translator), XF_OK) << xf_last_error();

  xf_results* results = nullptr;
  const char* bad_utf8[] = {"the cat", "\xc3\x28"};
  EXPECT_EQ(xf_translate(translator, bad_utf8, 2, nullptr, &results), XF_ERROR);
  EXPECT_EQ(results, nullptr);
  EXPECT_NE(std::string(xf_last_error()).find("invalid UTF-8"), std::string::npos) << xf_last_error();

  const char* too_long[] = {"the cat sees the dog and the bird sings in the morning"};
  EXPECT_EQ(xf_translate(translator, too_long, 1, nullptr, &results), XF_ERROR);
  EXPECT_NE(std::string(xf_last_error()).find("max_source_len 4"), std::string::npos) << xf_last_error();

  xf_translate_options options;
  xf_translate_options_init(&options);
  options.beam = 3;
  const char* ok[] = {"the cat", ""};
  EXPECT_EQ(xf_translate(translator, ok, 2, &options, &results), XF_ERROR);
  EXPECT_NE(std::string(xf_last_error()).find("beam 3"), std::string::npos) << xf_last_error();

  const char* with_null[] = {"the cat", nullptr};
  EXPECT_EQ(xf_translate(translator, with_null, 2, nullptr, &results), XF_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(xf_translate(nullptr, ok, 2, nullptr, &results), XF_ERROR_INVALID_ARGUMENT);

  ASSERT_EQ(xf_translate(translator, ok, 2, nullptr, &results), XF_OK) << xf_last_error();
  EXPECT_STREQ(xf_results_text(results, 1, 0), "");
  xf_results_free(results);
  xf_translator_free(translator);
  xf_model_free(model);
  // Freeing null handles is a no-op.
  xf_results_free(nullptr);
  xf_translator_free(nullptr);
  xf_model_free(nullptr);
}

// The shortlist options reach the C++ API: a file translates as the C++ Translator with the
// same options does; a bad one is XF_ERROR with the runtime's one line.
TEST(CApi, ShortlistOptionsMatchTheCppApi) {
  const std::string dir = xf::test::make_temp_dir("c_api_shortlist");
  xf::LexicalShortlist lists;
  lists.first_num = 6;
  auto cpp_model = xf::Model::open(model_path());
  const uint32_t vocab = cpp_model->config().target_vocab_size;
  for (uint32_t s = 0; s < cpp_model->config().source_vocab_size; ++s) {
    for (uint32_t t : {s % vocab, (s * 5 + 7) % vocab}) lists.targets.push_back(t);
    std::sort(lists.targets.end() - 2, lists.targets.end());
    if (lists.targets.end()[-1] == lists.targets.end()[-2]) lists.targets.pop_back();
    lists.offsets.push_back(lists.targets.size());
  }
  const std::string path = dir + "/lex.bin";
  const std::vector<uint8_t> bytes = xf::binary_shortlist_bytes(lists);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());

  xf_model* model = nullptr;
  ASSERT_EQ(xf_model_open(model_path().c_str(), &model), XF_OK) << xf_last_error();
  xf_translator_options topts;
  xf_translator_options_init(&topts);
  EXPECT_EQ(topts.shortlist, nullptr);
  EXPECT_EQ(topts.shortlist_first, 100);
  EXPECT_EQ(topts.shortlist_best, 100);
  EXPECT_EQ(topts.shortlist_threshold, 0.0f);
  topts.max_batch = 4;
  topts.shortlist = path.c_str();
  xf_translator* translator = nullptr;
  ASSERT_EQ(xf_translator_create(model, &topts, &translator), XF_OK) << xf_last_error();
  const std::vector<std::string> lines = xf::test::sample_sentences(4, 5);
  std::vector<const char*> pointers;
  for (const auto& l : lines) pointers.push_back(l.c_str());
  xf_results* results = nullptr;
  ASSERT_EQ(xf_translate(translator, pointers.data(), pointers.size(), nullptr, &results), XF_OK) << xf_last_error();
  xf::TranslatorOptions cpp_options;
  cpp_options.max_batch = 4;
  cpp_options.shortlist = path;
  const auto expected = xf::Translator(cpp_model, cpp_options).translate(lines);
  for (size_t i = 0; i < lines.size(); ++i)
    EXPECT_EQ(std::string(xf_results_text(results, i, 0)), expected[i].hypotheses[0].text);
  xf_results_free(results);
  xf_translator_free(translator);

  topts.shortlist = "/nonexistent/lex.bin";
  EXPECT_EQ(xf_translator_create(model, &topts, &translator), XF_ERROR);
  EXPECT_STREQ(xf_last_error(), "shortlist /nonexistent/lex.bin: cannot open: No such file or directory");
  topts.shortlist = "none";
  topts.shortlist_best = 0;
  EXPECT_EQ(xf_translator_create(model, &topts, &translator), XF_ERROR);
  EXPECT_STREQ(xf_last_error(), "shortlist_best must be 1 or more, got 0");
  xf_model_free(model);
}

// A source of 20 MB is refused as longer than max_source_len without being copied or tokenized
// whole: the peak RSS grows by less than 30 MB (tokenizing all of it took over 1 GB).
TEST(CApi, AHugeSourceIsRefusedInBoundedMemory) {
  xf_model* model = nullptr;
  ASSERT_EQ(xf_model_open(model_path().c_str(), &model), XF_OK) << xf_last_error();
  xf_translator_options topts;
  xf_translator_options_init(&topts);
  xf_translator* translator = nullptr;
  ASSERT_EQ(xf_translator_create(model, &topts, &translator), XF_OK) << xf_last_error();
  std::string huge;
  while (huge.size() < (20u << 20)) huge += "the cat sees the dog and the bird ";
  const char* sources[] = {huge.c_str()};
  xf_results* results = nullptr;
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  EXPECT_EQ(xf_translate(translator, sources, 1, nullptr, &results), XF_ERROR);
  getrusage(RUSAGE_SELF, &after);
  EXPECT_NE(std::string(xf_last_error()).find("sentence 1: more than the translator's max_source_len 256"),
            std::string::npos)
      << xf_last_error();
  EXPECT_LT((after.ru_maxrss - before.ru_maxrss) / 1024.0, 30.0);
  xf_translator_free(translator);
  xf_model_free(model);
}

// The model's decoding.* metadata gives the defaults that init leaves unset (beam 0, NAN, -1);
// a value given explicitly wins.
TEST(CApi, TheModelsDecodingSettingsAreTheDefaults) {
  const std::string path = xf::test::make_temp_dir("c_api_defaults") + "/defaults.xfm";
  xf::test::TinyModelOptions tiny;
  tiny.metadata = {{"decoding.beam", "2"}, {"decoding.length_penalty", "1.8"}};
  xf::test::write_tiny_model(path, tiny);
  xf_model* model = nullptr;
  ASSERT_EQ(xf_model_open(path.c_str(), &model), XF_OK) << xf_last_error();
  xf_translator_options topts;
  xf_translator_options_init(&topts);
  EXPECT_EQ(topts.max_beam, 0);
  xf_translator* translator = nullptr;
  ASSERT_EQ(xf_translator_create(model, &topts, &translator), XF_OK) << xf_last_error();
  const std::vector<std::string> lines = xf::test::sample_sentences(5, 33);
  std::vector<const char*> pointers;
  for (const auto& l : lines) pointers.push_back(l.c_str());
  auto scores = [&](float length_penalty, int n_best) {
    xf_translate_options options;
    xf_translate_options_init(&options);
    if (!std::isnan(length_penalty)) options.length_penalty = length_penalty;
    options.n_best = n_best;
    xf_results* results = nullptr;
    std::vector<float> out;
    if (xf_translate(translator, pointers.data(), pointers.size(), &options, &results) != XF_OK) return out;
    for (size_t i = 0; i < lines.size(); ++i) out.push_back(xf_results_score(results, i, 0));
    xf_results_free(results);
    return out;
  };
  xf_translate_options init;
  xf_translate_options_init(&init);
  EXPECT_TRUE(std::isnan(init.length_penalty));
  EXPECT_TRUE(std::isnan(init.repetition_penalty));
  EXPECT_EQ(init.no_repeat_ngram_size, -1);
  const std::vector<float> by_default = scores(NAN, 1);
  ASSERT_EQ(by_default.size(), lines.size()) << xf_last_error();
  EXPECT_EQ(by_default, scores(1.8f, 1));
  EXPECT_NE(by_default, scores(0.6f, 1)) << "an explicit length penalty wins";
  EXPECT_EQ(scores(NAN, 2).size(), lines.size()) << "n_best 2 fits the model's beam 2: " << xf_last_error();
  EXPECT_TRUE(scores(NAN, 3).empty()) << "n_best 3 exceeds the model's beam 2";
  xf_translator_free(translator);
  xf_model_free(model);
}

TEST(CApi, VersionIsTheHeadersRelease) {
  const std::string expected = std::to_string(XF_VERSION_MAJOR) + "." + std::to_string(XF_VERSION_MINOR) +
                               "." + std::to_string(XF_VERSION_PATCH);
  EXPECT_EQ(std::string(xf_version()), expected);
  EXPECT_EQ(std::string(xf::version()), expected);
}

// An app's option struct as a different release of xf.h lays it out: the current struct, then
// `extra` more bytes, in a buffer that holds a few more bytes of garbage past struct_size.
template <typename Options>
struct SizedOptions {
  alignas(Options) unsigned char bytes[sizeof(Options) + 64];
  Options* get() { return reinterpret_cast<Options*>(bytes); }
};

// The fields appended for issue 42 (length normalization, loop guard, sentence splitting, the
// token callback) and xf_translate_async, against the C++ API; their defaults are zero, so
// that an older library takes a newer app's struct.
struct Collected {
  std::vector<std::vector<int32_t>> tokens;  // by source index, sentence 0 and 1 concatenated
  size_t ends = 0;
};

void collect(void* data, size_t index, size_t, int32_t id, size_t) {
  auto* collected = static_cast<Collected*>(data);
  if (collected->tokens.size() <= index) collected->tokens.resize(index + 1);
  if (id < 0) ++collected->ends;
  else collected->tokens[index].push_back(id);
}

TEST(CApi, LengthNormalizationStreamingAndAsyncMatchTheCppApi) {
  xf_translate_options zero;
  xf_translate_options_init(&zero);
  EXPECT_EQ(zero.length_normalization, XF_LENGTH_NORMALIZATION_MODEL);
  EXPECT_EQ(zero.disable_loop_guard, 0);
  EXPECT_EQ(zero.disable_sentence_splitting, 0);
  EXPECT_EQ(zero.callback, nullptr);

  xf_model* model = nullptr;
  xf_translator* translator = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_translator(&model, &translator));
  xf::Translator cpp(xf::Model::open(model_path()), {});
  const std::vector<std::string> words = xf::test::sample_sentences(6, 33);
  const std::vector<std::string> lines = {"The " + words[0] + ". A " + words[1] + ".", words[2], words[3]};
  std::vector<const char*> pointers;
  for (const auto& l : lines) pointers.push_back(l.c_str());

  xf_translate_options options;
  xf_translate_options_init(&options);
  options.beam = 1;
  options.length_normalization = XF_LENGTH_NORMALIZATION_POWER;
  options.length_penalty = 1.0f;
  options.disable_loop_guard = 1;
  options.disable_sentence_splitting = 1;
  Collected collected;
  options.callback = collect;
  options.callback_data = &collected;
  xf::TranslateOptions same;
  same.beam = 1;
  same.length_normalization = xf::LengthNormalization::power;
  same.length_penalty = 1.0f;
  same.disable_loop_guard = true;
  same.disable_sentence_splitting = true;
  const auto expected = cpp.translate(lines, same);

  xf_pending* pending = nullptr;
  ASSERT_EQ(xf_translate_async(translator, pointers.data(), lines.size(), &options, &pending), XF_OK)
      << xf_last_error();
  xf_results* results = nullptr;
  ASSERT_EQ(xf_pending_wait(pending, &results), XF_OK) << xf_last_error();
  EXPECT_EQ(xf_pending_ready(pending), 1);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(std::string(xf_results_text(results, i, 0)), expected[i].hypotheses[0].text) << i;
    EXPECT_FLOAT_EQ(xf_results_score(results, i, 0), expected[i].hypotheses[0].score) << i;
    EXPECT_EQ(collected.tokens.at(i), expected[i].hypotheses[0].ids) << "streamed tokens of " << i;
  }
  EXPECT_EQ(collected.ends, lines.size());
  xf_results_free(results);
  EXPECT_EQ(xf_pending_wait(pending, &results), XF_ERROR_INVALID_ARGUMENT) << "results taken twice";
  xf_pending_free(pending);

  // Sentence splitting on (the default): the first line is translated as its two sentences.
  options.disable_sentence_splitting = 0;
  options.callback = nullptr;
  ASSERT_EQ(xf_translate(translator, pointers.data(), 1, &options, &results), XF_OK) << xf_last_error();
  same.disable_sentence_splitting = false;
  EXPECT_EQ(std::string(xf_results_text(results, 0, 0)), cpp.translate({lines[0]}, same)[0].hypotheses[0].text);
  xf_results_free(results);

  // An error of the translation reaches xf_pending_wait; a bad option fails at once.
  options.beam = 99;
  ASSERT_EQ(xf_translate_async(translator, pointers.data(), 1, &options, &pending), XF_OK);
  EXPECT_EQ(xf_pending_wait(pending, &results), XF_ERROR);
  EXPECT_NE(std::string(xf_last_error()).find("beam 99"), std::string::npos) << xf_last_error();
  EXPECT_EQ(results, nullptr);
  xf_pending_free(pending);
  options.beam = 1;
  options.length_normalization = static_cast<xf_length_normalization>(7);
  EXPECT_EQ(xf_translate_async(translator, pointers.data(), 1, &options, &pending), XF_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(pending, nullptr);
  xf_translator_free(translator);
  xf_model_free(model);
}

TEST(CApi, OptionStructsCarryTheAppsSize) {
  xf_translator_options topts;
  std::memset(&topts, 0xAB, sizeof(topts));
  xf_translator_options_init(&topts);
  EXPECT_EQ(topts.struct_size, sizeof(xf_translator_options));
  EXPECT_EQ(topts.max_batch, xf::TranslatorOptions().max_batch);
  xf_translate_options options;
  std::memset(&options, 0xAB, sizeof(options));
  xf_translate_options_init(&options);
  EXPECT_EQ(options.struct_size, sizeof(xf_translate_options));
  EXPECT_EQ(options.n_best, 1);

  // An app compiled with more fields than this library knows: init zeroes the unknown tail.
  SizedOptions<xf_translator_options> newer;
  std::memset(newer.bytes, 0xAB, sizeof(newer.bytes));
  xf_translator_options_init_sized(newer.get(), sizeof(xf_translator_options) + 8);
  EXPECT_EQ(newer.get()->struct_size, sizeof(xf_translator_options) + 8);
  for (size_t i = sizeof(xf_translator_options); i < sizeof(xf_translator_options) + 8; ++i)
    EXPECT_EQ(newer.bytes[i], 0) << i;
  EXPECT_EQ(newer.bytes[sizeof(xf_translator_options) + 8], 0xAB);  // nothing past struct_size
}

TEST(CApi, OptionStructsOfOtherReleasesAreReadByTheirSize) {
  xf_model* model = nullptr;
  ASSERT_EQ(xf_model_open(model_path().c_str(), &model), XF_OK) << xf_last_error();
  xf_translator* translator = nullptr;

  // The first release's fields only (what an app built then passes): later fields, garbage in
  // the buffer here, are not read; they take their defaults.
  const size_t first = offsetof(xf_translator_options, max_len_b) + sizeof(int);
  SizedOptions<xf_translator_options> older;
  std::memset(older.bytes, 0xAB, sizeof(older.bytes));
  xf_translator_options_init_sized(older.get(), first);
  older.get()->max_batch = 2;
  older.get()->max_beam = 2;
  ASSERT_EQ(xf_translator_create(model, older.get(), &translator), XF_OK) << xf_last_error();
  xf_translator_free(translator);

  // Smaller than any release: refused, saying how to fill the struct.
  xf_translator_options_init_sized(older.get(), first - sizeof(int));
  EXPECT_EQ(xf_translator_create(model, older.get(), &translator), XF_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(translator, nullptr);
  EXPECT_NE(std::string(xf_last_error()).find("struct_size"), std::string::npos) << xf_last_error();

  // A newer app: unknown fields left at zero are accepted, a set one is refused by its offset.
  SizedOptions<xf_translator_options> newer;
  const size_t bigger = sizeof(xf_translator_options) + 8;
  xf_translator_options_init_sized(newer.get(), bigger);
  newer.get()->max_batch = 2;
  ASSERT_EQ(xf_translator_create(model, newer.get(), &translator), XF_OK) << xf_last_error();
  xf_translator_free(translator);
  translator = nullptr;
  newer.bytes[sizeof(xf_translator_options) + 3] = 1;
  EXPECT_EQ(xf_translator_create(model, newer.get(), &translator), XF_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(xf_last_error()).find("byte " + std::to_string(sizeof(xf_translator_options) + 3)),
            std::string::npos)
      << xf_last_error();
  EXPECT_EQ(translator, nullptr);

  // The same rules for the per-call options.
  xf_translator_options topts;
  xf_translator_options_init(&topts);
  topts.max_batch = 2;
  topts.max_beam = 2;
  ASSERT_EQ(xf_translator_create(model, &topts, &translator), XF_OK) << xf_last_error();
  const char* lines[] = {"the cat"};
  xf_results* results = nullptr;
  SizedOptions<xf_translate_options> call;
  std::memset(call.bytes, 0xAB, sizeof(call.bytes));
  xf_translate_options_init_sized(call.get(), offsetof(xf_translate_options, max_len_b) + sizeof(int));
  call.get()->n_best = 2;
  ASSERT_EQ(xf_translate(translator, lines, 1, call.get(), &results), XF_OK) << xf_last_error();
  EXPECT_EQ(xf_results_hypotheses(results, 0), 2u);
  xf_results_free(results);
  results = nullptr;
  call.get()->struct_size = 4;
  EXPECT_EQ(xf_translate(translator, lines, 1, call.get(), &results), XF_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(xf_last_error()).find("xf_translate_options: struct_size 4"), std::string::npos)
      << xf_last_error();
  EXPECT_EQ(results, nullptr);
  xf_translator_free(translator);
  xf_model_free(model);
}

}  // namespace

namespace {

std::vector<std::string> translate_texts(xf_translator* translator, const std::vector<std::string>& lines) {
  std::vector<const char*> pointers;
  for (const auto& l : lines) pointers.push_back(l.c_str());
  xf_results* results = nullptr;
  if (xf_translate(translator, pointers.data(), pointers.size(), nullptr, &results) != XF_OK)
    return {std::string("error: ") + xf_last_error()};
  std::vector<std::string> texts;
  for (size_t i = 0; i < xf_results_count(results); ++i) texts.push_back(xf_results_text(results, i, 0));
  xf_results_free(results);
  return texts;
}

// mmap = 0 reads the file into memory: overwriting it in place afterwards (cp over it, here
// truncated to nothing) changes nothing for the open model. A mapped model would die of SIGBUS.
TEST(CApi, ModelReadIntoMemorySurvivesTheFileChanging) {
  const std::string dir = xf::test::make_temp_dir("c_api_no_mmap");
  const std::string path = dir + "/copy.xfm";
  xf::test::write_tiny_model(path);
  xf_model_options model_options;
  xf_model_options_init(&model_options);
  EXPECT_EQ(model_options.mmap, 1);
  model_options.mmap = 0;
  xf_model* model = nullptr;
  ASSERT_EQ(xf_model_open_with_options(path.c_str(), &model_options, &model), XF_OK) << xf_last_error();
  xf_translator_options options;
  xf_translator_options_init(&options);
  options.max_batch = 4;
  xf_translator* translator = nullptr;
  ASSERT_EQ(xf_translator_create(model, &options, &translator), XF_OK) << xf_last_error();
  const std::vector<std::string> lines = xf::test::sample_sentences(5, 77);
  const std::vector<std::string> before = translate_texts(translator, lines);

  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  EXPECT_EQ(translate_texts(translator, lines), before);

  // The same translations as a mapped model of the same file gives.
  xf::test::write_tiny_model(path);
  xf::TranslatorOptions cpp_options;
  cpp_options.max_batch = 4;
  xf::Translator mapped(xf::Model::open(path), cpp_options);
  const auto expected = mapped.translate(lines);
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(before[i], expected[i].hypotheses[0].text);

  EXPECT_EQ(xf_model_open_with_options(path.c_str(), nullptr, &model), XF_ERROR_INVALID_ARGUMENT);
  xf_translator_free(translator);
  xf_model_free(model);
  std::filesystem::remove_all(dir);
}

}  // namespace
