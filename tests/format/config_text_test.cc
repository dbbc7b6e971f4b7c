// ModelConfig's text form (checkpoints' config.txt, xf-inspect): every field round trips, the
// form written before the field table still reads, and bad values are one-line errors.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "error_of.h"
#include "format_test_support.h"
#include "xf/format/config.h"

namespace xf::test {
namespace {

ModelConfig config_of(const std::map<std::string, std::string>& values) {
  return config_from_text([&](const std::string& name) -> std::optional<std::string> {
    const auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  });
}

// The message reading `values` throws ("no error" when it reads).
std::string error_of(const std::map<std::string, std::string>& values) {
  return test::error_of([&] { config_of(values); });
}

// Every field away from its default, so a field the list missed shows.
ModelConfig unusual_config() {
  ModelConfig c;
  c.source_vocab_size = 300;
  c.target_vocab_size = 200;
  c.d_model = 96;
  c.num_heads = 3;
  c.d_ff = 80;
  c.encoder_layers = 5;
  c.decoder_layers = 7;
  c.max_positions = 333;
  c.norm_position = NormPosition::pre;
  c.shared_embeddings = false;
  c.tied_output = false;
  c.output_bias = true;
  c.layer_norm_epsilon = 3.3e-7f;
  c.pad_id = 9;
  c.unk_id = 8;
  c.bos_id = 7;
  c.eos_id = 6;
  c.activation = Activation::gelu;
  c.scale_embeddings = false;
  c.position_encoding = PositionEncoding::marian_sin_then_cos;
  c.zero_start_embedding = true;
  c.decoder_layer_kind = DecoderLayerKind::ssru;
  return c;
}

TEST(FormatConfigText, EveryFieldRoundTrips) {
  const ModelConfig c = unusual_config();
  const auto text = config_to_text(c);
  const std::map<std::string, std::string> values(text.begin(), text.end());
  EXPECT_EQ(values.size(), text.size());  // no name twice
  EXPECT_EQ(values.at("norm_position"), "pre");
  EXPECT_EQ(values.at("shared_embeddings"), "0");
  EXPECT_EQ(values.at("output_bias"), "1");
  EXPECT_EQ(values.at("layer_norm_epsilon"), "3.3e-07");
  EXPECT_EQ(values.at("eos_id"), "6");
  const ModelConfig back = config_of(values);
  EXPECT_EQ(config_to_text(back), text);
  EXPECT_EQ(back.source_vocab_size, 300u);
  EXPECT_EQ(back.decoder_layers, 7u);
  EXPECT_EQ(back.layer_norm_epsilon, 3.3e-7f);
  EXPECT_EQ(back.norm_position, NormPosition::pre);
  EXPECT_FALSE(back.tied_output);
  EXPECT_EQ(back.pad_id, 9);
  EXPECT_EQ(values.at("activation"), "gelu");
  EXPECT_EQ(values.at("position_encoding"), "marian_sin_then_cos");
  EXPECT_EQ(back.activation, Activation::gelu);
  EXPECT_FALSE(back.scale_embeddings);
  EXPECT_EQ(back.position_encoding, PositionEncoding::marian_sin_then_cos);
  EXPECT_TRUE(back.zero_start_embedding);
  EXPECT_EQ(values.at("decoder_layer_kind"), "ssru");
  EXPECT_EQ(back.decoder_layer_kind, DecoderLayerKind::ssru);
  EXPECT_EQ(config_format_version(back), 3u);
  ModelConfig version_2 = back;
  version_2.decoder_layer_kind = DecoderLayerKind::self_attention;
  EXPECT_EQ(config_format_version(version_2), 2u);
  EXPECT_EQ(field_format_version("eos_id"), 1u);
  EXPECT_EQ(field_format_version("activation"), 2u);
  EXPECT_EQ(field_format_version("decoder_layer_kind"), 3u);
  EXPECT_EQ(field_format_version("no_such_field"), 0u);
  // The names are the schema's, in its order.
  EXPECT_EQ(text.front().first, "source_vocab_size");
  EXPECT_EQ(text.back().first, "decoder_layer_kind");
  EXPECT_EQ(text.size(), 22u);
}

// config.txt as checkpoints wrote it before the field table (epsilon printed with %.9g): the
// bundled model's checkpoints look like this and must still load.
TEST(FormatConfigText, ReadsTheFormWrittenBefore) {
  const std::map<std::string, std::string> old_form = {
      {"bos_id", "2"},          {"d_ff", "1024"},           {"d_model", "256"},
      {"decoder_layers", "3"},  {"encoder_layers", "3"},    {"eos_id", "3"},
      {"layer_norm_epsilon", "9.99999997e-07"},             {"max_positions", "256"},
      {"norm_position", "pre"}, {"num_heads", "4"},         {"output_bias", "0"},
      {"pad_id", "0"},          {"shared_embeddings", "1"}, {"source_vocab_size", "8000"},
      {"target_vocab_size", "8000"}, {"tied_output", "1"},  {"unk_id", "1"}};
  const ModelConfig c = config_of(old_form);
  EXPECT_EQ(c.layer_norm_epsilon, 1e-6f);
  EXPECT_EQ(c.d_model, 256u);
  EXPECT_EQ(c.num_heads, 4u);
  EXPECT_EQ(c.norm_position, NormPosition::pre);
  EXPECT_TRUE(c.shared_embeddings);
  EXPECT_EQ(c.source_vocab_size, 8000u);
  // Fields of format version 2 take their defaults; the model needs only version 1.
  EXPECT_EQ(c.activation, Activation::relu);
  EXPECT_TRUE(c.scale_embeddings);
  EXPECT_EQ(c.position_encoding, PositionEncoding::interleaved);
  EXPECT_FALSE(c.zero_start_embedding);
  EXPECT_EQ(config_format_version(c), 1u);
  // A field of version 1 stays required.
  auto without_d_ff = old_form;
  without_d_ff.erase("d_ff");
  EXPECT_EQ(error_of(without_d_ff), "missing key 'd_ff'");
}

TEST(FormatConfigText, BadValuesAreOneLineErrors) {
  const auto text = config_to_text(tiny_config());
  const std::map<std::string, std::string> good(text.begin(), text.end());
  auto with = [&](const std::string& name, const std::string& value) {
    auto values = good;
    values[name] = value;
    return error_of(values);
  };
  EXPECT_EQ(error_of(good), "no error");
  EXPECT_EQ(with("d_model", "-8"), "d_model: '-8' is not a non-negative integer");
  EXPECT_EQ(with("d_model", "8x"), "d_model: '8x' is not a non-negative integer");
  EXPECT_EQ(with("d_model", "4294967296"), "d_model is out of range");
  EXPECT_EQ(with("pad_id", ""), "pad_id: '' is not an integer");
  EXPECT_EQ(with("tied_output", "true"), "tied_output must be 0 or 1");
  EXPECT_EQ(with("norm_position", "middle"), "norm_position must be pre or post");
  EXPECT_EQ(with("activation", "tanh"), "activation must be one of relu|swish|gelu");
  EXPECT_EQ(with("position_encoding", "learned"),
            "position_encoding must be one of interleaved|sin_then_cos|marian_sin_then_cos");
  EXPECT_EQ(with("layer_norm_epsilon", "1e-6 "), "layer_norm_epsilon: '1e-6 ' is not a number");
  EXPECT_EQ(with("num_heads", "3"),
            "invalid model config: num_heads 3 does not divide d_model 8");
}

}  // namespace
}  // namespace xf::test
