// xf-run and xf-bench end to end: the programs are run on files, as a user would.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_command.h"
#include "tiny_model.h"
#include "xf/translator.h"

namespace {

using ProgramRun = xf::test::CommandRun;
using xf::test::read_file;

const std::string& work_dir() {
  static const std::string dir = xf::test::make_temp_dir("tools");
  return dir;
}

const std::string& model_path() {
  static const std::string path = xf::test::tiny_model_file();
  return path;
}

ProgramRun run(const std::string& program, const std::string& arguments, const std::string& stdin_path = "/dev/null") {
  return xf::test::run_command(program + " " + arguments + " < " + stdin_path, work_dir());
}

std::string write_lines(const std::string& name, const std::vector<std::string>& lines) {
  const std::string path = work_dir() + "/" + name;
  std::ofstream f(path);
  for (const auto& l : lines) f << l << "\n";
  return path;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream s(text);
  std::string line;
  while (std::getline(s, line)) lines.push_back(line);
  return lines;
}

TEST(XfRun, TranslatesAFileInOrderLikeTheLibrary) {
  std::vector<std::string> lines = xf::test::sample_sentences(23, 41);
  lines[5] = "";
  const std::string input = write_lines("input.txt", lines);
  const ProgramRun r = run(XF_RUN, "--model " + model_path() + " --beam 3 --max-batch 4", input);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto out = split_lines(r.out);
  ASSERT_EQ(out.size(), lines.size());

  xf::TranslatorOptions options;
  options.max_beam = 3;
  options.max_batch = 4;
  xf::Translator translator(xf::Model::open(model_path()), options);
  const auto expected = translator.translate(lines);
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(out[i], expected[i].hypotheses[0].text) << "line " << i + 1;
  EXPECT_EQ(out[5], "");
}

// --stream writes what the plain run writes (paragraphs, empty lines, greedy and beam); it
// refuses what it cannot stream, naming the flag.
TEST(XfRun, StreamWritesWhatThePlainRunWrites) {
  std::vector<std::string> lines = xf::test::sample_sentences(17, 43);
  lines[2] = "";
  lines[6] = "The " + lines[7] + ". A " + lines[8] + "!  Why " + lines[9] + "?";
  const std::string input = write_lines("stream.txt", lines);
  for (const std::string beam : {"1", "3"}) {
    const std::string args = "--model " + model_path() + " --max-batch 4 --beam " + beam;
    const ProgramRun plain = run(XF_RUN, args, input);
    const ProgramRun streamed = run(XF_RUN, args + " --stream", input);
    ASSERT_EQ(streamed.status, 0) << streamed.err;
    EXPECT_EQ(streamed.out, plain.out) << "beam " << beam;
    EXPECT_EQ(split_lines(streamed.out).size(), lines.size());
  }
  for (const std::string flag : {"--ids", "--with-scores", "--n-best 2"}) {
    const ProgramRun refused = run(XF_RUN, "--model " + model_path() + " --stream " + flag, input);
    EXPECT_EQ(refused.status, 2) << flag;
    EXPECT_NE(refused.err.find("--stream"), std::string::npos) << refused.err;
  }
}

TEST(XfRun, IdsModeAndNBest) {
  const std::string input = write_lines("ids.txt", {"5 9 12", "", "7 7 8 20 31"});
  const ProgramRun r = run(XF_RUN, "--model " + model_path() + " --ids --beam 2 --n-best 2", input);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto out = split_lines(r.out);
  // Two hypotheses for each sentence; the empty line has just one (the empty output).
  ASSERT_EQ(out.size(), 5u);
  xf::TranslatorOptions options;
  options.max_beam = 2;
  xf::Translator translator(xf::Model::open(model_path()), options);
  xf::TranslateOptions translate;
  translate.n_best = 2;
  std::vector<xf::TokenTranslation> expected;
  translator.translate_ids({{5, 9, 12}, {}, {7, 7, 8, 20, 31}}, translate, expected);
  size_t line = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    for (const auto& h : expected[i].hypotheses) {
      std::string ids;
      for (size_t k = 0; k < h.ids.size(); ++k) ids += (k ? " " : "") + std::to_string(h.ids[k]);
      EXPECT_EQ(out[line].rfind(std::to_string(i) + " ||| " + ids + " ||| ", 0), 0u) << out[line];
      ++line;
    }
}

// A model without a tokenizer is translated with --ids (its ids are all there is): the output
// ids are the translator's, and no text is decoded on the way.
TEST(XfRun, IdsModeOnAModelWithoutATokenizer) {
  const std::string path = xf::test::tiny_model_file(xf::test::TinyModelOptions::without_tokenizer(7), "untokenized");
  const std::string input = write_lines("untokenized-ids.txt", {"5 9 12", "7 7 8 20 31"});
  const ProgramRun r = run(XF_RUN, "--model " + path + " --ids --beam 2", input);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto out = split_lines(r.out);
  ASSERT_EQ(out.size(), 2u);
  xf::TranslatorOptions options;
  options.max_beam = 2;
  xf::Translator translator(xf::Model::open(path), options);
  xf::TranslateOptions translate;
  translate.beam = 2;
  std::vector<xf::TokenTranslation> expected;
  translator.translate_ids({{5, 9, 12}, {7, 7, 8, 20, 31}}, translate, expected);
  for (size_t i = 0; i < expected.size(); ++i) {
    std::string ids;
    for (size_t k = 0; k < expected[i].hypotheses[0].ids.size(); ++k)
      ids += (k ? " " : "") + std::to_string(expected[i].hypotheses[0].ids[k]);
    EXPECT_EQ(out[i], ids);
  }
  // Text needs the tokenizer: one line, exit 1.
  xf::test::expect_one_line_error(run(XF_RUN, "--model " + path, input), 1, "no tokenizer");
}

TEST(XfRun, BadInputAndOptionsFailWithOneLine) {
  const ProgramRun help = run(XF_RUN, "--help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--model"), std::string::npos);

