#pragma once
// What every importer hands to the writer: the config, each xf parameter's f32 values by name,
// the tokenizers and the model's own vocabularies. write_imported_model() checks that the
// tensors are exactly transformer_parameters(config) and writes the .xfm through
// writer_of_parameters() (format/model_writer.h: matrices in the asked dtype, 1-D tensors f32).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "xf/format/config.h"
#include "xf/format/shortlist.h"
#include "xf/importers/importers.h"

namespace xf::importers {

struct ImportedTensor {
  std::vector<uint64_t> shape;
  std::vector<float> values;
  std::string origin;  // the original tensor(s), for messages
  // The original's own int8 values of `values` (rows of the xf layout) with one scale per row,
  // value = q * scale (Marian's intgemm8 matrices): written as they are when the import's dtype
  // is int8, rather than quantized again from `values`. Empty for an f32 original.
  std::vector<int8_t> int8_values;
  std::vector<float> int8_row_scales;
};

struct ImportedModel {
  ModelConfig config;
  std::map<std::string, ImportedTensor> tensors;  // by xf parameter name
  std::string source_tokenizer, target_tokenizer;  // SentencePiece protos; target empty: the source one
  std::vector<std::string> source_vocabulary, target_vocabulary;  // empty: the tokenizer's ids
  std::map<std::string, std::string> metadata;
  std::optional<LexicalShortlist> shortlist;  // stored in the model when there is one
};

// Rows [r, c] <-> [c, r]: Marian stores linear maps as x W ([in, out]), xf as W x ([out, in]).
std::vector<float> transposed(const std::vector<float>& values, uint64_t rows, uint64_t cols);

// The linear block `xf_name` (".weight" and ".bias") from the original's parts stacked along the
// rows in order (a fused q|k|v or k|v projection; one part for the others); their int8 values
// and row scales too when every part has them.
void add_linear(ImportedModel& model, const std::string& xf_name, const std::vector<ImportedTensor>& weights,
                const std::vector<ImportedTensor>& biases);

// The model's own beam size as the metadata decoding.beam (xf::DecodingDefaults), the default of
// every translation with the file; `origin` (file and key) names it when it is not 1..1024.
void set_decoding_beam(ImportedModel& model, int64_t beam, const std::string& origin);
// Marian's `normalize` and transformers' `length_penalty` divide the score by length^alpha:
// decoding.length_normalization power with decoding.length_penalty alpha.
void set_decoding_power_normalization(ImportedModel& model, double alpha, const std::string& origin);
// decoding.<name> = value, an integer from `min` (origin names the key it came from).
void set_decoding_integer(ImportedModel& model, const std::string& name, int64_t value, int64_t min,
                          const std::string& origin);

void write_imported_model(const ImportedModel& model, const std::string& output, const ImportOptions& options);

}  // namespace xf::importers
