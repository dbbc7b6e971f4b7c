// Steady-state translation allocates nothing in xf's own code: after a first call, translate_ids()
// is counted with the malloc hook (xf_alloc_counter), for greedy and beam search, at batch 1 and
// at the plan's maximum. Allocations inside oneDNN's execute() are counted apart and reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "search_support.h"
#include "tiny_model.h"
#include "xf/alloc_counter.h"
#include "xf/library_call.h"
#include "xf/translator.h"

namespace xf {
namespace {

// ssru: SSRU decoder layers; shortlist: a stored lexical shortlist (every source id lists a few
// targets), whose selection and gathered rows change with every batch.
std::shared_ptr<const Model> model_with(DType dtype, bool ssru = false, bool shortlist = false, bool marian = false) {
  test::TinyModelOptions options;
  options.matrix_dtype = dtype;
  if (ssru) options.decoder_layer_kind = DecoderLayerKind::ssru;
  if (marian) {  // Marian's int8 arithmetic (cpu::marian_int8_product), over f32 tables as Marian's
    options.f32_tables = true;
    options.metadata = {{"int8.arithmetic", "marian-intgemm-avx2"}};
  }
  std::string name = std::string(dtype_name(dtype)) + (ssru ? "_ssru" : "") + (shortlist ? "_shortlist" : "") +
                     (marian ? "_marian" : "");
  if (shortlist) {
    const ModelConfig config = test::write_tiny_model(test::make_temp_dir("probe") + "/probe.xfm", options);
    LexicalShortlist lists;
    lists.first_num = 8;
    for (uint32_t s = 0; s < config.source_vocab_size; ++s) {
      for (uint32_t t = 0; t < 3; ++t) lists.targets.push_back((s * 7 + t * 13) % config.target_vocab_size);
      std::sort(lists.targets.end() - 3, lists.targets.end());
      lists.offsets.push_back(lists.targets.size());
    }
    options.shortlist = lists;
  }
  return Model::open(test::tiny_model_file(options, name));
}

std::vector<std::vector<int32_t>> sources(size_t count, uint32_t vocab) {
  std::mt19937 rng(21);
  std::vector<std::vector<int32_t>> out(count);
  for (auto& s : out) {
    s.resize(2 + rng() % 14);
    for (int32_t& id : s) id = 4 + static_cast<int32_t>(rng() % (vocab - 4));
  }
  return out;
}

// The hook counts at all: an allocation made on purpose while counting shows up as xf's.
TEST(Allocation, HookCountsAllocations) {
  alloc_counter::Scope scope;
  auto* p = new std::vector<int>(1000);
  delete p;
  const auto counts = scope.stop();
  EXPECT_GE(counts.xf, 2u);
}

// One heap allocation that the compiler cannot elide (it may drop a new/delete pair).
void allocate_once() {
  void* volatile p = std::malloc(64);
  std::free(p);
}

// What the CUDA allocation test relies on: a LibraryCallScope marks its own thread's allocations
// as the library's; an allocation by xf's code on another thread is xf's but not the counting
// thread's; a ProcessLibraryCallScope (oneDNN's) marks every thread's.
TEST(Allocation, LibraryCallsAndOtherThreadsAreCountedApart) {
  std::atomic<int> turn{0};  // 1: the other thread allocates; 2: it has; 3: it ends
  std::thread other([&] {
    for (int wanted : {1, 3}) {
      while (turn.load() != wanted) std::this_thread::yield();
      if (wanted == 1) {
        allocate_once();
        turn = 2;
      }
    }
  });
  alloc_counter::Scope scope;
  {
    const LibraryCallScope library;
    allocate_once();  // the library's
  }
  turn = 1;  // while this thread is inside a LibraryCallScope, another's allocation stays xf's
  {
    const LibraryCallScope library;
    while (turn.load() != 2) std::this_thread::yield();
  }
  const alloc_counter::Counts seen = scope.stop();
  turn = 3;
  other.join();
  EXPECT_EQ(seen.backend, 1u);
  EXPECT_EQ(seen.xf, 1u) << "the other thread's";
  EXPECT_EQ(seen.xf_counting_thread, 0u);

  turn = 0;
  std::thread marked([&] {
    while (turn.load() != 1) std::this_thread::yield();
    allocate_once();
    turn = 2;
  });
  alloc_counter::Scope process_scope;
  {
    const ProcessLibraryCallScope library;
    turn = 1;
    while (turn.load() != 2) std::this_thread::yield();
  }
  allocate_once();  // the counting thread's own, unmarked
  const alloc_counter::Counts process_seen = process_scope.stop();
  marked.join();
  EXPECT_EQ(process_seen.backend, 1u) << "the other thread's, inside a process-wide mark";
  EXPECT_EQ(process_seen.xf, 1u);
  EXPECT_EQ(process_seen.xf_counting_thread, 1u);
}

struct Case {
  DType dtype;
  int beam;
  int batch;  // 0: the plan's maximum
  int threads;
  bool ssru = false;       // SSRU decoder layers (their cell states reordered by the beam)
  bool shortlist = false;  // a stored lexical shortlist
  bool marian = false;     // int8.arithmetic marian-intgemm-avx2
};

class SteadyState : public ::testing::TestWithParam<Case> {};

TEST_P(SteadyState, TranslateAllocatesNothingAfterTheFirstCall) {
  const Case c = GetParam();
  auto model = model_with(c.dtype, c.ssru, c.shortlist, c.marian);
  TranslatorOptions topts = test::plan_options(8, 4);
  topts.max_source_len = 32;
  topts.threads = c.threads;
  Translator translator(model, topts);
  TranslateOptions options;
  options.beam = c.beam;
  options.n_best = c.beam;
  const size_t batch = c.batch == 0 ? static_cast<size_t>(topts.max_batch) : c.batch;
  // Two batches' worth at the maximum, so that a second batch reuses the first one's memory.
  const auto input = sources(c.batch == 0 ? 2 * batch : batch, model->config().source_vocab_size);
  std::vector<TokenTranslation> results;
  translator.translate_ids(input, options, results);  // first call: results take their storage

  alloc_counter::Scope scope;
  translator.translate_ids(input, options, results);
  const auto counts = scope.stop();
  EXPECT_EQ(counts.xf, 0u) << "heap allocations by xf during translate_ids";
  RecordProperty("allocations_backend", std::to_string(counts.backend));
  std::printf("[ oneDNN   ] %llu allocations inside execute() (%s, beam %d, batch %zu)\n",
              static_cast<unsigned long long>(counts.backend), dtype_name(c.dtype), c.beam, batch);
  ASSERT_EQ(results.size(), input.size());
  EXPECT_EQ(results[0].hypotheses.size(), static_cast<size_t>(c.beam));
}

INSTANTIATE_TEST_SUITE_P(
    Runtime, SteadyState,
    ::testing::Values(Case{DType::f32, 1, 1, 1}, Case{DType::f32, 4, 1, 1}, Case{DType::f32, 1, 0, 1},
                      Case{DType::f32, 4, 0, 1}, Case{DType::f32, 4, 0, 2}, Case{DType::int8, 1, 0, 1},
                      Case{DType::int8, 4, 0, 1}, Case{DType::f32, 1, 0, 1, true}, Case{DType::f32, 4, 0, 1, true},
                      Case{DType::int8, 4, 0, 2, true}, Case{DType::f32, 1, 0, 1, false, true},
                      Case{DType::int8, 4, 0, 2, true, true}, Case{DType::int8, 4, 0, 2, true, true, true}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.marian ? "marian_" : "") + (info.param.ssru ? "ssru_" : "") +
             (info.param.shortlist ? "shortlist_" : "") +
             dtype_name(info.param.dtype) + "_beam" +
             std::to_string(info.param.beam) +
             (info.param.batch == 0 ? std::string("_max_batch") : "_batch" + std::to_string(info.param.batch)) +
             "_threads" + std::to_string(info.param.threads);
    });

// Each decoding option, steady state at the plan's maximum batch: nothing allocated by xf.
struct OptionCase {
  const char* name;
  int beam;
  void (*set)(TranslateOptions&);
  bool prefix;
};

class OptionSteadyState : public ::testing::TestWithParam<OptionCase> {};

size_t streamed_steps = 0;  // what the streaming cases' callback counts
void count_step(const StreamStep&) { ++streamed_steps; }

TEST_P(OptionSteadyState, TranslateAllocatesNothingAfterTheFirstCall) {
  const OptionCase c = GetParam();
  auto model = model_with(DType::f32);
  TranslatorOptions topts = test::plan_options(8, 4);
  topts.max_source_len = 32;
  Translator translator(model, topts);
  TranslateOptions options;
  options.beam = c.beam;
  c.set(options);
  const auto input = sources(2 * topts.max_batch, model->config().source_vocab_size);
  std::vector<std::vector<int32_t>> prefixes;
  if (c.prefix) prefixes = sources(input.size(), model->config().target_vocab_size);
  for (auto& p : prefixes) p.resize(std::min<size_t>(p.size(), 3));
  std::vector<TokenTranslation> results;
  translator.translate_ids(input, options, results, prefixes);

  alloc_counter::Scope scope;
  translator.translate_ids(input, options, results, prefixes);
  const auto counts = scope.stop();
  EXPECT_EQ(counts.xf, 0u) << "heap allocations by xf during translate_ids (" << c.name << ")";
  if (options.callback) EXPECT_GT(streamed_steps, 0u) << "the callback was called";
  ASSERT_EQ(results.size(), input.size());
  EXPECT_FALSE(results[0].hypotheses.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Runtime, OptionSteadyState,
    ::testing::Values(
        OptionCase{"sampling", 1, [](TranslateOptions& o) { o.sampling_topk = 0, o.sampling_topp = 0.9f, o.sampling_temperature = 0.8f; }, false},
        OptionCase{"sampling_topk", 1, [](TranslateOptions& o) { o.sampling_topk = 5, o.seed = 3; }, false},
        OptionCase{"prefix_greedy", 1, [](TranslateOptions&) {}, true},
        OptionCase{"prefix_beam", 4, [](TranslateOptions&) {}, true},
        OptionCase{"repetition_greedy", 1, [](TranslateOptions& o) { o.repetition_penalty = 1.3f; }, false},
        OptionCase{"repetition_beam", 4, [](TranslateOptions& o) { o.repetition_penalty = 1.3f; }, false},
        OptionCase{"ngram_greedy", 1, [](TranslateOptions& o) { o.no_repeat_ngram_size = 2; }, false},
        OptionCase{"ngram_beam", 4, [](TranslateOptions& o) { o.no_repeat_ngram_size = 2; }, false},
        OptionCase{"max_decoding_length", 4, [](TranslateOptions& o) { o.max_decoding_length = 5; }, false},
        OptionCase{"batch_tokens", 4, [](TranslateOptions& o) { o.batch_type = BatchType::tokens, o.max_batch_size = 40; }, false},
        OptionCase{"power_normalization", 4, [](TranslateOptions& o) { o.length_normalization = LengthNormalization::power; }, false},
        OptionCase{"streaming_greedy", 1, [](TranslateOptions& o) { o.callback = count_step; }, false},
        OptionCase{"streaming_beam", 4, [](TranslateOptions& o) { o.callback = count_step; }, false}),
    [](const ::testing::TestParamInfo<OptionCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace xf