  const ProgramRun unknown = run(XF_RUN, "--model " + model_path() + " --bogus");
  xf::test::expect_one_line_error(unknown, 2, "--bogus");

  const ProgramRun bad_beam = run(XF_RUN, "--model " + model_path() + " --beam zero");
  EXPECT_EQ(bad_beam.status, 2);
  EXPECT_NE(bad_beam.err.find("--beam"), std::string::npos);

  const ProgramRun no_model = run(XF_RUN, "--model " + work_dir() + "/missing.xfm");
  xf::test::expect_one_line_error(no_model, 1, "missing.xfm");

  // --strict: the first bad line stops the run (exit 1, one line naming it).
  const std::string bad_utf8 = write_lines("bad.txt", {"the cat", "ok", "caf\xe9"});
  const ProgramRun utf8 = run(XF_RUN, "--model " + model_path() + " --strict", bad_utf8);
  xf::test::expect_one_line_error(utf8, 1, "line 3");
  EXPECT_NE(utf8.err.find("invalid UTF-8"), std::string::npos) << utf8.err;

  const std::string long_line = write_lines("long.txt", {"the cat sees the dog and the bird"});
  const ProgramRun too_long = run(XF_RUN, "--model " + model_path() + " --max-source-len 4 --strict", long_line);
  EXPECT_EQ(too_long.status, 1);
  EXPECT_NE(too_long.err.find("line 1"), std::string::npos) << too_long.err;
  EXPECT_NE(too_long.err.find("--max-source-len 4"), std::string::npos) << too_long.err;

  const std::string bad_ids = write_lines("bad_ids.txt", {"5 x 7"});
  const ProgramRun ids = run(XF_RUN, "--model " + model_path() + " --ids --strict", bad_ids);
  EXPECT_EQ(ids.status, 1);
  EXPECT_NE(ids.err.find("'x' is not a token id"), std::string::npos) << ids.err;

  // Shortlists: a bad count is a bad command line naming the flag, a bad file bad input.
  const ProgramRun best = run(XF_RUN, "--model " + model_path() + " --shortlist-best 0");
  xf::test::expect_one_line_error(best, 2, "--shortlist-best");
  const std::string lex = write_lines("lex.s2t", {"a b 0.5", "a b half"});
  const ProgramRun bad_lex = run(XF_RUN, "--model " + model_path() + " --shortlist " + lex);
  xf::test::expect_one_line_error(bad_lex, 1, "shortlist " + lex + ":2: expected 'target source probability'");
}

