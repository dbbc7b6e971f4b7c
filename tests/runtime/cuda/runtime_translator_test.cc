// The runtime's CUDA backend against the CPU backend and the independent PyTorch reference
// (tests/reference/): encoder output and step-by-step logits, top-k and the beam reorder of the
// K/V cache, greedy and beam outputs, in f32 and f16. Skipped where no GPU is visible, except
// cuda_runtime_device, which checks the errors a Translator gives without one. The same file is
// also built into xf_cuda_runtime_emulated_tests, over runtime_host_emulation.cc (no GPU needed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "backend_probe.h"
#include "cuda_test_support.h"
#include "golden.h"
#include "memory_plan.h"
#include "random_inputs.h"
#include "search_support.h"  // plan_options
#include "tiny_model.h"
#include "xf/translator.h"

namespace xf {
namespace {

// These tests run the CUDA backend linked into this executable (over the host emulation in
// xf_cuda_runtime_emulated_tests), not the module libxf_cuda_runtime.so (cuda_module_test.cc).
[[maybe_unused]] const bool kLinkedCudaBackend =
    (runtime::register_backend_factory(Device::cuda, &runtime::cuda_backend_factory()), true);

using golden::golden_at;

// f32 through a few layers: relative to the tensor's largest magnitude (as the CPU golden test).
constexpr double kF32Tolerance = 5e-6;
// f16 activations (f32 accumulation) against the CPU's f32 on the same f16 weights.
constexpr double kF16Tolerance = 1e-2;

// The golden model of a case written once per process, as f32 or f16 (values rounded).
std::shared_ptr<const Model> golden_model(const std::string& case_name, DType dtype) {
  static const std::string dir = test::make_temp_dir("cuda-runtime-golden");
  static std::map<std::string, std::shared_ptr<const Model>> models;
  const std::string path = dir + "/" + case_name + "-" + dtype_name(dtype) + ".xfm";
  auto& model = models[path];
  if (!model) {
    golden::write_golden_model(golden::load_golden(golden::golden_path(case_name)), path, dtype);
    model = Model::open(path);
  }
  return model;
}

double max_abs(const std::vector<float>& values) {
  double m = 0.0;
  for (float v : values) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}

// Largest |a[i] - b[i]| over the rows of [rows, width] for which keep(row) holds.
template <typename A, typename B, typename Keep>
double largest_difference(const A& a, const B& b, int64_t rows, int64_t width, Keep keep) {
  double worst = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    if (!keep(r)) continue;
    for (int64_t j = 0; j < width; ++j)
      worst = std::max(worst, std::abs(static_cast<double>(a[r * width + j]) - static_cast<double>(b[r * width + j])));
  }
  return worst;
}

// ---- runs everywhere ------------------------------------------------------------------------

TranslatorOptions cuda_options(int max_batch, int beam, int max_source_len) {
  TranslatorOptions options;
  options.device = Device::cuda;
  options.max_batch = max_batch;
  options.max_beam = beam;
  options.max_source_len = max_source_len;
  return options;
}

TEST(cuda_runtime_device, WithoutGpuTheTranslatorSaysSoElseItBuilds) {
  const auto model = golden_model("post_shared", DType::f32);
  const TranslatorOptions options = cuda_options(2, 2, 16);
  if (!test::gpu_unavailable_reason().empty()) {
    try {
      Translator translator(model, options);
      FAIL() << "a CUDA Translator was built where " << test::gpu_unavailable_reason();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no CUDA device is available"), std::string::npos) << e.what();
    }
  } else {
    Translator translator(model, options);
    EXPECT_GT(translator.arena_bytes(), 0u);
  }
}

TEST(cuda_runtime_device, PlanBeyondTheKernelsLimitsIsRefusedBeforeTouchingAGpu) {
  const auto model = golden_model("post_shared", DType::f32);
  // Beam 17: the top-k kernel keeps at most 16 per row. The vocabulary (32) allows the beam.
  try {
    Translator translator(model, cuda_options(2, 17, 16));
    FAIL() << "beam 17 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("beam 17 exceeds the CUDA top-k limit of 16"), std::string::npos)
        << e.what();
  }
  // int8 products are CPU-only.
  try {
    TranslatorOptions options = cuda_options(2, 2, 16);
    options.weight_dtype = DType::int8;
    Translator translator(model, options);
    FAIL() << "int8 weights were accepted on CUDA";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "device cuda: weights cannot be converted to int8 on CUDA (f32 or f16)");
  }
  // 65536 rows: beyond the attention and gather kernels' grids.
  try {
    Translator translator(model, cuda_options(16384, 4, 4));
    FAIL() << "65536 decoder rows were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds 65535 rows"), std::string::npos) << e.what();
  }
}

