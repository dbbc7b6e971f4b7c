// The CUDA Translator's memory plan on the device: building it takes exactly one device
// allocation for the weights, one for the working arena and one pinned host block; translating
// (greedy and beam, a full batch and a single sentence, f32 and f16) makes no cudaMalloc,
// cudaFree, cudaMallocHost or cudaFreeHost call, the first call included; destroying it frees
// what it took. Counted through xf::cuda's wrappers (every xf allocation goes through them).
// On the host heap, translating in steady state makes no allocation by xf's code on the decoding
// thread (issue 43): the CUDA runtime's and cuBLAS's calls are marked as library calls
// (XF_CUDA_CHECK, XF_CUBLAS_CHECK; over the host emulation its stand-ins for the device's
// kernels too), and their allocations, and those on other threads, are reported as test
// properties beside it.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "cuda_test_support.h"
#include "random_inputs.h"
#include "tiny_model.h"
#include "xf/alloc_counter.h"
#include "xf/kernels_cuda/memory.h"
#include "xf/translator.h"

namespace xf {
namespace {

struct ModelDtype {
  DType dtype;
};
void PrintTo(const ModelDtype& m, std::ostream* out) { *out << dtype_name(m.dtype); }

class cuda_runtime_allocation : public ::testing::TestWithParam<ModelDtype> {};

TEST_P(cuda_runtime_allocation, TranslatingMakesNoDevicePinnedOrXfHostAllocation) {
  XF_SKIP_WITHOUT_GPU();
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  test::TinyModelOptions model_options = test::TinyModelOptions::without_tokenizer(
      static_cast<uint32_t>(random.integer(1, 1 << 30)));
  model_options.matrix_dtype = GetParam().dtype;
  model_options.round_to_f16 = GetParam().dtype == DType::f16;
  const auto model =
      Model::open(test::tiny_model_file(model_options, std::string("allocation-") + dtype_name(GetParam().dtype)));
  const ModelConfig& config = model->config();

  std::vector<std::vector<int32_t>> batch(8);
  for (auto& sentence : batch) {
    sentence.resize(static_cast<size_t>(random.integer(1, 30)));
    for (int32_t& id : sentence) id = static_cast<int32_t>(random.integer(4, config.source_vocab_size - 1));
  }
  const std::vector<std::vector<int32_t>> single(batch.begin(), batch.begin() + 1);

  TranslatorOptions options;
  options.device = Device::cuda;
  options.max_batch = 8;
  options.max_beam = 4;
  options.max_source_len = 32;
  TranslateOptions greedy;
  greedy.beam = 1;
  TranslateOptions beam;
  beam.beam = 4;
  beam.n_best = 2;

  const cuda::AllocationCounts before = cuda::allocation_counts();
  {
    Translator translator(model, options);
    const cuda::AllocationCounts built = cuda::allocation_counts();
    EXPECT_EQ(built.device_mallocs - before.device_mallocs, 2u) << "the weights and the working arena";
    EXPECT_EQ(built.pinned_host_mallocs - before.pinned_host_mallocs, 1u) << "one pinned staging block";
    EXPECT_EQ(built.device_frees, before.device_frees);
    EXPECT_EQ(built.pinned_host_frees, before.pinned_host_frees);
    // What xf-bench reports as the device's allocations and memory comes from the same counts.
    const std::optional<DeviceUsage> usage_built = translator.device_usage();
    ASSERT_TRUE(usage_built.has_value());
    EXPECT_EQ(usage_built->allocations, built.device_mallocs + built.pinned_host_mallocs);
    EXPECT_GT(usage_built->used_bytes, 0u);

    // One results vector per request, as an app that repeats its requests keeps: the first round
    // sizes their storage (one vector for all would reallocate as the shapes alternate).
    std::vector<TokenTranslation> results[4];
    alloc_counter::Counts heap{};
    for (int round = 0; round < 2; ++round) {
      alloc_counter::Scope scope;
      int request = 0;
      const std::vector<std::vector<int32_t>>* requests[] = {&batch, &single};
      for (const auto* sources : requests)
        for (const TranslateOptions* translate : {&greedy, &beam})
          translator.translate_ids(*sources, *translate, results[request++]);
      if (round == 1) heap = scope.stop();
    }
    const cuda::AllocationCounts after = cuda::allocation_counts();
    EXPECT_EQ(after.device_mallocs, built.device_mallocs);
    EXPECT_EQ(after.device_frees, built.device_frees);
    EXPECT_EQ(after.pinned_host_mallocs, built.pinned_host_mallocs);
    EXPECT_EQ(after.pinned_host_frees, built.pinned_host_frees);
    EXPECT_EQ(translator.device_usage()->allocations, usage_built->allocations);
    ASSERT_EQ(results[3].size(), 1u);
    EXPECT_FALSE(results[3][0].hypotheses.empty());
    EXPECT_EQ(heap.xf_counting_thread, 0u) << "host heap allocations by xf's code on the decoding thread";
    RecordProperty("host_heap_allocations_xf_decoding_thread", static_cast<int>(heap.xf_counting_thread));
    RecordProperty("host_heap_allocations_xf_other_threads", static_cast<int>(heap.xf - heap.xf_counting_thread));
    RecordProperty("host_heap_allocations_cuda_libraries", static_cast<int>(heap.backend));
  }
  const cuda::AllocationCounts destroyed = cuda::allocation_counts();
  EXPECT_EQ(destroyed.device_frees - before.device_frees, destroyed.device_mallocs - before.device_mallocs);
  EXPECT_EQ(destroyed.pinned_host_frees - before.pinned_host_frees,
            destroyed.pinned_host_mallocs - before.pinned_host_mallocs);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, cuda_runtime_allocation,
                         ::testing::Values(ModelDtype{DType::f32}, ModelDtype{DType::f16}),
                         [](const ::testing::TestParamInfo<ModelDtype>& info) {
                           return std::string(dtype_name(info.param.dtype));
                         });

}  // namespace
}  // namespace xf