// Without --strict no line is lost: an over-long line is truncated, an unreadable one gives an
// empty line, each with a warning naming it, a count at the end, and exit status 0.
TEST(XfRun, KeepsEveryLineAndWarnsAboutBadOnes) {
  std::vector<std::string> lines = xf::test::sample_sentences(12, 43);
  std::string long_line = "the cat sees the dog and the bird and the cat sees the dog";
  long_line += " " + long_line + " " + long_line + " " + long_line;
  lines[3] = long_line;
  lines[8] = "caf\xe9 au lait";
  const std::string input = write_lines("mixed.txt", lines);
  const int max_source_len = 24;
  const ProgramRun r = run(XF_RUN, "--model " + model_path() + " --max-batch 4 --max-source-len " +
                                       std::to_string(max_source_len), input);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto out = split_lines(r.out);
  ASSERT_EQ(out.size(), lines.size()) << r.out;
  const auto err = split_lines(r.err);
  ASSERT_EQ(err.size(), 4u) << r.err;
  EXPECT_NE(err[0].find("warning: line 4: "), std::string::npos) << r.err;
  EXPECT_NE(err[0].find("truncated"), std::string::npos) << r.err;
  EXPECT_NE(err[1].find("warning: line 9: "), std::string::npos) << r.err;
  EXPECT_NE(err[1].find("invalid UTF-8"), std::string::npos) << r.err;
  EXPECT_EQ(err[2], "xf-run: 2 of 12 lines had problems: 1 truncated to --max-source-len 24, 1 unreadable");
  // Then the summary every run ends with (tools/common/progress.h).
  EXPECT_EQ(err[3].rfind("xf-run: 12 lines, ", 0), 0u) << r.err;
  EXPECT_EQ(err[3].substr(err[3].size() - 12), ", 2 warnings") << r.err;

  // The other lines are translated as the library translates them; the long one as its first
  // max_source_len - 1 tokens; the unreadable one is empty.
  xf::TranslatorOptions options;
  options.max_batch = 4;
  options.max_source_len = max_source_len;
  auto model = xf::Model::open(model_path());
  xf::Translator translator(model, options);
  std::vector<std::vector<int32_t>> sources;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i == 8) {
      sources.emplace_back();
      continue;
    }
    auto ids = model->encode_source(lines[i]);
    if (i == 3) {
      ASSERT_GT(ids.size() + 1, static_cast<size_t>(max_source_len));
      ids.resize(max_source_len - 1);
    }
    ASSERT_LT(ids.size(), static_cast<size_t>(max_source_len)) << "line " << i + 1;
    sources.push_back(ids);
  }
  std::vector<xf::TokenTranslation> expected;
  translator.translate_ids(sources, {}, expected);
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& ids = expected[i].hypotheses[0].ids;
    EXPECT_EQ(out[i], model->decode_target(ids.data(), ids.size())) << "line " << i + 1;
  }
  EXPECT_EQ(out[8], "");

  // The same file read from memory (--no-mmap) gives the same output.
  const ProgramRun copy = run(XF_RUN, "--model " + model_path() + " --no-mmap --max-batch 4 --max-source-len " +
                                          std::to_string(max_source_len), input);
  EXPECT_EQ(copy.status, 0) << copy.err;
  EXPECT_EQ(copy.out, r.out);

  // xf-bench follows the same rules: warnings, a count, and every line measured.
  const ProgramRun bench = run(XF_BENCH, "--model " + model_path() + " --input " + input +
                                             " --batch 4 --json --max-source-len " + std::to_string(max_source_len));
  ASSERT_EQ(bench.status, 0) << bench.err;
  EXPECT_NE(bench.out.find("\"sentences\": 12,"), std::string::npos) << bench.out;
  EXPECT_NE(bench.err.find("xf-bench: 2 of 12 lines had problems"), std::string::npos) << bench.err;
  const ProgramRun strict = run(XF_BENCH, "--model " + model_path() + " --input " + input + " --strict");
  EXPECT_EQ(strict.status, 1);
  EXPECT_NE(strict.err.find("mixed.txt: line 9: "), std::string::npos) << strict.err;
}