// ---- golden cases: the PyTorch reference and the CPU backend ---------------------------------

// The golden model stored as `dtype`; the CUDA backend computes in f16 for an f16 file, and for
// an f32 file when f16_at_load (TranslatorOptions::weight_dtype f16).
struct GoldenCase {
  std::string name;
  DType dtype;
  bool f16_at_load = false;
};

std::string golden_case_label(const ::testing::TestParamInfo<GoldenCase>& info) {
  return info.param.name + "_" + dtype_name(info.param.dtype) + (info.param.f16_at_load ? "_as_f16" : "");
}
// Test names in ctest's list (instead of the parameter's bytes).
void PrintTo(const GoldenCase& c, std::ostream* out) {
  *out << c.name << " " << dtype_name(c.dtype) << (c.f16_at_load ? " as f16" : "");
}

std::vector<GoldenCase> golden_cases(bool with_f16) {
  std::vector<GoldenCase> cases;
  for (const std::string& name : golden::golden_case_names()) {
    cases.push_back({name, DType::f32});
    if (with_f16) {
      cases.push_back({name, DType::f16});
      cases.push_back({name, DType::f32, true});
    }
  }
  return cases;
}

class cuda_runtime_golden : public ::testing::TestWithParam<GoldenCase> {
 protected:
  void SetUp() override {
    XF_SKIP_WITHOUT_GPU();
    file_ = golden::load_golden(golden::golden_path(GetParam().name));
    model_ = golden_model(GetParam().name, GetParam().dtype);
    f32_ = GetParam().dtype == DType::f32 && !GetParam().f16_at_load;
    if (GetParam().f16_at_load) compute_dtype_ = DType::f16;
    sources_ = golden::golden_rows(file_, "source.ids", "source.lengths");
    for (auto& s : sources_) s.pop_back();  // the runtime appends EOS itself
  }
  const golden::GoldenTensor& at(const std::string& name) const { return golden_at(file_, name); }

  golden::GoldenFile file_;
  std::shared_ptr<const Model> model_;
  bool f32_ = true;                     // f32 compute on the GPU
  std::optional<DType> compute_dtype_;  // for make_cuda_backend: unset follows the file
  std::vector<std::vector<int32_t>> sources_;
};

