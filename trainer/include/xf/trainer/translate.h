#pragma once
// The model being trained, decoded by the runtime that ships (xf::Translator), not by a decoder
// of the trainer's own: validation BLEU is then what xf-run gives for the converted checkpoint.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "xf/format/config.h"

namespace xf::trainer {

// Greedy translations of `sources` (token ids without EOS; the Translator appends it) by the
// CPU runtime over `parameters` (`count` floats in transformer_parameters(config)'s order),
// written to memory as an f32 model file: exactly what `xf-run --beam 1` outputs, as ids, for
// the checkpoint converted with `xf-convert --dtype f32`. Each result is without BOS and EOS.
std::vector<std::vector<int32_t>> translate_greedy(const ModelConfig& config, const float* parameters,
                                                   size_t count,
                                                   const std::vector<std::vector<int32_t>>& sources,
                                                   int threads);

}  // namespace xf::trainer
