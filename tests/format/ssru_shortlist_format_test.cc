// Format version 3's SSRU decoder layers and the lexical shortlists (stored in a model, or in
// Marian's text and binary files).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "error_of.h"
#include "format_test_support.h"
#include "xf/format/model_file.h"
#include "xf/format/model_writer.h"
#include "xf/format/parameters.h"
#include "xf/format/schema.h"
#include "xf/format/shortlist.h"

namespace xf::test {
namespace {

ModelConfig ssru_config() {
  ModelConfig c = tiny_config();
  c.decoder_layer_kind = DecoderLayerKind::ssru;
  c.decoder_layers = 2;
  return c;
}

std::vector<uint64_t> shape_of(const ModelConfig& c, const std::string& name) {
  for (const ParameterSpec& spec : transformer_parameters(c))
    if (spec.name == name) return spec.shape;
  return {};
}

TEST(FormatSsru, DecoderLayersHoldTheCellInPlaceOfSelfAttention) {
  const ModelConfig c = ssru_config();
  const uint64_t d = c.d_model;
  EXPECT_EQ(shape_of(c, "decoder.layers.1.ssru.input_forget.weight"), (std::vector<uint64_t>{2 * d, d}));
  EXPECT_EQ(shape_of(c, "decoder.layers.1.ssru.input_forget.bias"), (std::vector<uint64_t>{2 * d}));
  EXPECT_EQ(shape_of(c, "decoder.layers.0.ssru_norm.gamma"), (std::vector<uint64_t>{d}));
  EXPECT_EQ(shape_of(c, "decoder.layers.0.cross_attention.key_value.weight"), (std::vector<uint64_t>{2 * d, d}));
  EXPECT_TRUE(shape_of(c, "decoder.layers.0.self_attention.qkv.weight").empty());
  // The encoder keeps its self-attention.
  EXPECT_FALSE(shape_of(c, "encoder.layers.0.self_attention.qkv.weight").empty());
  ModelConfig attention = c;
  attention.decoder_layer_kind = DecoderLayerKind::self_attention;
  // Per decoder layer: qkv, output, norm (6 tensors) become input_forget and norm (4).
  EXPECT_EQ(transformer_parameters(attention).size() - transformer_parameters(c).size(), 2u * c.decoder_layers);
}

TEST(FormatSsru, RoundTripsAsVersion3AndOldFilesStayAtTheirVersion) {
  const std::string dir = make_temp_dir("ssru_format");
  const ModelConfig c = ssru_config();
  write_bytes(dir + "/ssru.xfm", valid_model_bytes(c, DType::f32, 5));
  auto file = ModelFile::open(dir + "/ssru.xfm");
  EXPECT_EQ(file->format_version(), 3u);
  EXPECT_EQ(file->config().decoder_layer_kind, DecoderLayerKind::ssru);
  EXPECT_NE(file->find("decoder.layers.0.ssru.input_forget.weight"), nullptr);
  // The paper's config is still written as version 1, with no shortlist.
  write_bytes(dir + "/paper.xfm", valid_model_bytes(tiny_config(), DType::f32, 5));
  auto paper = ModelFile::open(dir + "/paper.xfm");
  EXPECT_EQ(paper->format_version(), 1u);
  EXPECT_EQ(paper->config().decoder_layer_kind, DecoderLayerKind::self_attention);
  EXPECT_FALSE(paper->shortlist().has_value());
}

TEST(FormatSsru, AFileMissingTheCellIsRefusedByName) {
  ModelWriter writer(ssru_config());
  add_parameters(writer, random_parameters(tiny_config(), DType::f32, 3));  // self-attention's tensors
  EXPECT_EQ(error_of([&] { writer.serialize(); }), "missing tensor 'decoder.layers.0.ssru.input_forget.weight'");
}

LexicalShortlist small_shortlist() {
  LexicalShortlist s;  // tiny_config: 12 ids each side
  s.first_num = 4;
  s.best_num = 3;
  s.offsets = {0, 0, 2, 2, 5};  // source 1 -> {6, 9}; source 3 -> {4, 7, 11}
  s.targets = {6, 9, 4, 7, 11};
  return s;
}

TEST(FormatShortlist, StoredInAModelRoundTrips) {
  ModelWriter writer(tiny_config());
  add_parameters(writer, random_parameters(tiny_config(), DType::f32, 3));
  writer.set_shortlist(small_shortlist());
  const std::vector<uint8_t> bytes = writer.serialize();
  auto file = ModelFile::copy_from_memory(bytes.data(), bytes.size(), "m");
  ASSERT_TRUE(file->shortlist().has_value());
  EXPECT_EQ(file->shortlist()->first_num, 4u);
  EXPECT_EQ(file->shortlist()->best_num, 3u);
  EXPECT_EQ(file->shortlist()->offsets, small_shortlist().offsets);
  EXPECT_EQ(file->shortlist()->targets, small_shortlist().targets);
  EXPECT_EQ(file->format_version(), 1u);  // optional: no version bump
}

TEST(FormatShortlist, BadListsAreRefusedWithTheProblem) {
  struct Case {
    void (*change)(LexicalShortlist&);
    const char* message;
  };
  const Case cases[] = {
      {[](LexicalShortlist& s) { s.targets[1] = 12; },
       "invalid shortlist target id 12 of source id 1 is outside the target vocabulary (12)"},
      {[](LexicalShortlist& s) { s.offsets.back() = 4; }, "invalid shortlist offsets end at 4, it has 5 targets"},
      {[](LexicalShortlist& s) { s.offsets[2] = 1; s.offsets[3] = 0; },
       "invalid shortlist offset 3 is below the one before it"},
      {[](LexicalShortlist& s) { std::swap(s.targets[2], s.targets[3]); },
       "invalid shortlist targets of source id 3 are not strictly ascending"},
      {[](LexicalShortlist& s) { s.offsets.assign(14, 0); s.targets.clear(); },
       "invalid shortlist has 14 offsets, the source vocabulary needs at most 13"},
  };
  for (const Case& c : cases) {
    LexicalShortlist s = small_shortlist();
    c.change(s);
    ModelWriter writer(tiny_config());
    add_parameters(writer, random_parameters(tiny_config(), DType::f32, 3));
    writer.set_shortlist(s);
    EXPECT_EQ(error_of([&] { writer.serialize(); }), c.message);
  }
}

TEST(FormatShortlist, BinaryFormRoundTripsAndRefusesCorruption) {
  const std::string dir = make_temp_dir("shortlist_binary");
  const std::string path = dir + "/lex.s2t.bin";
  std::vector<uint8_t> bytes = binary_shortlist_bytes(small_shortlist());
  // Marian's layout: six u64, the offsets, the u32 targets.
  ASSERT_EQ(bytes.size(), 6 * 8 + 5 * 8 + 5 * 4u);
  write_bytes(path, bytes);
  EXPECT_TRUE(is_binary_shortlist(path));
  const LexicalShortlist back = read_binary_shortlist(path);
  EXPECT_EQ(back.first_num, 4u);
  EXPECT_EQ(back.best_num, 3u);
  EXPECT_EQ(back.offsets, small_shortlist().offsets);
  EXPECT_EQ(back.targets, small_shortlist().targets);

  std::vector<uint8_t> flipped = bytes;
  flipped[6 * 8 + 3] ^= 1;  // an offset
  write_bytes(path, flipped);
  EXPECT_EQ(error_of([&] { read_binary_shortlist(path); }), path + ": shortlist checksum mismatch (corrupt file)");
  write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.end() - 4));
  EXPECT_EQ(error_of([&] { read_binary_shortlist(path); }),
            path + ": the header's 5 offsets and 5 targets disagree with the file's 104 bytes");
  write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 20));
  EXPECT_EQ(error_of([&] { read_binary_shortlist(path); }),
            path + ": truncated: 20 bytes is too short for a shortlist header");
  std::vector<uint8_t> text(bytes.size(), 'a');
  write_bytes(path, text);
  EXPECT_FALSE(is_binary_shortlist(path));
  EXPECT_EQ(error_of([&] { read_binary_shortlist(path); }), path + ": not a binary shortlist (wrong magic)");
}

