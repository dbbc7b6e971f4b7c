// The CUDA modules' loading path, on any machine: a CPU translation maps no CUDA library; asking
// for Device::cuda loads libxf_cuda_runtime.so (and with it the CUDA libraries) and either builds
// a translator (a GPU is there) or fails with one line starting "device cuda:" (none is). The
// same for the trainer's module. Each TEST runs in its own process (gtest_discover_tests).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tiny_model.h"
#include "xf/translator.h"
#include "xf/trainer/device_training.h"

namespace xf {
namespace {

// The mapped files of this process whose path contains one of `names`.
std::vector<std::string> mapped(const std::vector<std::string>& names) {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> found;
  std::string line;
  while (std::getline(maps, line))
    for (const std::string& name : names)
      if (line.find(name) != std::string::npos) found.push_back(line);
  return found;
}

const std::vector<std::string> kCudaLibraries = {"libcudart", "libcublas", "libcuda.so", "libxf_cuda_"};

std::string join(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  return all;
}

TEST(cuda_module, CpuTranslationMapsNoCudaLibraryAndCudaLoadsTheModule) {
  const std::string dir = test::make_temp_dir("cuda-module");
  test::write_tiny_model(dir + "/tiny.xfm");
  auto model = Model::open(dir + "/tiny.xfm");
  std::filesystem::remove_all(dir);  // the model stays mapped
  TranslatorOptions options;
  options.max_batch = 2;
  options.max_beam = 2;
  Translator cpu(model, options);
  const auto expected = cpu.translate({"the cat sees the dog"}, {1});
  ASSERT_FALSE(expected[0].hypotheses[0].ids.empty());
  EXPECT_TRUE(mapped(kCudaLibraries).empty()) << join(mapped(kCudaLibraries));

  options.device = Device::cuda;
  try {
    Translator cuda(model, options);
    const auto got = cuda.translate({"the cat sees the dog"}, {1});
    EXPECT_EQ(got[0].hypotheses[0].ids, expected[0].hypotheses[0].ids);
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("device cuda: ", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_FALSE(mapped({"libxf_cuda_runtime.so"}).empty()) << "the module was not loaded";
  EXPECT_FALSE(mapped({"libcudart"}).empty()) << "the module did not bring the CUDA runtime";
}

TEST(cuda_module, TrainerLoadsItsModuleWhenCudaIsRequired) {
  EXPECT_TRUE(mapped({"libxf_cuda_trainer"}).empty()) << join(mapped({"libxf_cuda_trainer"}));
  try {
    trainer::module_device_training().require("cuda", 0);
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("CUDA"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_FALSE(mapped({"libxf_cuda_trainer.so"}).empty()) << "the module was not loaded";
}

}  // namespace
}  // namespace xf
