// The committed golden vectors (tests/reference/golden/*.txt) parse, agree with the parameter
// list of format/, hold float32 weights, keep their outputs mutually consistent, and turn into a
// flat model file that the reader accepts; the loader refuses malformed text.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <unistd.h>

#include "golden.h"
#include "xf/format/model_file.h"

namespace xf::golden {
namespace {

std::vector<std::string> CaseNames() {
  const auto names = golden_case_names();
  EXPECT_GE(names.size(), 2u) << "expected the post-norm and pre-norm cases in " XF_GOLDEN_DIR;
  return names;
}

std::vector<uint64_t> Shape(std::initializer_list<uint64_t> dims) { return dims; }

TEST(GoldenSelfcheck, EveryCaseHoldsExactlyTheParametersAndGradientsOfItsConfig) {
  for (const std::string& name : CaseNames()) {
    SCOPED_TRACE(name);
    const GoldenFile file = load_golden(golden_path(name));
    const ModelConfig config = golden_config(file);  // validates
    std::set<std::string> expected;
    for (const ParameterSpec& spec : transformer_parameters(config)) {
      for (const char* prefix : {"param.", "grad."}) {
        const std::string key = prefix + spec.name;
        expected.insert(key);
        ASSERT_TRUE(file.count(key)) << key;
        EXPECT_EQ(file.at(key).shape, spec.shape) << key;
        EXPECT_EQ(file.at(key).dtype, prefix == std::string("param.") ? "f32" : "f64") << key;
      }
    }
    for (const auto& [key, tensor] : file) {
      if (key.rfind("param.", 0) == 0 || key.rfind("grad.", 0) == 0) {
        EXPECT_TRUE(expected.count(key)) << "unexpected " << key;
      }
    }
  }
}

TEST(GoldenSelfcheck, WeightsAreExactFloat32Values) {
  for (const std::string& name : CaseNames()) {
    SCOPED_TRACE(name);
    const GoldenFile file = load_golden(golden_path(name));
    for (const ParameterSpec& spec : transformer_parameters(golden_config(file))) {
      for (double v : file.at("param." + spec.name).values) {
        ASSERT_EQ(static_cast<double>(static_cast<float>(v)), v) << spec.name;
      }
    }
  }
}

TEST(GoldenSelfcheck, OutputShapesAndTokenIdsAgreeWithTheConfig) {
  for (const std::string& name : CaseNames()) {
    SCOPED_TRACE(name);
    const GoldenFile file = load_golden(golden_path(name));
    const ModelConfig c = golden_config(file);
    const GoldenTensor& source = golden_at(file, "source.ids");
    const GoldenTensor& target_in = golden_at(file, "target_in.ids");
    ASSERT_EQ(source.shape.size(), 2u);
    ASSERT_EQ(target_in.shape.size(), 2u);
    const uint64_t batch = source.shape[0], src_len = source.shape[1], tgt_len = target_in.shape[1];
    EXPECT_EQ(golden_at(file, "encoder.output").shape, Shape({batch, src_len, c.d_model}));
    EXPECT_EQ(golden_at(file, "decoder.logits").shape,
              Shape({batch, tgt_len, c.target_vocab_size}));
    EXPECT_EQ(golden_at(file, "target_out.ids").shape, target_in.shape);

    // Sources end with EOS; decoder inputs start with BOS; targets out end with EOS.
    const auto sources = golden_rows(file, "source.ids", "source.lengths");
    const auto inputs = golden_rows(file, "target_in.ids", "target.lengths");
    const auto outputs = golden_rows(file, "target_out.ids", "target.lengths");
    ASSERT_EQ(sources.size(), batch);
    for (uint64_t b = 0; b < batch; ++b) {
      EXPECT_EQ(sources[b].back(), c.eos_id);
      EXPECT_EQ(inputs[b].front(), c.bos_id);
      EXPECT_EQ(outputs[b].back(), c.eos_id);
      for (int32_t id : sources[b]) EXPECT_LT(static_cast<uint32_t>(id), c.source_vocab_size);
      for (int32_t id : outputs[b]) EXPECT_LT(static_cast<uint32_t>(id), c.target_vocab_size);
    }

    const GoldenTensor& max_length = golden_at(file, "decode.max_length");
    const auto greedy = golden_rows(file, "greedy.ids", "greedy.lengths");
    ASSERT_EQ(greedy.size(), batch);
    for (uint64_t b = 0; b < batch; ++b) {
      EXPECT_EQ(max_length.integer(b), static_cast<int64_t>(sources[b].size()) + 50);
      EXPECT_LE(greedy[b].size(), static_cast<size_t>(max_length.integer(b)));
      for (int32_t id : greedy[b]) {
        EXPECT_LT(static_cast<uint32_t>(id), c.target_vocab_size);
        EXPECT_NE(id, c.eos_id);  // outputs exclude EOS
      }
    }
    for (const char* beam : {"beam4.", "beam4_max3."}) {
      const GoldenTensor& scores = golden_at(file, std::string(beam) + "nbest.scores");
      const auto nbest = golden_rows(file, std::string(beam) + "nbest.ids",
                                     std::string(beam) + "nbest.lengths");
      ASSERT_EQ(scores.shape.size(), 2u);
      ASSERT_EQ(scores.shape[0], batch);
      ASSERT_EQ(nbest.size(), scores.size());
      for (uint64_t b = 0; b < batch; ++b) {
        for (uint64_t n = 1; n < scores.shape[1]; ++n) {
          EXPECT_GE(scores.values[b * scores.shape[1] + n - 1],
                    scores.values[b * scores.shape[1] + n]) << beam << " best first";
        }
      }
    }
  }
}

// Recomputes the loss from the stored logits with README's definition: the file's loss, its
// logits and its targets must agree (and this is the definition the trainer matches).
TEST(GoldenSelfcheck, LossIsTheLabelSmoothedCrossEntropyOfTheStoredLogits) {
  for (const std::string& name : CaseNames()) {
    SCOPED_TRACE(name);
    const GoldenFile file = load_golden(golden_path(name));
    const ModelConfig c = golden_config(file);
    const GoldenTensor& logits = golden_at(file, "decoder.logits");  // [batch, tgt_len, vocab]
    const GoldenTensor& target = golden_at(file, "target_out.ids");  // [batch, tgt_len]
    const double eps = golden_at(file, "loss.label_smoothing").scalar();
    const uint64_t vocab = logits.shape[2];
    double sum = 0;
    int64_t tokens = 0;
    for (size_t row = 0; row < target.size(); ++row) {
      const int64_t gold = target.integer(row);
      if (gold == c.pad_id) continue;
      const double* z = logits.values.data() + row * vocab;
      double max_z = z[0];
      for (uint64_t v = 1; v < vocab; ++v) max_z = std::max(max_z, z[v]);
      double total = 0;
      for (uint64_t v = 0; v < vocab; ++v) total += std::exp(z[v] - max_z);
      const double log_total = max_z + std::log(total);
      double smooth = 0;  // -sum_v log p(v)
      for (uint64_t v = 0; v < vocab; ++v) smooth -= z[v] - log_total;
      sum += (1 - eps) * -(z[gold] - log_total) + eps / vocab * smooth;
      ++tokens;
    }
    EXPECT_EQ(golden_at(file, "loss.tokens").integer(0), tokens);
    const double expected = golden_at(file, "loss.sum").scalar();
    EXPECT_NEAR(sum, expected, 1e-12 * std::fabs(expected));
    EXPECT_NEAR(golden_at(file, "loss.mean").scalar(), expected / tokens, 1e-15 * expected);
  }
}

TEST(GoldenSelfcheck, WrittenModelFileHoldsTheGoldenWeights) {
  for (const std::string& name : CaseNames()) {
    SCOPED_TRACE(name);
    const GoldenFile file = load_golden(golden_path(name));
    const std::string path = std::string(XF_BINARY_DIR) + "/golden_selfcheck_" + name + "_" +
                             std::to_string(getpid()) + ".xfm";
    write_golden_model(file, path);
    const auto model = ModelFile::open(path);
    std::remove(path.c_str());
    const ModelConfig c = golden_config(file);
    EXPECT_EQ(model->config().d_model, c.d_model);
    EXPECT_EQ(model->config().norm_position, c.norm_position);
    EXPECT_EQ(model->config().layer_norm_epsilon, c.layer_norm_epsilon);
    const auto specs = transformer_parameters(c);
    ASSERT_EQ(model->tensors().size(), specs.size());
    for (const ParameterSpec& spec : specs) {
      const TensorView& view = model->tensor(spec.name);
      ASSERT_EQ(view.dtype, DType::f32);
      const auto* data = static_cast<const float*>(view.data);
      const auto& values = file.at("param." + spec.name).values;
      ASSERT_EQ(view.elements(), values.size());
      for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(data[i], values[i]) << spec.name;
    }
  }
}

TEST(GoldenSelfcheck, ParameterBufferFollowsTheParameterListOrder) {
  const GoldenFile file = load_golden(golden_path(CaseNames().front()));
  const auto specs = transformer_parameters(golden_config(file));
  const std::vector<double> buffer = golden_parameter_buffer(file, "grad.");
  size_t offset = 0;
  for (const ParameterSpec& spec : specs) {
    const auto& values = file.at("grad." + spec.name).values;
    ASSERT_LE(offset + values.size(), buffer.size());
    EXPECT_EQ(buffer[offset], values.front()) << spec.name;
    EXPECT_EQ(buffer[offset + values.size() - 1], values.back()) << spec.name;
    offset += values.size();
  }
  EXPECT_EQ(offset, buffer.size());
}

void ExpectParseError(const std::string& text, const std::string& fragment) {
  try {
    parse_golden(text, "case.txt");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(GoldenLoader, ParsesScalarsAndTensors) {
  const GoldenFile file = parse_golden(
      "xf-golden 1\nseed i64 0\n7\nw f64 2 2 3\n1 2.5 -3\n4e-2 5 6\nempty i64 1 0\n\n"
      "x f32 1 1\n0.1\n",
      "t");
  ASSERT_EQ(file.size(), 4u);
  EXPECT_EQ(file.at("x").values[0], static_cast<double>(0.1f));
  EXPECT_EQ(file.at("seed").scalar(), 7);
  EXPECT_EQ(file.at("w").shape, Shape({2, 3}));
  EXPECT_EQ(file.at("w").values, (std::vector<double>{1, 2.5, -3, 0.04, 5, 6}));
  EXPECT_EQ(file.at("empty").size(), 0u);
}

TEST(GoldenLoader, RefusesMalformedTextNamingTheLine) {
  ExpectParseError("", "case.txt:1: not an xf golden file");
  ExpectParseError("xf-golden 2\n", "unsupported golden format version");
  ExpectParseError("xf-golden 1\nw f16 1 2\n1 2\n", "case.txt:2: tensor 'w': bad dtype 'f16'");
  ExpectParseError("xf-golden 1\nw f32 0\n1e60\n", "tensor 'w': bad value '1e60'");
  ExpectParseError("xf-golden 1\nw f64 1 3\n1 2\n", "tensor 'w': 3 values expected, 2 found");
  ExpectParseError("xf-golden 1\nw f64 1 2\n1 x\n", "case.txt:3: tensor 'w': bad value 'x'");
  ExpectParseError("xf-golden 1\nw i64 1 2\n1 2.5\n", "'2.5' is not an integer");
  ExpectParseError("xf-golden 1\nw f64 1 -2\n", "bad dimension '-2'");
  ExpectParseError("xf-golden 1\nw f64 0\n1\nw f64 0\n2\n", "case.txt:4: tensor 'w' appears twice");
}

}  // namespace
}  // namespace xf::golden