// Runs `argv` with its stdin fed by `feed` through a pipe (so that no big input file is left
// behind), stdout and stderr to files; returns the exit status, outputs and the child's own
// peak RSS in MB (wait4). The child's address space is capped at 1 GiB, so that a program that
// held a huge line whole fails at once rather than taking gigabytes of a shared machine.
struct PipedRun : ProgramRun {
  double peak_rss_mb = 0.0;
};

PipedRun run_piped(const std::vector<std::string>& argv, const std::function<void(int)>& feed) {
  const std::string out = work_dir() + "/piped_stdout", err = work_dir() + "/piped_stderr";
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[0], 0);
    ::close(fds[0]);
    ::close(fds[1]);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    const rlimit limit{1ul << 30, 1ul << 30};
    ::setrlimit(RLIMIT_AS, &limit);
    ::alarm(xf::test::kCommandLimitSeconds);  // kept across exec: a hung child dies of SIGALRM
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[0]);
  ::signal(SIGPIPE, SIG_IGN);  // a child that exits early must not kill the test
  feed(fds[1]);
  ::close(fds[1]);
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  PipedRun r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  r.peak_rss_mb = usage.ru_maxrss / 1024.0;
  return r;
}

// Writes a line of `bytes` bytes of sentences, then `rest` (more lines), into fd.
void write_huge_line(int fd, size_t bytes, const std::string& rest) {
  std::string chunk;
  while (chunk.size() < (1u << 20)) chunk += "the cat sees the dog and the bird ";
  chunk.resize(1u << 20);
  for (size_t written = 0; written < bytes; written += chunk.size())
    if (::write(fd, chunk.data(), std::min(chunk.size(), bytes - written)) < 0) return;
  if (::write(fd, rest.data(), rest.size()) < 0) return;
}

