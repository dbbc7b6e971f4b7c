#include "imported_model.h"

#include <cmath>
#include <cstdio>

#include "xf/error.h"
#include "xf/format/model_writer.h"
#include "xf/format/parameters.h"
#include "xf/format/schema.h"

namespace xf::importers {

std::vector<float> transposed(const std::vector<float>& values, uint64_t rows, uint64_t cols) {
  std::vector<float> out(values.size());
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) out[c * rows + r] = values[r * cols + c];
  return out;
}

void add_linear(ImportedModel& model, const std::string& xf_name, const std::vector<ImportedTensor>& weights,
                const std::vector<ImportedTensor>& biases) {
  auto stacked = [](const std::vector<ImportedTensor>& parts) {
    ImportedTensor out;
    uint64_t rows = 0;
    bool all_int8 = true;
    for (const ImportedTensor& part : parts) {
      rows += part.shape[0];
      out.values.insert(out.values.end(), part.values.begin(), part.values.end());
      out.origin += (out.origin.empty() ? "" : " + ") + part.origin;
      all_int8 = all_int8 && !part.int8_values.empty();
    }
    for (const ImportedTensor& part : parts)
      if (all_int8) {
        out.int8_values.insert(out.int8_values.end(), part.int8_values.begin(), part.int8_values.end());
        out.int8_row_scales.insert(out.int8_row_scales.end(), part.int8_row_scales.begin(), part.int8_row_scales.end());
      }
    out.shape = parts.front().shape;
    out.shape[0] = rows;
    return out;
  };
  model.tensors[xf_name + schema::kWeight] = stacked(weights);
  model.tensors[xf_name + schema::kBias] = stacked(biases);
}

void set_decoding_beam(ImportedModel& model, int64_t beam, const std::string& origin) {
  if (beam < 1 || beam > 1024)
    throw Error(origin + " is " + std::to_string(beam) + ", not a beam size from 1 to 1024");
  model.metadata["decoding.beam"] = std::to_string(beam);
}

void set_decoding_power_normalization(ImportedModel& model, double alpha, const std::string& origin) {
  if (!std::isfinite(alpha) || alpha < -100 || alpha > 100)
    throw Error(origin + " is " + std::to_string(alpha) + ", not a length penalty from -100 to 100");
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", alpha);
  model.metadata["decoding.length_normalization"] = "power";
  model.metadata["decoding.length_penalty"] = text;
}

void set_decoding_integer(ImportedModel& model, const std::string& name, int64_t value, int64_t min,
                          const std::string& origin) {
  if (value < min || value > (1 << 20))
    throw Error(origin + " is " + std::to_string(value) + ", not an integer from " + std::to_string(min) + " to " +
                std::to_string(1 << 20));
  model.metadata["decoding." + name] = std::to_string(value);
}

namespace {
std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}
}  // namespace

void write_imported_model(const ImportedModel& model, const std::string& output, const ImportOptions& options) {
  validate_config(model.config);
  std::vector<float> parameters;
  for (const ParameterSpec& spec : transformer_parameters(model.config)) {
    const auto it = model.tensors.find(spec.name);
    if (it == model.tensors.end()) throw Error("internal: the importer gave no '" + spec.name + "'");
    const ImportedTensor& t = it->second;
    if (t.values.size() != spec.elements())
      throw Error(t.origin + " has shape " + shape_text(t.shape) + ", the config needs " +
                  shape_text(spec.shape) + " for " + spec.name);
    parameters.insert(parameters.end(), t.values.begin(), t.values.end());
  }
  ModelWriter writer = writer_of_parameters(model.config, parameters.data(), parameters.size(), options.dtype);
  // An original with int8 matrices of its own (Marian's intgemm8) computes its other matrices in
  // f32 (Marian's embeddings and tied output layer): they stay f32 rather than be quantized here.
  bool original_int8 = false;
  for (const auto& entry : model.tensors) original_int8 = original_int8 || !entry.second.int8_values.empty();
  if (options.dtype == DType::int8) {
    for (const auto& [name, t] : model.tensors) {
      if (t.int8_values.empty()) {
        if (original_int8 && t.shape.size() == 2) writer.add_tensor_f32(name, DType::f32, t.shape, t.values.data());
        continue;
      }
      if (t.int8_values.size() != t.values.size() || t.int8_row_scales.size() != t.shape[0])
        throw Error("internal: " + t.origin + ": int8 values or row scales of the wrong size");
      writer.add_tensor(name, DType::int8, t.shape, t.int8_values.data(), t.int8_values.size(),
                        t.int8_row_scales.data());
    }
  }
  if (options.layout_of) {
    for (const ParameterSpec& spec : transformer_parameters(model.config)) {
      // The dtype each tensor was stored in just above.
      const bool own_int8 = !model.tensors.at(spec.name).int8_values.empty();
      const DType stored = spec.shape.size() < 2                               ? DType::f32
                           : options.dtype != DType::int8 || own_int8 || !original_int8 ? options.dtype
                                                                                   : DType::f32;
      writer.set_layout(spec.name, options.layout_of(spec.name, stored));
    }
  }
  writer.set_source_tokenizer(model.source_tokenizer);
  if (!model.target_tokenizer.empty() && model.target_tokenizer != model.source_tokenizer)
    writer.set_target_tokenizer(model.target_tokenizer);
  if (model.shortlist) writer.set_shortlist(*model.shortlist);
  writer.set_source_vocabulary(model.source_vocabulary);
  if (model.target_vocabulary != model.source_vocabulary) writer.set_target_vocabulary(model.target_vocabulary);
  std::map<std::string, std::string> metadata = model.metadata;
  for (const auto& [key, value] : options.metadata) metadata[key] = value;
  for (const auto& [key, value] : metadata) writer.set_metadata(key, value);
  writer.write(output);
}

}  // namespace xf::importers
