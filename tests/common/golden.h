#pragma once
// Loads the golden vectors that tests/reference/make_golden.py (an independent PyTorch
// implementation) writes, and builds a flat model file from their weights.
// tests/reference/README.md defines the text format, the model math, the beam search and the
// loss that the values pin.
//
//   const auto golden = xf::golden::load_golden(xf::golden::golden_path("post_shared"));
//   const xf::ModelConfig config = xf::golden::golden_config(golden);
//   xf::golden::write_golden_model(golden, "/tmp/x.xfm");           // f32 weights
//   golden.at("decoder.logits").values  // [batch, target_len, target_vocab], row-major
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "xf/error.h"
#include "xf/format/config.h"
#include "xf/format/model_writer.h"
#include "xf/format/parameters.h"

#ifndef XF_GOLDEN_DIR
#error "XF_GOLDEN_DIR must name tests/reference/golden (link xf_test_common)"
#endif

namespace xf::golden {

inline constexpr int kGoldenFormatVersion = 1;

struct GoldenTensor {
  // "f64"; "f32" (float32 values, widened exactly: the model weights); "i64" (integers, exact).
  std::string dtype;
  std::vector<uint64_t> shape;  // empty for a scalar
  std::vector<double> values;   // row-major

  size_t size() const { return values.size(); }
  double scalar() const {
    if (!shape.empty()) throw Error("golden tensor is not a scalar");
    return values[0];
  }
  int64_t integer(size_t i) const { return static_cast<int64_t>(values.at(i)); }
  std::vector<float> to_f32() const { return std::vector<float>(values.begin(), values.end()); }
  std::vector<int32_t> to_i32() const {
    std::vector<int32_t> out(values.size());
    for (size_t i = 0; i < values.size(); ++i) out[i] = static_cast<int32_t>(values[i]);
    return out;
  }
};

using GoldenFile = std::map<std::string, GoldenTensor>;

// Parses one golden text file. Throws xf::Error("<path>:<line>: <problem>") on anything that is
// not exactly the documented format.
inline GoldenFile parse_golden(const std::string& text, const std::string& label) {
  GoldenFile file;
  size_t pos = 0, line = 1;
  // Next whitespace-separated token; `line` is the line it starts on.
  auto next_token = [&](std::string& token) {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) {
      if (text[pos] == '\n') ++line;
      ++pos;
    }
    const size_t start = pos;
    while (pos < text.size() && !std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
    token.assign(text, start, pos - start);
    return !token.empty();
  };
  auto fail = [&](const std::string& what) -> Error {
    return Error(label + ":" + std::to_string(line) + ": " + what);
  };
  auto parse_unsigned = [&](const std::string& token, const char* what) {
    if (token.empty() || token.find_first_not_of("0123456789") != std::string::npos ||
        token.size() > 12) {
      throw fail(std::string("bad ") + what + " '" + token + "'");
    }
    return static_cast<uint64_t>(std::stoull(token));
  };

  std::string token;
  if (!next_token(token) || token != "xf-golden") throw fail("not an xf golden file");
  if (!next_token(token) || parse_unsigned(token, "version") != kGoldenFormatVersion) {
    throw fail("unsupported golden format version '" + token + "'");
  }
  while (next_token(token)) {
    const std::string name = token;
    if (file.count(name)) throw fail("tensor '" + name + "' appears twice");
    GoldenTensor tensor;
    if (!next_token(tensor.dtype) ||
        (tensor.dtype != "f64" && tensor.dtype != "f32" && tensor.dtype != "i64")) {
      throw fail("tensor '" + name + "': bad dtype '" + tensor.dtype + "'");
    }
    if (!next_token(token)) throw fail("tensor '" + name + "': missing rank");
    const uint64_t rank = parse_unsigned(token, "rank");
    if (rank > 8) throw fail("tensor '" + name + "': rank " + token + " over 8");
    uint64_t count = 1;
    for (uint64_t d = 0; d < rank; ++d) {
      if (!next_token(token)) throw fail("tensor '" + name + "': missing dimension");
      tensor.shape.push_back(parse_unsigned(token, "dimension"));
      count *= tensor.shape.back();
      if (count > (uint64_t{1} << 26)) throw fail("tensor '" + name + "': too many values");
    }
    tensor.values.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      if (!next_token(token)) {
        throw fail("tensor '" + name + "': " + std::to_string(count) + " values expected, " +
                   std::to_string(i) + " found before the end of the file");
      }
      char* end = nullptr;
      errno = 0;
      // f32 text is the shortest decimal that rounds to the float32 value: read it as a float.
      const double value = tensor.dtype == "f32" ? std::strtof(token.c_str(), &end)
                                                 : std::strtod(token.c_str(), &end);
      if (end != token.c_str() + token.size() || errno == ERANGE) {
        throw fail("tensor '" + name + "': bad value '" + token + "'");
      }
      if (tensor.dtype == "i64" && (value != std::floor(value) || std::fabs(value) > 9.0e15)) {
        throw fail("tensor '" + name + "': '" + token + "' is not an integer");
      }
      tensor.values.push_back(value);
    }
    file.emplace(name, std::move(tensor));
  }
  return file;
}