// A 100 MB line is cut while it is read: xf-run and xf-bench hold and tokenize only the bytes
// --max-source-len tokens can come from, stay under 150 MB, warn about the truncation and
// translate the lines after it as usual.
TEST(XfRun, AHundredMegabyteLineRunsInBoundedMemoryAndIsReported) {
  const size_t bytes = 100u << 20;
  const std::vector<std::string> after = xf::test::sample_sentences(2, 47);
  const std::string rest = "\n" + after[0] + "\n" + after[1] + "\n";
  const PipedRun r = run_piped({XF_RUN, "--model", model_path(), "--threads", "1"},
                               [&](int fd) { write_huge_line(fd, bytes, rest); });
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_LT(r.peak_rss_mb, 150.0);
  const auto out = split_lines(r.out);
  ASSERT_EQ(out.size(), 3u) << r.out.substr(0, 1000);
  xf::Translator translator(xf::Model::open(model_path()), {});
  const auto expected = translator.translate(after);
  EXPECT_EQ(out[1], expected[0].hypotheses[0].text);
  EXPECT_EQ(out[2], expected[1].hypotheses[0].text);
  const auto err = split_lines(r.err);
  ASSERT_EQ(err.size(), 3u) << r.err;
  EXPECT_NE(err[0].find("xf-run: warning: line 1: more than --max-source-len 256 tokens"), std::string::npos) << r.err;
  EXPECT_NE(err[0].find("truncated"), std::string::npos) << r.err;
  EXPECT_EQ(err[1], "xf-run: 1 of 3 lines had problems: 1 truncated to --max-source-len 256, 0 unreadable");
  EXPECT_EQ(err[2].rfind("xf-run: 3 lines, ", 0), 0u) << r.err;  // the summary every run ends with
  EXPECT_EQ(err[2].substr(err[2].size() - 11), ", 1 warning") << r.err;
  // The truncated line is translated as the head it was cut to: its first 255 tokens.
  const std::string head = "the cat sees the dog and the bird ";
  std::string long_text;
  while (long_text.size() < 64 * 1024) long_text += head;
  auto ids = translator.model().encode_source(long_text);
  ASSERT_GT(ids.size(), 255u);
  ids.resize(255);
  std::vector<xf::TokenTranslation> cut;
  translator.translate_ids({ids}, {}, cut);
  EXPECT_EQ(out[0], translator.model().decode_target(cut[0].hypotheses[0].ids.data(), cut[0].hypotheses[0].ids.size()));

  // xf-bench reads its --input the same way (here the pipe, as /dev/stdin); with --ids too.
  const PipedRun bench = run_piped({XF_BENCH, "--model", model_path(), "--input", "/dev/stdin", "--json"},
                                   [&](int fd) { write_huge_line(fd, bytes, rest); });
  ASSERT_EQ(bench.status, 0) << bench.err;
  EXPECT_LT(bench.peak_rss_mb, 150.0);
  EXPECT_NE(bench.out.find("\"sentences\": 3,"), std::string::npos) << bench.out;
  EXPECT_NE(bench.err.find("xf-bench: warning: line 1: more than --max-source-len 256 tokens"), std::string::npos)
      << bench.err;
  const PipedRun ids_run = run_piped({XF_RUN, "--model", model_path(), "--ids", "--max-source-len", "8"}, [&](int fd) {
    std::string numbers;
    while (numbers.size() < (1u << 20)) numbers += "5 9 12 7 ";
    for (int i = 0; i < 100; ++i)
      if (::write(fd, numbers.data(), numbers.size()) < 0) return;
    if (::write(fd, "\n5 9\n", 5) < 0) return;
  });
  ASSERT_EQ(ids_run.status, 0) << ids_run.err;
  EXPECT_LT(ids_run.peak_rss_mb, 150.0);
  std::vector<xf::TokenTranslation> expected_ids;
  xf::TranslatorOptions eight;
  eight.max_source_len = 8;
  xf::Translator short_translator(xf::Model::open(model_path()), eight);
  short_translator.translate_ids({{5, 9, 12, 7, 5, 9, 12}, {5, 9}}, {}, expected_ids);
  const auto ids_out = split_lines(ids_run.out);
  ASSERT_EQ(ids_out.size(), 2u) << ids_run.out;
  for (size_t i = 0; i < 2; ++i) {
    std::string text;
    for (size_t k = 0; k < expected_ids[i].hypotheses[0].ids.size(); ++k)
      text += (k ? " " : "") + std::to_string(expected_ids[i].hypotheses[0].ids[k]);
    EXPECT_EQ(ids_out[i], text) << "line " << i + 1;
  }
  EXPECT_NE(ids_run.err.find("warning: line 1: more than --max-source-len 8"), std::string::npos) << ids_run.err;
}