// Encoder output and teacher-forced step logits: CUDA against the CPU backend on the same model
// file, and (f32) against the float64 reference.
TEST_P(cuda_runtime_golden, EncoderOutputAndStepLogitsMatchCpuAndReference) {
  const ModelConfig& config = model_->config();
  const auto& source = at("source.ids");
  const int64_t batch = source.shape[0], source_len = source.shape[1], d = config.d_model;
  TranslatorOptions options;
  options.max_batch = static_cast<int>(batch);
  options.max_beam = 1;
  options.max_source_len = static_cast<int>(source_len);
  const auto plan = runtime::make_memory_plan(config, options);
  auto cuda_backend = runtime::make_cuda_backend(*model_, plan, compute_dtype_);
  auto cpu_backend = runtime::make_cpu_backend(*model_, plan, 1);
  const double tolerance = f32_ ? kF32Tolerance : kF16Tolerance;

  const std::vector<int32_t> ids = source.to_i32();
  const std::vector<int32_t> lengths = at("source.lengths").to_i32();
  cuda_backend->encode(ids.data(), lengths.data(), batch, source_len);
  cpu_backend->encode(ids.data(), lengths.data(), batch, source_len);
  std::vector<float> cuda_memory(batch * source_len * d), cpu_memory(cuda_memory.size());
  runtime::probe(*cuda_backend).copy_encoder_output(cuda_memory.data());
  runtime::probe(*cpu_backend).copy_encoder_output(cpu_memory.data());
  // Padded positions are computed but never read: compare each sentence's own positions.
  const auto valid_position = [&](int64_t row) { return row % source_len < lengths[row / source_len]; };
  const double memory_scale = max_abs(cpu_memory);
  EXPECT_LE(largest_difference(cuda_memory, cpu_memory, batch * source_len, d, valid_position),
            tolerance * memory_scale)
      << "encoder output against the CPU backend";
  if (f32_) {
    EXPECT_LE(largest_difference(cuda_memory, at("encoder.output").values, batch * source_len, d, valid_position),
              tolerance * memory_scale)
        << "encoder output against the reference";
  }

  const auto& target_in = at("target_in.ids");
  const auto& reference_logits = at("decoder.logits");
  const std::vector<int32_t> target_lengths = at("target.lengths").to_i32();
  const int64_t target_len = target_in.shape[1], vocab = config.target_vocab_size;
  std::vector<float> cuda_logits(batch * vocab), cpu_logits(batch * vocab), reference(batch * vocab);
  std::vector<int32_t> tokens(batch);
  double worst_cpu = 0.0, worst_reference = 0.0, scale = 0.0;
  for (int64_t t = 0; t < target_len; ++t) {
    for (int64_t b = 0; b < batch; ++b) tokens[b] = static_cast<int32_t>(target_in.values[b * target_len + t]);
    cuda_backend->decode_step(tokens.data(), 1, t);
    cpu_backend->decode_step(tokens.data(), 1, t);
    runtime::probe(*cuda_backend).copy_logits(cuda_logits.data());
    runtime::probe(*cpu_backend).copy_logits(cpu_logits.data());
    for (int64_t b = 0; b < batch; ++b)
      std::copy_n(reference_logits.values.begin() + (b * target_len + t) * vocab, vocab, reference.begin() + b * vocab);
    const auto in_target = [&](int64_t b) { return t < target_lengths[b]; };
    worst_cpu = std::max(worst_cpu, largest_difference(cuda_logits, cpu_logits, batch, vocab, in_target));
    worst_reference = std::max(worst_reference, largest_difference(cuda_logits, reference, batch, vocab, in_target));
    scale = std::max(scale, max_abs(cpu_logits));
  }
  EXPECT_LE(worst_cpu, tolerance * scale) << "step logits against the CPU backend";
  if (f32_) {
    EXPECT_LE(worst_reference, tolerance * scale) << "step logits against the reference";
  }
}

// Greedy and beam-4 n-best lists: exactly the CPU's ids and (f32) the reference's, with scores
// within the tolerance; batches of the whole set and of two (padding, sorting, input order).
// In f32 only: f16 may choose differently where two candidates are close.
class cuda_runtime_golden_search : public cuda_runtime_golden {};

TEST_P(cuda_runtime_golden_search, GreedyAndBeamOutputsEqualTheCpus) {
  for (int max_batch : {3, 2}) {
    SCOPED_TRACE("max_batch " + std::to_string(max_batch));
    TranslatorOptions options = test::plan_options(max_batch, 4);
    options.max_source_len = 64;
    Translator cpu(model_, options);
    options.device = Device::cuda;
    Translator gpu(model_, options);

    TranslateOptions greedy;
    greedy.beam = 1;
    TranslateOptions beam;
    beam.beam = 4;
    beam.n_best = 4;
    TranslateOptions short_beam = beam;
    short_beam.max_len_a = 0.0f;
    short_beam.max_len_b = 3;
    // The decoding options every backend has: a length cap per call, batches cut by tokens.
    TranslateOptions capped_tokens = beam;
    capped_tokens.max_decoding_length = 2;
    capped_tokens.batch_type = BatchType::tokens;
    capped_tokens.max_batch_size = 12;
    const std::vector<std::pair<std::string, TranslateOptions>> runs = {
        {"greedy", greedy}, {"beam4", beam}, {"beam4 max length 3", short_beam},
        {"beam4 max_decoding_length 2, token batches", capped_tokens}};
    for (const auto& [label, translate] : runs) {
      SCOPED_TRACE(label);
      std::vector<TokenTranslation> expected, actual;
      cpu.translate_ids(sources_, translate, expected);
      gpu.translate_ids(sources_, translate, actual);
      ASSERT_EQ(actual.size(), expected.size());
      for (size_t i = 0; i < expected.size(); ++i) {
        ASSERT_EQ(actual[i].hypotheses.size(), expected[i].hypotheses.size()) << "sentence " << i;
        for (size_t k = 0; k < expected[i].hypotheses.size(); ++k) {
          const TokenHypothesis &want = expected[i].hypotheses[k], &got = actual[i].hypotheses[k];
          EXPECT_EQ(got.ids, want.ids) << "sentence " << i << " rank " << k;
          EXPECT_NEAR(got.score, want.score, 1e-5 * std::max(1.0f, std::abs(want.score)))
              << "sentence " << i << " rank " << k;
        }
      }
      if (label == "greedy") {
        const auto reference = golden::golden_rows(file_, "greedy.ids", "greedy.lengths");
        for (size_t i = 0; i < actual.size(); ++i)
          EXPECT_EQ(actual[i].hypotheses[0].ids, reference[i]) << "greedy against the reference, sentence " << i;
      }
    }
  }
}

