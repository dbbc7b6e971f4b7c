#include "xf/modules/module.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "xf/error.h"

namespace xf::modules {
namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> dirs;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find(':', start), path.size());
    if (end > start) dirs.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return dirs;
}

// Where modules are looked for: XF_MODULE_PATH, or the directory of the object holding this
// code (build/bin for the tools, lib/ for an installed libxf) and its ../lib.
std::vector<std::string> search_dirs() {
  if (const char* env = std::getenv("XF_MODULE_PATH")) return split_path(env);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&split_path), &info) == 0 || info.dli_fname == nullptr) return {};
  std::string self = info.dli_fname;
  // The main program's name is its argv[0], which may carry no directory.
  if (self.find('/') == std::string::npos) {
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) return {};
    self.assign(exe, static_cast<size_t>(n));
  }
  const size_t slash = self.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : self.substr(0, slash);
  return {dir, dir + "/../lib"};
}

bool is_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

const xf_module& load_module(const std::string& name, const std::string& who) {
  static std::mutex mutex;
  static std::map<std::string, const xf_module*> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = loaded.find(name); it != loaded.end()) return *it->second;

  const std::string file_name = "lib" + name + ".so";
  const std::vector<std::string> dirs = search_dirs();
  std::string path, looked;
  for (const std::string& dir : dirs) {
    looked += (looked.empty() ? "" : ", ") + dir;
    if (is_file(dir + "/" + file_name)) {
      path = dir + "/" + file_name;
      break;
    }
  }
  if (path.empty())
    throw Error(who + ": module " + file_name + " not found in " + (looked.empty() ? "(no directory)" : looked) +
                " (XF_MODULE_PATH sets where to look)");
  // RTLD_NOW: a library the module needs (libcudart, libcublas...) is missing now, not at a
  // first call. RTLD_LOCAL: its symbols stay its own. The handle is kept until exit.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    throw Error(who + ": cannot load " + path + ": " + (reason ? reason : "unknown dlopen error"));
  }
  auto entry = reinterpret_cast<xf_module_entry_function>(dlsym(handle, XF_MODULE_ENTRY));
  if (entry == nullptr) throw Error(who + ": " + path + " is not an xf module (no " XF_MODULE_ENTRY ")");
  const xf_module* module = entry();
  if (module == nullptr || module->abi == nullptr || std::string(module->abi) != XF_MODULE_ABI)
    throw Error(who + ": " + path + " was built for xf " + (module && module->abi ? module->abi : "?") +
                ", this is xf " XF_MODULE_ABI " (use the module of the same build)");
  loaded[name] = module;
  return *module;
}

void rethrow_as_error() {
  try {
    throw;
  } catch (const std::exception& e) {
    throw Error(e.what());
  } catch (...) {
    throw Error("unknown error in a device module");
  }
}

}  // namespace xf::modules
