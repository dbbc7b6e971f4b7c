// Trains a tiny Transformer to reverse strings of 6-10 letters from a 10-letter alphabet (a
// character-level SentencePiece model trained by xf-train itself), converts it with xf-convert
// and requires xf-run's outputs to be exactly right on held-out strings, greedy and beam 4, from
// the f32 file and an averaged one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "xf/format/model_file.h"

namespace {
namespace fs = std::filesystem;

const std::string kBin = std::string(XF_BINARY_DIR) + "/bin/";
const std::string kDir = std::string(XF_BINARY_DIR) + "/end_to_end_reverse";

std::string random_word(std::mt19937& rng) {
  std::uniform_int_distribution<int> length(6, 10), letter(0, 9);
  std::string s;
  for (int k = length(rng); k > 0; --k) s.push_back(static_cast<char>('a' + letter(rng)));
  return s;
}

std::string reversed(const std::string& s) { return std::string(s.rbegin(), s.rend()); }

// Runs a shell command; its stderr goes to a log file that a failure prints.
void run(const std::string& command, const std::string& log) {
  int status = std::system((command + " 2> " + log).c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_EQ(status, 0) << command << "\n" << text.str();
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class ReverseTask : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(kDir);
    fs::create_directories(kDir);
    std::mt19937 rng(2024);
    std::set<std::string> train_words;
    {
      std::ofstream train(kDir + "/train.tsv");
      while (train_words.size() < 5000) {
        std::string w = random_word(rng);
        if (train_words.insert(w).second) train << w << "\t" << reversed(w) << "\n";
      }
    }
    std::ofstream heldout(kDir + "/heldout.txt");
    while (heldout_.size() < 50) {
      std::string w = random_word(rng);
      if (train_words.count(w) == 0) {
        heldout_.push_back(w);
        heldout << w << "\n";
      }
    }
  }
  static std::vector<std::string> heldout_;
};
std::vector<std::string> ReverseTask::heldout_;

TEST_F(ReverseTask, TrainConvertTranslateExactly) {
  const std::string run_dir = kDir + "/run";
  run(kBin + "xf-train --train " + kDir + "/train.tsv --out " + run_dir +
          " --spm-type char --vocab-size 100 --layers 2 --d-model 64 --heads 4 --d-ff 256"
          " --dropout 0 --label-smoothing 0 --warmup 100 --lr-scale 1 --batch-tokens 1024"
          " --max-steps 1000 --save-every 500 --valid-every 0 --log-every 100 --threads 2 --seed 3",
      kDir + "/train.log");
  ASSERT_TRUE(fs::exists(run_dir + "/step-001000"));
  ASSERT_TRUE(fs::exists(run_dir + "/metrics.png"));

  const std::string model = kDir + "/reverse.xfm";
  run(kBin + "xf-convert " + run_dir + "/step-001000 -o " + model + " --dtype f32",
      kDir + "/convert.log");
  auto file = xf::ModelFile::open(model);
  EXPECT_EQ(file->metadata_value("training.steps"), "1000");
  EXPECT_FALSE(file->source_tokenizer().empty());

  for (int beam : {1, 4}) {
    const std::string output = kDir + "/out_beam" + std::to_string(beam) + ".txt";
    run(kBin + "xf-run --model " + model + " --beam " + std::to_string(beam) + " --threads 2 < " +
            kDir + "/heldout.txt > " + output,
        kDir + "/run.log");
    auto lines = read_lines(output);
    ASSERT_EQ(lines.size(), heldout_.size());
    int wrong = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(lines[i], reversed(heldout_[i])) << "beam " << beam << ", input " << heldout_[i];
      wrong += lines[i] != reversed(heldout_[i]);
    }
    EXPECT_EQ(wrong, 0) << "beam " << beam;
  }
}

}  // namespace