// The options that need the logits on the host are refused with one line naming the option.
TEST_P(cuda_runtime_golden_search, HostLogitOptionsAreRefusedWithOneLine) {
  Translator gpu(model_, cuda_options(2, 2, 64));
  const std::vector<std::pair<std::string, void (*)(TranslateOptions&)>> options = {
      {"sampling (sampling_topk != 1)", [](TranslateOptions& o) { o.beam = 1, o.sampling_topk = 5; }},
      {"repetition_penalty", [](TranslateOptions& o) { o.repetition_penalty = 1.2f; }},
      {"no_repeat_ngram_size", [](TranslateOptions& o) { o.no_repeat_ngram_size = 2; }},
      {"min_decoding_length", [](TranslateOptions& o) { o.min_decoding_length = 2; }},
      {"disable_unk", [](TranslateOptions& o) { o.disable_unk = true; }},
  };
  std::vector<TokenTranslation> results;
  for (const auto& [name, set] : options) {
    TranslateOptions translate;
    set(translate);
    try {
      gpu.translate_ids(sources_, translate, results);
      ADD_FAILURE() << name << " was not refused";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "device cuda: " + name + " is not implemented on this device (CPU only)");
    }
  }
  std::vector<std::vector<int32_t>> prefixes(sources_.size());
  prefixes[0] = {5};
  EXPECT_THROW(gpu.translate_ids(sources_, {}, results, prefixes), Error);
  std::vector<ScoringResult> scores;
  try {
    gpu.score_ids(sources_, std::vector<std::vector<int32_t>>(sources_.size()), {}, scores);
    ADD_FAILURE() << "scoring was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "device cuda: scoring is not implemented on this device (CPU only)");
  }
  gpu.translate_ids(sources_, {}, results);  // still usable
  EXPECT_EQ(results.size(), sources_.size());
}

INSTANTIATE_TEST_SUITE_P(Reference, cuda_runtime_golden, ::testing::ValuesIn(golden_cases(true)), golden_case_label);
INSTANTIATE_TEST_SUITE_P(Reference, cuda_runtime_golden_search, ::testing::ValuesIn(golden_cases(false)),
                         golden_case_label);

