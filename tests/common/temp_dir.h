#pragma once
// Temporary folders for tests, under $TMPDIR (else /tmp), removed when the test process exits,
// pass or fail, so that a ctest run leaves nothing behind (scripts/ctest_leaves_no_files.sh
// checks it). Header-only: every test executable gets one list of its folders.
#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace xf::test {

namespace detail {
struct TempDirs {
  std::vector<std::string> paths;
  ~TempDirs() {
    std::error_code ignored;
    for (const auto& path : paths) std::filesystem::remove_all(path, ignored);
  }
};
inline TempDirs& temp_dirs() {
  static TempDirs dirs;
  return dirs;
}
}  // namespace detail

// A fresh folder "xf-<label>-XXXXXX"; tests may keep it in function-local statics, since it is
// removed after them.
inline std::string make_temp_dir(const std::string& label) {
  detail::TempDirs& dirs = detail::temp_dirs();  // made first, so destroyed after the statics
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/xf-" + label + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot create a temp dir " + pattern);
  dirs.paths.push_back(pattern);
  return pattern;
}

// A fresh folder from make_temp_dir that is removed with its files as soon as the object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& label = "test") : path_(make_temp_dir(label)) {}
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::vector<std::string> entries() const {  // the names in the folder, sorted
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string path_;
};

}  // namespace xf::test