// The decoding option flags reach TranslateOptions: xf-run prints what the library gives with
// the same options.
TEST(XfRun, DecodingOptionFlagsMatchTheLibrary) {
  const std::vector<std::string> lines = xf::test::sample_sentences(9, 43);
  const std::string input = write_lines("options.txt", lines);
  struct Case {
    std::string flags;
    void (*set)(xf::TranslateOptions&);
  };
  const std::vector<Case> cases = {
      {"--beam 1 --sampling-topk 0 --sampling-topp 0.9 --sampling-temperature 1.5 --seed 4",
       [](xf::TranslateOptions& o) { o.beam = 1, o.sampling_topk = 0, o.sampling_topp = 0.9f, o.sampling_temperature = 1.5f, o.seed = 4; }},
      {"--repetition-penalty 1.5 --no-repeat-ngram-size 2",
       [](xf::TranslateOptions& o) { o.repetition_penalty = 1.5f, o.no_repeat_ngram_size = 2; }},
      {"--min-decoding-length 6 --disable-unk",
       [](xf::TranslateOptions& o) { o.min_decoding_length = 6, o.disable_unk = true; }},
      {"--max-decoding-length 3 --batch-type tokens --max-batch-size 20",
       [](xf::TranslateOptions& o) { o.max_decoding_length = 3, o.batch_type = xf::BatchType::tokens, o.max_batch_size = 20; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    const ProgramRun r = run(XF_RUN, "--model " + model_path() + " " + c.flags, input);
    ASSERT_EQ(r.status, 0) << r.err;
    xf::TranslatorOptions options;
    xf::Translator translator(xf::Model::open(model_path()), options);
    xf::TranslateOptions translate;
    c.set(translate);
    const auto expected = translator.translate(lines, translate);
    const auto plain = translator.translate(lines);
    const auto out = split_lines(r.out);
    ASSERT_EQ(out.size(), lines.size());
    size_t changed = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(out[i], expected[i].hypotheses[0].text) << "line " << i + 1;
      changed += out[i] != plain[i].hypotheses[0].text;
    }
    EXPECT_GT(changed, 0u) << "the flags changed no translation";
  }
  // --threads 0: every core, the same translation.
  const std::string one = write_lines("one.txt", {lines[0]});
  const ProgramRun all_cores = run(XF_RUN, "--model " + model_path() + " --threads 0", one);
  ASSERT_EQ(all_cores.status, 0) << all_cores.err;
  EXPECT_EQ(all_cores.out, xf::Translator(xf::Model::open(model_path()), {}).translate({lines[0]})[0].hypotheses[0].text + "\n");
  const ProgramRun bad = run(XF_RUN, "--model " + model_path() + " --batch-type words");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--batch-type expects examples or tokens"), std::string::npos) << bad.err;
  // A decoding flag out of its range is a bad command line: exit 2, one line naming the flag
  // (these exited 1 with the library's field names).
  for (const std::string flags :
       {"--sampling-temperature 0", "--sampling-topp 2", "--sampling-topp 0", "--repetition-penalty 0",
        "--repetition-penalty -1", "--sampling-topk 5", "--sampling-topk 5 --beam 4"}) {
    SCOPED_TRACE(flags);
    const ProgramRun r = run(XF_RUN, "--model " + model_path() + " " + flags, input);
    xf::test::expect_one_line_error(r, 2, flags.substr(0, flags.find(' ')));
  }
  const ProgramRun beam = run(XF_RUN, "--model " + model_path() + " --sampling-topk 5 --beam 4", input);
  EXPECT_NE(beam.err.find("--sampling-topk 5 needs --beam 1"), std::string::npos) << beam.err;
}

// The model's decoding.* metadata gives xf-run's defaults (beam, length penalty); an option
// given wins; xf-inspect shows them.
TEST(XfRun, TheModelsDecodingSettingsAreTheDefaults) {
  const std::string path = work_dir() + "/with_defaults.xfm";
  xf::test::TinyModelOptions tiny;
  tiny.metadata = {{"decoding.beam", "2"}, {"decoding.length_penalty", "1.8"}};
  xf::test::write_tiny_model(path, tiny);
  const std::string input = write_lines("defaults.txt", xf::test::sample_sentences(6, 45));
  const ProgramRun by_default = run(XF_RUN, "--model " + path + " --with-scores", input);
  ASSERT_EQ(by_default.status, 0) << by_default.err;
  const ProgramRun model_values = run(XF_RUN, "--model " + path + " --with-scores --beam 2 --length-penalty 1.8", input);
  ASSERT_EQ(model_values.status, 0) << model_values.err;
  EXPECT_EQ(by_default.out, model_values.out);
  const ProgramRun explicit_penalty = run(XF_RUN, "--model " + path + " --with-scores --length-penalty 0.6", input);
  ASSERT_EQ(explicit_penalty.status, 0) << explicit_penalty.err;
  EXPECT_NE(explicit_penalty.out, by_default.out) << "--length-penalty wins over the model's";
  const ProgramRun n_best = run(XF_RUN, "--model " + path + " --n-best 3", input);
  EXPECT_EQ(n_best.status, 2) << "--n-best 3 exceeds the model's beam 2";
  EXPECT_NE(n_best.err.find("--n-best 3 exceeds --beam 2"), std::string::npos) << n_best.err;
  EXPECT_EQ(run(XF_RUN, "--model " + path + " --n-best 3 --beam 3", input).status, 0);

  // xf-convert records decoding settings (--metadata) and refuses a bad one before writing.
  const std::string converted = work_dir() + "/converted.xfm";
  const ProgramRun convert = run(XF_CONVERT, path + " -o " + converted + " --metadata decoding.no_repeat_ngram_size=3");
  ASSERT_EQ(convert.status, 0) << convert.err;
  EXPECT_EQ(xf::Model::open(converted)->decoding_defaults().no_repeat_ngram_size, 3);
  EXPECT_EQ(xf::Model::open(converted)->decoding_defaults().beam, 2) << "the file's own settings are kept";
  const ProgramRun bad_convert = run(XF_CONVERT, path + " -o " + work_dir() + "/not_written.xfm --metadata decoding.beam=0");
  EXPECT_EQ(bad_convert.status, 1);
  EXPECT_NE(bad_convert.err.find("metadata decoding.beam: expected an integer from 1 to 1024, got '0'"), std::string::npos)
      << bad_convert.err;
  EXPECT_FALSE(std::ifstream(work_dir() + "/not_written.xfm").good());
  const ProgramRun bad_arithmetic =
      run(XF_CONVERT, path + " -o " + work_dir() + "/not_written.xfm --metadata int8.arithmetic=intgemm");
  EXPECT_EQ(bad_arithmetic.status, 1);
  EXPECT_NE(bad_arithmetic.err.find("metadata int8.arithmetic: expected xf, marian-intgemm-avx2, marian-intgemm-avx512bw, marian-intgemm-avx512vnni; got 'intgemm'"),
            std::string::npos)
      << bad_arithmetic.err;
  EXPECT_FALSE(std::ifstream(work_dir() + "/not_written.xfm").good());
  const ProgramRun marian_panels = run(XF_CONVERT, path + " -o " + work_dir() + "/not_written.xfm --layout panels "
                                                          "--metadata int8.arithmetic=marian-intgemm-avx2");
  EXPECT_EQ(marian_panels.status, 2);
  EXPECT_NE(marian_panels.err.find("--layout panels and int8.arithmetic marian-intgemm-*"), std::string::npos)
      << marian_panels.err;
  EXPECT_FALSE(std::ifstream(work_dir() + "/not_written.xfm").good());

  const ProgramRun inspect = run(XF_INSPECT, path);
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("decoding defaults\n  beam                 2        (the model's decoding.beam)\n"
                             "  length_penalty       1.8      (the model's decoding.length_penalty)\n"
                             "  length_normalization gnmt     (xf's default)\n"
                             "  max_decoding_length  0        (xf's default)\n"
                             "  repetition_penalty   1        (xf's default)\n"),
            std::string::npos)
      << inspect.out;
  xf::test::TinyModelOptions bad = tiny;
  bad.metadata = {{"decoding.beam_size", "2"}};
  xf::test::write_tiny_model(work_dir() + "/bad_defaults.xfm", bad);
  for (const char* tool : {XF_RUN, XF_INSPECT}) {
    const ProgramRun refused = run(tool, std::string(tool) == XF_RUN ? "--model " + work_dir() + "/bad_defaults.xfm"
                                                                      : work_dir() + "/bad_defaults.xfm");
    xf::test::expect_one_line_error(refused, 1,
                                    "bad_defaults.xfm: metadata decoding.beam_size: not a decoding setting");
  }
}