// A model whose decoding.allow_unk is 0 (Marian's allow-unk false): the unknown token is skipped
// after the softmax on CUDA as on the CPU (a spare top-k candidate a row), so both give the same
// outputs, none holding it; a beam that leaves no spare candidate is refused with one line.
TEST(cuda_runtime_search, AllowUnkZeroSkipsTheUnknownTokenAsOnTheCpu) {
  XF_SKIP_WITHOUT_GPU();
  test::TinyModelOptions tiny = test::TinyModelOptions::without_tokenizer(7);
  tiny.unk_bias = 1.5f;  // the unknown token comes up in outputs
  tiny.eos_bias = 4.0f;
  tiny.metadata = {{"decoding.allow_unk", "0"}};
  const auto model = Model::open(test::tiny_model_file(tiny, "cuda-unk-not-allowed"));
  const int32_t unk = model->config().unk_id;
  const auto sources = test::random_source_ids(12, model->config().source_vocab_size, 39, 10);
  for (const int beam : {1, 4}) {
    SCOPED_TRACE("beam " + std::to_string(beam));
    TranslatorOptions options = cuda_options(4, beam, 16);
    options.device = Device::cpu;
    Translator cpu(model, options);
    options.device = Device::cuda;
    Translator gpu(model, options);
    TranslateOptions translate;
    translate.beam = beam;
    translate.disable_loop_guard = true;
    std::vector<TokenTranslation> expected, actual;
    cpu.translate_ids(sources, translate, expected);
    gpu.translate_ids(sources, translate, actual);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(actual[i].hypotheses[0].ids, expected[i].hypotheses[0].ids) << "sentence " << i;
      EXPECT_EQ(std::count(actual[i].hypotheses[0].ids.begin(), actual[i].hypotheses[0].ids.end(), unk), 0)
          << "sentence " << i;
    }
  }
  try {
    Translator gpu(model, cuda_options(2, 16, 16));
    FAIL() << "beam 16 was accepted for a model that forbids the unknown token";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("beam 16 leaves no spare top-k candidate"), std::string::npos) << e.what();
  }
}

// ---- fresh random models: long caches, top-k and the beam reorder ----------------------------

// imported: "" (xf's own graph), "marian" (swish, Marian's sinusoid, zero start embedding) or
// "hf" (gelu, sines then cosines, unscaled embeddings): the version 2 features on both backends;
// "marian_ssru" and "ssru": with SSRU decoder layers (their cell states, the beam's gather of them).
struct RandomCase {
  NormPosition norm;
  DType dtype;
  std::string imported = "";
};

std::string random_case_label(const RandomCase& c) {
  return std::string(c.norm == NormPosition::post ? "post" : "pre") + "_" + dtype_name(c.dtype) +
         (c.imported.empty() ? "" : "_" + c.imported);
}
void PrintTo(const RandomCase& c, std::ostream* out) { *out << random_case_label(c); }

class cuda_runtime_random : public ::testing::TestWithParam<RandomCase> {};

