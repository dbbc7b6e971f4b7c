// xf-convert on model files and checkpoints whose tokenizer is garbage or does not match the
// vocabulary (refused in one line before anything is written), on a pruned model file (another
// dtype keeps its own target vocabulary), and xf-bench naming the weight matrices' dtype.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "run_command.h"
#include "tiny_model.h"
#include "xf/format/model_file.h"
#include "xf/format/parameters.h"
#include "xf/kernels/matmul.h"  // kernel_weight_layout
#include "xf/trainer/checkpoint.h"
#include "xf/trainer/data.h"

namespace {
namespace fs = std::filesystem;

using Result = xf::test::CommandRun;
using xf::test::last_line;

class ModelFiles : public ::testing::Test {
 protected:
  Result run(const std::string& command) const { return xf::test::run_command(command, dir_); }
  // The tiny model as a checkpoint (config, f32 parameters, tokenizer).
  xf::trainer::Checkpoint tiny_checkpoint() const {
    const std::string path = dir_ + "/tiny.xfm";
    xf::test::write_tiny_model(path);
    return xf::trainer::checkpoint_from_model_file(*xf::ModelFile::open(path));
  }

  std::string dir_ = xf::test::make_temp_dir("model_files");
};

TEST_F(ModelFiles, XfConvertRefusesATokenizerThatDoesNotLoadOrDoesNotMatch) {
  xf::trainer::Checkpoint garbage = tiny_checkpoint();
  for (size_t i = 0; i < garbage.tokenizer_model.size(); i += 7) garbage.tokenizer_model[i] ^= 0x5a;
  const std::string garbage_file = dir_ + "/garbage.xfm";
  xf::trainer::write_model_file(garbage, xf::DType::f32, {}, garbage_file);  // the library writes what it is given
  const std::string out = dir_ + "/out.xfm";
  const Result from_file = run(std::string(XF_CONVERT) + " " + garbage_file + " -o " + out);
  EXPECT_EQ(from_file.status, 1);
  EXPECT_EQ(last_line(from_file.err).rfind("xf-convert: " + garbage_file +
                                               ": source tokenizer: cannot load the SentencePiece model: ", 0),
            0u) << from_file.err;
  EXPECT_FALSE(fs::exists(out));

  // A checkpoint directory with garbage in its sentencepiece.model.
  garbage.adam.first_moment.assign(garbage.parameters.size(), 0.0f);
  garbage.adam.second_moment.assign(garbage.parameters.size(), 0.0f);
  const std::string checkpoint = dir_ + "/step-000001";
  xf::trainer::write_checkpoint(checkpoint, garbage);
  const Result from_checkpoint = run(std::string(XF_CONVERT) + " " + checkpoint + " -o " + out);
  EXPECT_EQ(from_checkpoint.status, 1);
  EXPECT_EQ(last_line(from_checkpoint.err)
                .rfind("xf-convert: " + checkpoint + ": source tokenizer: cannot load the SentencePiece model: ", 0),
            0u) << from_checkpoint.err;
  EXPECT_FALSE(fs::exists(out));

  // A tokenizer of other size than the vocabulary: the tiny one's first 20 pieces.
  xf::trainer::Checkpoint fewer = tiny_checkpoint();
  std::vector<int32_t> kept;
  for (int32_t id = 0; id < 20; ++id) kept.push_back(id);
  fewer.tokenizer_model = xf::trainer::sentencepiece_model_subset(fewer.tokenizer_model, kept);
  const std::string fewer_file = dir_ + "/fewer.xfm";
  xf::trainer::write_model_file(fewer, xf::DType::f32, {}, fewer_file);
  const Result count = run(std::string(XF_CONVERT) + " " + fewer_file + " -o " + out);
  EXPECT_EQ(count.status, 1);
  EXPECT_EQ(last_line(count.err), "xf-convert: " + fewer_file +
                                      ": source tokenizer: the SentencePiece model has 20 pieces but the vocabulary has " +
                                      std::to_string(fewer.config.source_vocab_size) + "\n");
  EXPECT_FALSE(fs::exists(out));
}

// A checkpoint whose sentencepiece.model is empty or a directory: refused in one line, as a
// missing one is (it converted into a model without a tokenizer, exit 0).
TEST_F(ModelFiles, XfConvertRefusesACheckpointWhoseTokenizerIsEmptyOrADirectory) {
  xf::trainer::Checkpoint checkpoint = tiny_checkpoint();
  checkpoint.adam.first_moment.assign(checkpoint.parameters.size(), 0.0f);
  checkpoint.adam.second_moment.assign(checkpoint.parameters.size(), 0.0f);
  const std::string out = dir_ + "/out.xfm";
  for (const bool directory : {false, true}) {
    const std::string path = dir_ + (directory ? "/step-000002" : "/step-000001");
    xf::trainer::write_checkpoint(path, checkpoint);
    const std::string tokenizer = path + "/sentencepiece.model";
    if (directory) {
      fs::remove(tokenizer);
      fs::create_directory(tokenizer);
    } else {
      std::ofstream(tokenizer, std::ios::trunc);
    }
    const Result result = run(std::string(XF_CONVERT) + " " + path + " -o " + out);
    EXPECT_EQ(result.status, 1) << result.err;
    EXPECT_EQ(last_line(result.err), "xf-convert: " + tokenizer +
                              (directory ? ": is a directory, not a file\n"
                                         : ": empty (a checkpoint holds its SentencePiece model)\n"));
    EXPECT_FALSE(fs::exists(out));
  }
}

// A model file pruned by --target-vocabulary-from, rewritten in another dtype: the same config,
// the same target tokenizer, the same weights (f32 to f32 exactly).
TEST_F(ModelFiles, XfConvertRewritesAPrunedModelFileInAnotherDtype) {
  const xf::trainer::Checkpoint full = tiny_checkpoint();
  std::vector<int32_t> kept;
  for (int32_t id = 0; id < static_cast<int32_t>(full.config.target_vocab_size); id += 2) kept.push_back(id);
  for (int32_t special : {1, 3}) kept.insert(std::lower_bound(kept.begin(), kept.end(), special), special);
  const xf::trainer::PrunedModel pruned = xf::trainer::prune_target_vocabulary(full, kept);
  const std::string pruned_file = dir_ + "/pruned.xfm";
  xf::trainer::write_model_file(pruned.checkpoint, xf::DType::int8, {{"note", "kept"}}, pruned_file,
                                pruned.target_tokenizer);
  for (const std::string dtype : {"f32", "f16"}) {
    const std::string out = dir_ + "/pruned-" + dtype + ".xfm";
    const Result r = run(std::string(XF_CONVERT) + " " + pruned_file + " -o " + out + " --dtype " + dtype);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto before = xf::ModelFile::open(pruned_file), after = xf::ModelFile::open(out);
    EXPECT_EQ(xf::config_to_text(after->config()), xf::config_to_text(before->config()));
    EXPECT_EQ(after->target_tokenizer(), before->target_tokenizer());
    EXPECT_NE(after->target_tokenizer(), after->source_tokenizer());
    EXPECT_EQ(after->metadata_value("note"), "kept");
    EXPECT_EQ(after->tensor("output.weight").dtype == xf::DType::f32 ? "f32" : "f16", dtype);
    if (dtype == "f32") {
      EXPECT_EQ(xf::trainer::parameters_from_model_file(*after), xf::trainer::parameters_from_model_file(*before));
    }
  }
}

// xf-convert --layout panels writes each layer's matrices in the layout this machine's products
// read (cpu::kernel_weight_layout; format version 4), the tables in rows; xf-inspect says "in
// panels" (or the 7-bit layout's name) for them; --layout rows writes rows again from that file,
// the same values (for the lossless int8 and f32 panels, the original file's; for 7-bit ones the
// halved values with doubled scales).
TEST_F(ModelFiles, XfConvertLaysTheLayersOutInPanelsAndBack) {
  const std::string original = dir_ + "/tiny.xfm";
  xf::test::write_tiny_model(original);
  for (const std::string dtype : {"int8", "f32"}) {
    SCOPED_TRACE(dtype);
    const std::string rows = dir_ + "/rows-" + dtype + ".xfm", panels = dir_ + "/panels-" + dtype + ".xfm",
                      back = dir_ + "/back-" + dtype + ".xfm";
    // Back in f32: the values the panels file holds, exactly (a 7-bit file's requantized to int8
    // would be another model, its halved values at full range).
    for (const auto& [from, to, layout, to_dtype] :
         {std::tuple{original, rows, "rows", dtype}, std::tuple{rows, panels, "panels", dtype},
          std::tuple{panels, back, "rows", std::string("f32")}}) {
      const Result r = run(std::string(XF_CONVERT) + " " + from + " -o " + to + " --dtype " + to_dtype + " --layout " + layout);
      ASSERT_EQ(r.status, 0) << r.err;
    }
    const xf::DType stored = xf::parse_dtype(dtype);
    const xf::WeightLayout expected = xf::cpu::kernel_weight_layout(stored);
    const auto in_rows = xf::ModelFile::open(rows), in_panels = xf::ModelFile::open(panels), rows_again = xf::ModelFile::open(back);
    EXPECT_EQ(in_panels->format_version(), expected == xf::WeightLayout::rows ? in_rows->format_version() : 4u);
    EXPECT_LT(rows_again->format_version(), 4u);
    const Result inspect = run(std::string(XF_INSPECT) + " " + panels);
    ASSERT_EQ(inspect.status, 0) << inspect.err;
    for (const xf::TensorView& t : in_panels->tensors()) {
      const std::string name(t.name);
      const bool layer_matrix = t.rank == 2 && (name.rfind("encoder.layers.", 0) == 0 || name.rfind("decoder.layers.", 0) == 0);
      EXPECT_EQ(t.layout, layer_matrix ? expected : xf::WeightLayout::rows) << name;
      const bool said = inspect.out.find(std::to_string(t.bytes) + " in " + xf::weight_layout_name(t.layout) + "\n") !=
                        std::string::npos;
      if (t.layout != xf::WeightLayout::rows) {
        EXPECT_TRUE(said) << name << "\n" << inspect.out;
      }
      EXPECT_EQ(rows_again->tensor(name).layout, xf::WeightLayout::rows);
    }
    EXPECT_EQ(xf::trainer::parameters_from_model_file(*rows_again), xf::trainer::parameters_from_model_file(*in_panels));
    if (!xf::in_seven_bits(expected)) {
      EXPECT_EQ(xf::trainer::parameters_from_model_file(*in_panels), xf::trainer::parameters_from_model_file(*in_rows));
    }
  }
}

// A model with a stored shortlist is not rewritten without it: xf-convert refuses it by name.
TEST_F(ModelFiles, XfConvertRefusesToDropAStoredShortlist) {
  xf::test::TinyModelOptions options;
  xf::LexicalShortlist lists;
  lists.first_num = 4;
  options.shortlist = lists;
  const std::string with_shortlist = dir_ + "/shortlisted.xfm";
  xf::test::write_tiny_model(with_shortlist, options);
  const Result r = run(std::string(XF_CONVERT) + " " + with_shortlist + " -o " + dir_ + "/out.xfm --dtype f32");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find(with_shortlist + ": a model with a stored lexical shortlist cannot be trained or rewritten"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/out.xfm"));
}

// xf-convert FILE CHECKPOINT --weights 1,3: a model file among the inputs (the weights a run
// started from) and a weighted mean, (1 file + 3 checkpoint) / 4 element by element, the
// weights in the metadata; a count that does not match the inputs is refused in one line.
TEST_F(ModelFiles, XfConvertInterpolatesAModelFileAndACheckpointByWeight) {
  const xf::trainer::Checkpoint start = tiny_checkpoint();  // writes dir_/tiny.xfm
  xf::trainer::Checkpoint trained = start;
  for (size_t i = 0; i < trained.parameters.size(); ++i) trained.parameters[i] += 0.25f * static_cast<float>(i % 7) - 0.5f;
  trained.adam.first_moment.assign(trained.parameters.size(), 0.0f);
  trained.adam.second_moment.assign(trained.parameters.size(), 0.0f);
  trained.progress.step = 40;
  const std::string checkpoint = dir_ + "/step-000040";
  xf::trainer::write_checkpoint(checkpoint, trained);
  const std::string out = dir_ + "/soup.xfm";
  const Result r = run(std::string(XF_CONVERT) + " " + dir_ + "/tiny.xfm " + checkpoint + " --weights 1,3 -o " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto soup = xf::ModelFile::open(out);
  const std::vector<float> mixed = xf::trainer::parameters_from_model_file(*soup);
  ASSERT_EQ(mixed.size(), start.parameters.size());
  for (size_t i = 0; i < mixed.size(); ++i) {
    ASSERT_EQ(mixed[i], static_cast<float>((1.0 * start.parameters[i] + 3.0 * trained.parameters[i]) / 4.0)) << i;
  }
  EXPECT_EQ(soup->metadata_value("training.weights"), "1,3");
  EXPECT_EQ(soup->metadata_value("training.steps"), "40");  // the newest input's bookkeeping

  const Result miscounted = run(std::string(XF_CONVERT) + " " + dir_ + "/tiny.xfm " + checkpoint +
                                " --weights 1,2,3 -o " + dir_ + "/bad.xfm");
  EXPECT_EQ(miscounted.status, 2);
  EXPECT_EQ(last_line(miscounted.err), "xf-convert: --weights: 3 given for 2 inputs (one per input)\n");
  EXPECT_FALSE(fs::exists(dir_ + "/bad.xfm"));
}

// README's own example, where the checkout has the bundled (pruned) model.
TEST_F(ModelFiles, XfConvertRewritesTheBundledModelInF32) {
  const std::string bundled = std::string(XF_SOURCE_DIR) + "/models/enfr.xfm";
  if (!fs::exists(bundled)) GTEST_SKIP() << "no bundled model in this checkout";
  const std::string out = dir_ + "/enfr-f32.xfm";
  const Result r = run(std::string(XF_CONVERT) + " " + bundled + " -o " + out + " --dtype f32");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto before = xf::ModelFile::open(bundled), after = xf::ModelFile::open(out);
  EXPECT_EQ(xf::config_to_text(after->config()), xf::config_to_text(before->config()));
  EXPECT_EQ(after->target_tokenizer(), before->target_tokenizer());
  EXPECT_EQ(after->tensor(xf::param::target_embedding(after->config())).dtype, xf::DType::f32);
}

// xf-bench names the dtype its weight matrices have (biases and LayerNorm stay f32 in every
// file, so the first tensor says nothing), and what --dtype converts them to.
TEST_F(ModelFiles, XfBenchNamesTheWeightMatricesDtype) {
  const std::string model = dir_ + "/int8.xfm";
  xf::test::TinyModelOptions options;
  options.matrix_dtype = xf::DType::int8;
  xf::test::write_tiny_model(model, options);
  const std::string input = dir_ + "/input.txt";
  {
    std::ofstream in(input);
    for (const auto& line : xf::test::sample_sentences(4, 2)) in << line << "\n";
  }
  const std::string bench = std::string(XF_BENCH) + " --model " + model + " --input " + input + " --beam 1";
  const Result stored = run(bench + " --json");
  ASSERT_EQ(stored.status, 0) << stored.err;
  EXPECT_NE(stored.out.find("\"model_dtype\": \"int8\""), std::string::npos) << stored.out;
  const Result text = run(bench);
  EXPECT_EQ(text.out.rfind("model        " + model + " (int8, ", 0), 0u) << text.out;
  const Result converted = run(bench + " --json --dtype f32");
  ASSERT_EQ(converted.status, 0) << converted.err;
  EXPECT_NE(converted.out.find("\"model_dtype\": \"f32 (converted at load from int8)\""), std::string::npos)
      << converted.out;
}

}  // namespace

// xf-convert --shortlist: Marian's text lex lines of pieces stored as the written file's ids (a
// pruned target vocabulary's own ids), pruned to the best K per source piece, the first N in.
TEST_F(ModelFiles, XfConvertStoresAShortlistInTheWrittenVocabularies) {
  const xf::trainer::Checkpoint full = tiny_checkpoint();
  const auto tokenizer = xf::trainer::Tokenizer::from_model_proto(full.tokenizer_model, "tiny");
  std::vector<int32_t> kept;  // every other target piece: target ids differ from source ids
  for (int32_t id = 0; id < static_cast<int32_t>(full.config.target_vocab_size); id += 2) kept.push_back(id);
  for (int32_t special : {1, 3}) kept.insert(std::lower_bound(kept.begin(), kept.end(), special), special);
  const xf::trainer::PrunedModel pruned = xf::trainer::prune_target_vocabulary(full, kept);
  const std::string pruned_file = dir_ + "/pruned.xfm", lex = dir_ + "/lex.s2t";
  xf::trainer::write_model_file(pruned.checkpoint, xf::DType::f32, {}, pruned_file, pruned.target_tokenizer);
  // Source piece 10 -> target pieces 20 (0.6), 30 (0.3), 40 (0.1); piece 12 -> 24; a NULL line.
  const std::string s10 = tokenizer.piece(10), s12 = tokenizer.piece(12);
  std::ofstream(lex) << tokenizer.piece(20) << " " << s10 << " 0.6\n"
                     << tokenizer.piece(40) << " " << s10 << " 0.1\n"
                     << tokenizer.piece(30) << " " << s10 << " 0.3\n"
                     << tokenizer.piece(24) << " " << s12 << " 1\n"
                     << tokenizer.piece(24) << " NULL 0.5\n";
  const std::string out = dir_ + "/with-shortlist.xfm";
  const Result r = run(std::string(XF_CONVERT) + " " + pruned_file + " -o " + out +
                       " --shortlist " + lex + " --shortlist-first 6 --shortlist-best 2");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto file = xf::ModelFile::open(out);
  ASSERT_TRUE(file->shortlist().has_value());
  const xf::LexicalShortlist& s = *file->shortlist();
  EXPECT_EQ(s.first_num, 6u);
  const auto pruned_id = [&](int32_t full_id) {
    return static_cast<uint32_t>(std::lower_bound(kept.begin(), kept.end(), full_id) - kept.begin());
  };
  const auto targets_of = [&](uint32_t source) {
    return std::vector<uint32_t>(s.targets.begin() + s.offsets[source], s.targets.begin() + s.offsets[source + 1]);
  };
  EXPECT_EQ(targets_of(10), (std::vector<uint32_t>{pruned_id(20), pruned_id(30)}));  // the best 2, ascending
  EXPECT_EQ(targets_of(12), (std::vector<uint32_t>{pruned_id(24)}));
  EXPECT_TRUE(targets_of(11).empty());
  const Result missing = run(std::string(XF_CONVERT) + " " + pruned_file + " -o " + dir_ + "/no.xfm" +
                             " --shortlist " + dir_ + "/none.s2t");
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(last_line(missing.err).rfind("xf-convert: " + dir_ + "/none.s2t: cannot open", 0), 0u) << missing.err;
  EXPECT_FALSE(fs::exists(dir_ + "/no.xfm"));
}