inline GoldenFile load_golden(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open golden file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_golden(text.str(), path);
}

// tests/reference/golden/<name>.txt
inline std::string golden_path(const std::string& case_name) {
  return std::string(XF_GOLDEN_DIR) + "/" + case_name + ".txt";
}

// Every committed case, sorted by name ("post_shared", "pre_separate", ...).
inline std::vector<std::string> golden_case_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(XF_GOLDEN_DIR)) {
    if (entry.path().extension() == ".txt") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

inline const GoldenTensor& golden_at(const GoldenFile& file, const std::string& name) {
  const auto it = file.find(name);
  if (it == file.end()) throw Error("golden file has no tensor '" + name + "'");
  return it->second;
}

// Each field is the scalar "config.<name>": flags and norm_position as 0 or 1. The script
// rounds epsilon to float32 first, so every conversion here is exact.
inline ModelConfig golden_config(const GoldenFile& file) {
  ModelConfig c;
  for_each_config_field(c, [&](const char* name, auto& field) {
    using Field = std::remove_reference_t<decltype(field)>;
    // The reference implements xf's own graph: fields of format version 2 on keep their defaults.
    if (!file.count(std::string("config.") + name) && field_format_version(name) >= 2) return;
    const double value = golden_at(file, std::string("config.") + name).scalar();
    if constexpr (std::is_enum_v<Field>) {
      field = static_cast<Field>(static_cast<std::underlying_type_t<Field>>(value));
    } else if constexpr (std::is_same_v<Field, bool>) {
      field = value != 0;
    } else {
      field = static_cast<Field>(value);
    }
  });
  validate_config(c);
  return c;
}

// The rows of a padded id tensor [..., max_len] cut to their lengths [...] (ragged outputs such
// as "greedy.ids" with "greedy.lengths", or "source.ids" with "source.lengths").
inline std::vector<std::vector<int32_t>> golden_rows(const GoldenFile& file,
                                                     const std::string& ids_name,
                                                     const std::string& lengths_name) {
  const GoldenTensor& ids = golden_at(file, ids_name);
  const GoldenTensor& lengths = golden_at(file, lengths_name);
  if (ids.shape.empty()) throw Error("golden tensor '" + ids_name + "' is a scalar");
  const uint64_t width = ids.shape.back();
  if (lengths.size() * width != ids.size()) {
    throw Error("golden tensors '" + ids_name + "' and '" + lengths_name + "' disagree");
  }
  std::vector<std::vector<int32_t>> rows;
  for (size_t r = 0; r < lengths.size(); ++r) {
    const uint64_t length = static_cast<uint64_t>(lengths.values[r]);
    if (length > width) throw Error("golden tensor '" + lengths_name + "' exceeds its ids");
    std::vector<int32_t> row;
    for (uint64_t i = 0; i < length; ++i) row.push_back(ids.integer(r * width + i));
    rows.push_back(std::move(row));
  }
  return rows;
}

// All tensors named prefix + parameter name ("param." weights, "grad." gradients) concatenated
// in transformer_parameters() order: the layout of one contiguous parameter buffer.
inline std::vector<double> golden_parameter_buffer(const GoldenFile& file,
                                                   const std::string& prefix) {
  std::vector<double> buffer;
  for (const ParameterSpec& spec : transformer_parameters(golden_config(file))) {
    const GoldenTensor& t = golden_at(file, prefix + spec.name);
    if (t.shape != spec.shape) {
      throw Error("golden tensor '" + prefix + spec.name + "' has the wrong shape");
    }
    buffer.insert(buffer.end(), t.values.begin(), t.values.end());
  }
  return buffer;
}

// Adds the golden weights to a writer (they are float32 values, so f32 is exact).
inline void add_golden_weights(const GoldenFile& file, ModelWriter& writer,
                               DType dtype = DType::f32) {
  for (const ParameterSpec& spec : transformer_parameters(golden_config(file))) {
    const GoldenTensor& t = golden_at(file, "param." + spec.name);
    if (t.shape != spec.shape) {
      throw Error("golden tensor 'param." + spec.name + "' has the wrong shape");
    }
    const std::vector<float> values = t.to_f32();
    writer.add_tensor_f32(spec.name, dtype, spec.shape, values.data());
  }
}

// Writes the golden model as a flat model file (no tokenizer: use the ids directly).
inline void write_golden_model(const GoldenFile& file, const std::string& path,
                               DType dtype = DType::f32) {
  ModelWriter writer(golden_config(file));
  add_golden_weights(file, writer, dtype);
  writer.set_metadata("golden_seed", std::to_string(golden_at(file, "seed").integer(0)));
  writer.write(path);
}

}  // namespace xf::golden