// Both backends decode the same 300 steps with random tokens, take the same top-k with random
// row offsets, and reorder their caches with the same random parents: the logits must agree at
// every step (past 256 positions the cached attention splits the keys over several blocks), and
// every top-k entry must be the CPU's log-probability of that token.
TEST_P(cuda_runtime_random, StepsTopKAndBeamReorderMatchCpu) {
  XF_SKIP_WITHOUT_GPU();
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const RandomCase c = GetParam();
  const bool f32 = c.dtype == DType::f32;
  const double tolerance = f32 ? kF32Tolerance : kF16Tolerance;

  test::TinyModelOptions model_options = test::TinyModelOptions::without_tokenizer(
      static_cast<uint32_t>(random.integer(1, 1 << 30)));
  model_options.vocab_size = 40;
  model_options.max_positions = 320;
  model_options.norm_position = c.norm;
  model_options.matrix_dtype = c.dtype;
  model_options.round_to_f16 = !f32;
  if (c.imported == "ssru" || c.imported == "marian_ssru") model_options.decoder_layer_kind = DecoderLayerKind::ssru;
  if (c.imported == "marian" || c.imported == "marian_ssru") {
    model_options.activation = Activation::swish;
    model_options.position_encoding = PositionEncoding::marian_sin_then_cos;
    model_options.zero_start_embedding = true;
  } else if (c.imported == "hf") {
    model_options.activation = Activation::gelu;
    model_options.position_encoding = PositionEncoding::sin_then_cos;
    model_options.scale_embeddings = false;
  }
  const auto model = Model::open(test::tiny_model_file(model_options, "random-" + std::to_string(model_options.seed)));
  const ModelConfig& config = model->config();

  const int64_t sentences = 3, beam = 3, rows = sentences * beam, source_len = 24, steps = 300;
  const int64_t vocab = config.target_vocab_size;
  TranslatorOptions options;
  options.max_batch = static_cast<int>(sentences);
  options.max_beam = static_cast<int>(beam);
  options.max_source_len = static_cast<int>(source_len);
  options.max_len_a = 0.0f;
  options.max_len_b = static_cast<int>(steps);
  const auto plan = runtime::make_memory_plan(config, options);
  ASSERT_EQ(plan.max_target_len, steps);
  auto cuda_backend = runtime::make_cuda_backend(*model, plan);
  auto cpu_backend = runtime::make_cpu_backend(*model, plan, 1);

  // Sentences of different lengths (EOS last), padded.
  const int32_t lengths[] = {static_cast<int32_t>(source_len), 11, 1};
  std::vector<int32_t> ids(sentences * source_len, config.pad_id);
  for (int64_t s = 0; s < sentences; ++s) {
    for (int32_t i = 0; i + 1 < lengths[s]; ++i) ids[s * source_len + i] = static_cast<int32_t>(random.integer(4, vocab - 1));
    ids[s * source_len + lengths[s] - 1] = config.eos_id;
  }
  cuda_backend->encode(ids.data(), lengths, sentences, source_len);
  cpu_backend->encode(ids.data(), lengths, sentences, source_len);

  std::vector<float> cuda_logits(rows * vocab), cpu_logits(rows * vocab);
  std::vector<float> cuda_values(rows * beam), cpu_values(rows * beam), offsets(rows);
  std::vector<int32_t> cuda_ids(rows * beam), cpu_ids(rows * beam), tokens(rows), parents(rows);
  double worst_logits = 0.0, logit_scale = 0.0;
  int bad_top_k = 0;
  for (int64_t step = 0; step < steps; ++step) {
    for (int32_t& t : tokens) t = static_cast<int32_t>(random.integer(0, vocab - 1));
    cuda_backend->decode_step(tokens.data(), beam, step);
    cpu_backend->decode_step(tokens.data(), beam, step);
    runtime::probe(*cuda_backend).copy_logits(cuda_logits.data());
    runtime::probe(*cpu_backend).copy_logits(cpu_logits.data());
    const double scale = max_abs(cpu_logits);
    logit_scale = std::max(logit_scale, scale);
    worst_logits = std::max(worst_logits, largest_difference(cuda_logits, cpu_logits, rows, vocab,
                                                             [](int64_t) { return true; }));

    for (float& o : offsets) o = random.uniform(1, -20.0f, 0.0f)[0];
    cuda_backend->top_k(offsets.data(), beam, cuda_values.data(), cuda_ids.data());
    cpu_backend->top_k(offsets.data(), beam, cpu_values.data(), cpu_ids.data());
    // log_softmax error is at most twice the logits' largest error.
    const double allowed = 2 * tolerance * scale;
    for (int64_t r = 0; r < rows; ++r) {
      double max_logit = -INFINITY, sum = 0.0;
      for (int64_t v = 0; v < vocab; ++v) max_logit = std::max(max_logit, static_cast<double>(cpu_logits[r * vocab + v]));
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(cpu_logits[r * vocab + v] - max_logit);
      const double log_sum = max_logit + std::log(sum);
      for (int64_t j = 0; j < beam; ++j) {
        const int64_t at = r * beam + j;
        const int32_t id = cuda_ids[at];
        const bool ok = id >= 0 && id < vocab &&
                        std::abs(cuda_values[at] - cpu_values[at]) <= allowed &&
                        std::abs(cuda_values[at] - (cpu_logits[r * vocab + id] - log_sum + offsets[r])) <= allowed &&
                        (j == 0 || cuda_values[at] <= cuda_values[at - 1]);
        if (!ok && bad_top_k++ < 5)
          ADD_FAILURE() << "step " << step << " row " << r << " rank " << j << ": id " << id << " value "
                        << cuda_values[at] << ", CPU has id " << cpu_ids[at] << " value " << cpu_values[at];
      }
    }

    // Each row continues from a random row of its sentence's beam.
    for (int64_t r = 0; r < rows; ++r) parents[r] = static_cast<int32_t>(r / beam * beam + random.integer(0, beam - 1));
    cuda_backend->reorder_cache(parents.data(), step);
    cpu_backend->reorder_cache(parents.data(), step);
  }
  EXPECT_LE(worst_logits, tolerance * logit_scale) << "step logits against the CPU backend";
  EXPECT_EQ(bad_top_k, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, cuda_runtime_random,
                         ::testing::Values(RandomCase{NormPosition::post, DType::f32},
                                           RandomCase{NormPosition::pre, DType::f32},
                                           RandomCase{NormPosition::post, DType::f16},
                                           RandomCase{NormPosition::pre, DType::f16},
                                           RandomCase{NormPosition::post, DType::f32, "marian"},
                                           RandomCase{NormPosition::post, DType::f16, "hf"},
                                           RandomCase{NormPosition::post, DType::f32, "marian_ssru"},
                                           RandomCase{NormPosition::pre, DType::f16, "ssru"}),
                         [](const ::testing::TestParamInfo<RandomCase>& info) {
                           return random_case_label(info.param);
                         });

// More source rows than the plan's encoder group (1024): the encoder runs over several groups of
// whole sentences, each writing its part of the encoder output and of the cross-attention K|V.
TEST(cuda_runtime_random_groups, EncoderOverSeveralGroupsAndCrossAttentionMatchCpu) {
  XF_SKIP_WITHOUT_GPU();
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  test::TinyModelOptions model_options = test::TinyModelOptions::without_tokenizer(
      static_cast<uint32_t>(random.integer(1, 1 << 30)));
  const auto model = Model::open(test::tiny_model_file(model_options, "groups"));
  const ModelConfig& config = model->config();

  const int64_t sentences = 200, source_len = 24, beam = 2, rows = sentences * beam, d = config.d_model;
  const int64_t vocab = config.target_vocab_size;
  TranslatorOptions options;
  options.max_batch = static_cast<int>(sentences);
  options.max_beam = static_cast<int>(beam);
  options.max_source_len = static_cast<int>(source_len);
  const auto plan = runtime::make_memory_plan(config, options);
  ASSERT_LT(plan.encoder_group_rows, sentences * source_len) << "the test needs several encoder groups";
  auto cuda_backend = runtime::make_cuda_backend(*model, plan);
  auto cpu_backend = runtime::make_cpu_backend(*model, plan, 1);

  std::vector<int32_t> lengths(sentences), ids(sentences * source_len, config.pad_id);
  for (int64_t s = 0; s < sentences; ++s) {
    lengths[s] = static_cast<int32_t>(random.integer(1, source_len));
    for (int32_t i = 0; i + 1 < lengths[s]; ++i)
      ids[s * source_len + i] = static_cast<int32_t>(random.integer(4, config.source_vocab_size - 1));
    ids[s * source_len + lengths[s] - 1] = config.eos_id;
  }
  cuda_backend->encode(ids.data(), lengths.data(), sentences, source_len);
  cpu_backend->encode(ids.data(), lengths.data(), sentences, source_len);
  std::vector<float> cuda_memory(sentences * source_len * d), cpu_memory(cuda_memory.size());
  runtime::probe(*cuda_backend).copy_encoder_output(cuda_memory.data());
  runtime::probe(*cpu_backend).copy_encoder_output(cpu_memory.data());
  const auto valid_position = [&](int64_t row) { return row % source_len < lengths[row / source_len]; };
  EXPECT_LE(largest_difference(cuda_memory, cpu_memory, sentences * source_len, d, valid_position),
            kF32Tolerance * max_abs(cpu_memory))
      << "encoder output against the CPU backend";

  std::vector<int32_t> tokens(rows);
  std::vector<float> cuda_logits(rows * vocab), cpu_logits(rows * vocab);
  for (int64_t step = 0; step < 2; ++step) {
    for (int32_t& t : tokens) t = static_cast<int32_t>(random.integer(0, vocab - 1));
    cuda_backend->decode_step(tokens.data(), beam, step);
    cpu_backend->decode_step(tokens.data(), beam, step);
    runtime::probe(*cuda_backend).copy_logits(cuda_logits.data());
    runtime::probe(*cpu_backend).copy_logits(cpu_logits.data());
    EXPECT_LE(largest_difference(cuda_logits, cpu_logits, rows, vocab, [](int64_t) { return true; }),
              kF32Tolerance * max_abs(cpu_logits))
        << "step " << step << " logits against the CPU backend";
  }
}

}  // namespace
}  // namespace xf