// --input/--output files, --with-scores and --target-prefix: the library's translations with
// the same prefixes, and their scores.
TEST(XfRun, FilesScoresAndTargetPrefixes) {
  const std::vector<std::string> lines = xf::test::sample_sentences(6, 44);
  const std::vector<std::string> prefixes = {"the cat", "", "a", "", "the", "dog"};
  const std::string input = write_lines("files_in.txt", lines);
  const std::string prefix_file = write_lines("files_prefix.txt", prefixes);
  const std::string output = work_dir() + "/files_out.txt";
  const ProgramRun r = run(XF_RUN, "--model " + model_path() + " --input " + input + " --output " + output +
                                       " --with-scores --target-prefix " + prefix_file);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");
  const auto out = split_lines(read_file(output));
  ASSERT_EQ(out.size(), lines.size());
  xf::Translator translator(xf::Model::open(model_path()), {});
  const auto expected = translator.translate(lines, {}, prefixes);
  const auto plain = translator.translate(lines);
  size_t changed = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t tab = out[i].rfind('\t');
    ASSERT_NE(tab, std::string::npos) << out[i];
    EXPECT_EQ(out[i].substr(0, tab), expected[i].hypotheses[0].text) << "line " << i + 1;
    EXPECT_NEAR(std::stod(out[i].substr(tab + 1)), expected[i].hypotheses[0].score, 1e-5) << "line " << i + 1;
    changed += expected[i].hypotheses[0].ids != plain[i].hypotheses[0].ids;
  }
  EXPECT_GT(changed, 0u) << "the prefixes changed no translation";

  const ProgramRun no_input = run(XF_RUN, "--model " + model_path() + " --input " + work_dir() + "/absent.txt");
  xf::test::expect_one_line_error(no_input, 1, "absent.txt: cannot open the input");
  const ProgramRun no_output = run(XF_RUN, "--model " + model_path() + " --input " + input + " --output " +
                                               work_dir() + "/no/such/dir/out.txt");
  EXPECT_EQ(no_output.status, 1);
  EXPECT_NE(no_output.err.find("cannot write the output"), std::string::npos) << no_output.err;
  const std::string short_prefixes = write_lines("short_prefix.txt", {"a", "b"});
  const ProgramRun short_run = run(XF_RUN, "--model " + model_path() + " --input " + input + " --target-prefix " +
                                               short_prefixes);
  EXPECT_EQ(short_run.status, 1);
  EXPECT_NE(short_run.err.find("short_prefix.txt: ends after 2 lines, before the input"), std::string::npos)
      << short_run.err;
  const ProgramRun no_value = run(XF_RUN, "--model " + model_path() + " --input");
  EXPECT_EQ(no_value.status, 2);
  EXPECT_NE(no_value.err.find("--input needs a value"), std::string::npos) << no_value.err;
}

