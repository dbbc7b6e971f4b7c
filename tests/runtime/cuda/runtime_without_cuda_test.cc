// A build without CUDA: asking a Translator for the CUDA device gives a clear one-line error
// (xf-run and xf-bench print it and exit 1), never a crash or a silent CPU run.
#include <gtest/gtest.h>

#include <string>

#include "golden.h"
#include "tiny_model.h"
#include "xf/translator.h"

namespace xf {
namespace {

TEST(cuda_runtime_unavailable, DeviceCudaSaysXfWasBuiltWithoutCuda) {
  const std::string path = test::make_temp_dir("cuda-runtime-unavailable") + "/post_shared.xfm";
  golden::write_golden_model(golden::load_golden(golden::golden_path("post_shared")), path);
  TranslatorOptions options;
  options.device = Device::cuda;
  options.max_batch = 2;
  options.max_beam = 2;
  options.max_source_len = 16;
  try {
    Translator translator(Model::open(path), options);
    FAIL() << "a CUDA Translator was built without CUDA";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "device cuda: xf was built without CUDA");
  }
}

}  // namespace
}  // namespace xf