TEST(FormatShortlist, TextFormIsPrunedAsMarianPrunesIt) {
  const std::string dir = make_temp_dir("shortlist_text");
  const std::string path = dir + "/lex.s2t";
  // Pieces "w<id>"; an unknown piece is id 1 (unk).
  auto id_of = [](std::string_view piece) -> uint32_t {
    if (piece.size() < 2 || piece[0] != 'w') return 1;
    return static_cast<uint32_t>(std::stoul(std::string(piece.substr(1))));
  };
  {
    std::ofstream out(path);
    out << "w5 w2 0.5\n"
           "w6 w2 0.25\n"
           "w7 w2 0.25\n"  // ties with w6: the higher id goes first
           "w8 w2 0.125\n"
           "w9 w2 0.75\n"
           "w9 w2 0.0625\n"  // given twice: the last probability counts
           "NULL w2 0.9\n"
           "w4 NULL 0.9\n"
           "\n"
           "w10 w3 0\n"   // not above the threshold 0
           "w11 w3 1\n"
           "w4 zzz 0.5\n";  // an unknown source piece: unk's candidates
  }
  TextShortlistOptions options;
  options.first_num = 2;
  options.best_num = 2;
  const LexicalShortlist s = read_text_shortlist(path, id_of, id_of, 12, options);
  EXPECT_EQ(s.first_num, 2u);
  EXPECT_EQ(s.best_num, 2u);
  ASSERT_EQ(s.offsets.size(), 13u);
  auto candidates = [&](uint32_t source) {
    return std::vector<uint32_t>(s.targets.begin() + s.offsets[source], s.targets.begin() + s.offsets[source + 1]);
  };
  EXPECT_EQ(candidates(2), (std::vector<uint32_t>{5, 7}));  // 0.5, then 0.25 of w7 before w6's
  EXPECT_EQ(candidates(3), (std::vector<uint32_t>{11}));
  EXPECT_EQ(candidates(1), (std::vector<uint32_t>{4}));
  EXPECT_TRUE(candidates(0).empty());
  EXPECT_NO_THROW(check_shortlist(s, 12, 12));
  options.threshold = 0.3f;
  EXPECT_EQ(read_text_shortlist(path, id_of, id_of, 12, options).targets, (std::vector<uint32_t>{4, 5, 11}));

  {
    std::ofstream out(path);
    out << "w5 w2 0.5\nw6 w2 half\n";
  }
  EXPECT_EQ(error_of([&] { read_text_shortlist(path, id_of, id_of, 12, options); }),
            path + ":2: expected 'target source probability', got 'w6 w2 half'");
  EXPECT_EQ(error_of([&] { read_text_shortlist(dir + "/absent", id_of, id_of, 12, options); }),
            dir + "/absent: cannot open: No such file or directory");
}

}  // namespace
}  // namespace xf::test