TEST(XfBench, PrintsJsonWithZeroAllocationsByXf) {
  const std::string input = write_lines("bench.txt", xf::test::sample_sentences(10, 51));
  const ProgramRun r = run(XF_BENCH, "--model " + model_path() + " --input " + input + " --beam 2 --batch 4 --repeat 2 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* key : {"\"tokens_per_s\": ", "\"sentences_per_s\": ", "\"latency_p50_ms\": ",
                          "\"latency_p90_ms\": ", "\"peak_rss_mb\": ", "\"allocations_xf\": ",
                          "\"allocations_backend\": "})
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  EXPECT_NE(r.out.find("\"allocations_xf\": 0,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"sentences\": 20,"), std::string::npos) << r.out;

  const ProgramRun text = run(XF_BENCH, "--model " + model_path() + " --input " + input);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("tokens/s"), std::string::npos);

  const ProgramRun missing = run(XF_BENCH, "--model " + model_path());
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("--input"), std::string::npos);
  const ProgramRun no_file = run(XF_BENCH, "--model " + model_path() + " --input " + work_dir() + "/nope.txt");
  EXPECT_EQ(no_file.status, 1);
  EXPECT_NE(no_file.err.find("nope.txt"), std::string::npos);
}

// xf-bench's peak RSS is its own: getrusage's ru_maxrss survives exec, so a benchmark started by a
// big process (a Python script with torch loaded) reported its parent's 700 MB for a 23 MB run.
// Here the parent of xf-bench touches 300 MB first.
TEST(XfBench, PeakRssIsItsOwnNotItsParents) {
  const std::string input = write_lines("bench_rss.txt", xf::test::sample_sentences(4, 52));
  const std::string out = work_dir() + "/bench_rss.json";
  const std::vector<std::string> argv = {XF_BENCH, "--model", model_path(), "--input", input, "--json"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    const size_t bytes = size_t{300} << 20;
    char* held = static_cast<char*>(std::malloc(bytes));
    if (held == nullptr) ::_exit(126);
    std::memset(held, 1, bytes);  // resident, then exec: the address space goes, the maximum stays
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::alarm(xf::test::kCommandLimitSeconds);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const std::string json = read_file(out);
  const size_t at = json.find("\"peak_rss_mb\": ");
  ASSERT_NE(at, std::string::npos) << json;
  const double peak_rss_mb = std::stod(json.substr(at + 15));
  EXPECT_GT(peak_rss_mb, 1.0);
  EXPECT_LT(peak_rss_mb, 200.0) << "the parent's 300 MB counted";
}

}  // namespace
