// write() and write_file_atomically(): the destination is replaced only when the new file is
// complete, and no temporary file is left behind either way.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>

#include "format_test_support.h"
#include "error_of.h"
#include "xf/error.h"
#include "xf/format/model_file.h"
#include "xf/format/model_writer.h"
#include "xf/format/parameters.h"

namespace xf::test {
namespace {

TEST(FormatAtomicWrite, NewFileLeavesNothingElse) {
  TempDir dir;
  const std::vector<uint8_t> bytes = valid_model_bytes(tiny_config(), DType::f16, 1);
  write_file_atomically(dir.file("model.xfm"), bytes.data(), bytes.size());
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.xfm"});
  EXPECT_EQ(read_bytes(dir.file("model.xfm")), bytes);
}

TEST(FormatAtomicWrite, ReplacesAnExistingModel) {
  TempDir dir;
  const std::string path = dir.file("model.xfm");
  const auto first = random_parameters(tiny_config(), DType::f32, 1);
  const auto second = random_parameters(tiny_config(), DType::bf16, 2);
  ModelWriter a(tiny_config()), b(tiny_config());
  add_parameters(a, first);
  add_parameters(b, second);
  a.write(path);
  const auto old_file = ModelFile::open(path);  // keeps the old inode mapped
  b.write(path);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.xfm"});
  EXPECT_EQ(read_bytes(path), b.serialize());
  // A reader that opened the old file keeps seeing it intact: rename, never overwrite in place.
  const TensorView& old_view = old_file->tensor(schema::kSharedEmbedding);
  EXPECT_EQ(old_view.dtype, DType::f32);
  const auto& want = first.at(schema::kSharedEmbedding).data;
  EXPECT_EQ(std::memcmp(old_view.data, want.data(), want.size()), 0);
}

TEST(FormatAtomicWrite, FailedWriteKeepsTheExistingFile) {
  TempDir dir;
  const std::string path = dir.file("model.xfm");
  const std::vector<uint8_t> old_bytes = valid_model_bytes(tiny_config(), DType::f32, 4);
  write_bytes(path, old_bytes);

  // The writer refuses an incomplete model before it touches the destination.
  ModelWriter incomplete(tiny_config());
  auto parameters = random_parameters(tiny_config(), DType::f32, 5);
  parameters.erase(schema::kSharedEmbedding);
  add_parameters(incomplete, parameters);
  EXPECT_EQ(error_of([&] { incomplete.write(path); }), "missing tensor '" + std::string(schema::kSharedEmbedding) + "'");
  EXPECT_EQ(read_bytes(path), old_bytes);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.xfm"});
}

TEST(FormatAtomicWrite, FailedRenameRemovesTheTemporary) {
  TempDir dir;
  // A directory in the way: the temporary is written, the rename fails, the temporary goes.
  const std::string blocked = dir.file("blocked.xfm");
  ASSERT_EQ(::mkdir(blocked.c_str(), 0755), 0);
  const std::vector<uint8_t> bytes = valid_model_bytes(tiny_config(), DType::f32, 6);
  EXPECT_EQ(error_of([&] { write_file_atomically(blocked, bytes.data(), bytes.size()); }),
            blocked + ": cannot rename into place: Is a directory");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"blocked.xfm"});
  struct stat st {};
  ASSERT_EQ(::stat(blocked.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

TEST(FormatAtomicWrite, MissingDirectoryIsAnError) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/model.xfm");
  const uint8_t byte = 0;
  EXPECT_EQ(error_of([&] { write_file_atomically(path, &byte, 1); }),
            path + ": cannot create: No such file or directory");
  EXPECT_TRUE(dir.entries().empty());
}

}  // namespace
}  // namespace xf::test
