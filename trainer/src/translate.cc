#include "xf/trainer/translate.h"

#include <algorithm>

#include "xf/format/model_file.h"
#include "xf/trainer/checkpoint.h"
#include "xf/translator.h"

namespace xf::trainer {

std::vector<std::vector<int32_t>> translate_greedy(const ModelConfig& config, const float* parameters,
                                                   size_t count,
                                                   const std::vector<std::vector<int32_t>>& sources,
                                                   int threads) {
  if (sources.empty()) return {};
  const std::vector<uint8_t> bytes = writer_of_parameters(config, parameters, count, DType::f32).serialize();
  auto model = Model::from_file(ModelFile::copy_from_memory(bytes.data(), bytes.size(), "the model in training"));
  size_t longest = 0;
  for (const auto& source : sources) longest = std::max(longest, source.size());
  TranslatorOptions plan;  // xf-run's defaults, but greedy and no longer than needed
  plan.device = Device::cpu;
  plan.max_beam = 1;
  plan.threads = threads;
  plan.max_source_len = static_cast<int>(std::min<size_t>(longest + 1, config.max_positions));
  Translator translator(model, plan);
  TranslateOptions greedy;
  greedy.beam = 1;
  std::vector<TokenTranslation> results;
  translator.translate_ids(sources, greedy, results);
  std::vector<std::vector<int32_t>> outputs;
  outputs.reserve(results.size());
  for (TokenTranslation& result : results) outputs.push_back(std::move(result.hypotheses.front().ids));
  return outputs;
}

}  // namespace xf::trainer
