// Checkpoint directories: write atomically, read with checks, keep the last M, keep the best.
#include "xf/trainer/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "xf/error.h"
#include "xf/format/model_writer.h"
#include "xf/format/parameters.h"

namespace xf::trainer {
namespace fs = std::filesystem;

namespace {

constexpr const char* kMarkerFile = "checkpoint.txt";
constexpr const char* kConfigFile = "config.txt";
constexpr const char* kOptionsFile = "options.txt";
constexpr const char* kParametersFile = "parameters.bin";
constexpr const char* kAdamFile = "adam.bin";
constexpr const char* kTokenizerFile = "sentencepiece.model";
constexpr const char* kMarkerHeader = "xf-checkpoint";

// Binary float files: magic, version, a count header, the values, and an FNV-1a checksum of the
// value bytes so a corrupt file is refused instead of silently resumed.
struct FloatFileHeader {
  char magic[4];
  uint32_t version;
  int64_t step;    // Adam only
  uint64_t count;  // floats per array
  uint64_t arrays;
};


std::string format_double(double value) {
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

void write_float_arrays(const std::string& path, const char magic[4], int64_t step,
                        const std::vector<const std::vector<float>*>& arrays) {
  FloatFileHeader header{};
  std::memcpy(header.magic, magic, 4);
  header.version = kCheckpointVersion;
  header.step = step;
  header.count = arrays.empty() ? 0 : arrays[0]->size();
  header.arrays = arrays.size();
  std::string bytes(reinterpret_cast<const char*>(&header), sizeof(header));
  uint64_t checksum = fnv1a_64("");
  for (const auto* array : arrays) {
    std::string_view data(reinterpret_cast<const char*>(array->data()),
                          array->size() * sizeof(float));
    checksum = fnv1a_64(data, checksum);
    bytes.append(data);
  }
  bytes.append(reinterpret_cast<const char*>(&checksum), sizeof(checksum));
  write_file_atomically(path, bytes.data(), bytes.size());
}

// Reads `arrays` arrays of equal length; returns them and the header's step.
std::vector<std::vector<float>> read_float_arrays(const std::string& path, const char magic[4],
                                                  uint64_t arrays, int64_t* step) {
  std::string bytes = read_file_bytes(path);
  FloatFileHeader header{};
  if (bytes.size() < sizeof(header)) throw Error(path + ": truncated (no header)");
  std::memcpy(&header, bytes.data(), sizeof(header));
  if (std::memcmp(header.magic, magic, 4) != 0) throw Error(path + ": wrong file magic");
  if (header.version != kCheckpointVersion) {
    throw Error(path + ": checkpoint version " + std::to_string(header.version) +
                " is not supported (this build reads " + std::to_string(kCheckpointVersion) + ")");
  }
  if (header.arrays != arrays) throw Error(path + ": unexpected number of arrays");
  uint64_t expected = sizeof(header) + arrays * header.count * sizeof(float) + sizeof(uint64_t);
  if (header.count > (bytes.size() / sizeof(float)) || bytes.size() != expected) {
    throw Error(path + ": size " + std::to_string(bytes.size()) + " bytes, expected " +
                std::to_string(expected) + " (truncated or corrupt)");
  }
  std::string_view payload(bytes.data() + sizeof(header), arrays * header.count * sizeof(float));
  uint64_t stored_checksum;
  std::memcpy(&stored_checksum, bytes.data() + bytes.size() - sizeof(uint64_t), sizeof(uint64_t));
  if (fnv1a_64(payload) != stored_checksum) throw Error(path + ": checksum mismatch (corrupt)");
  std::vector<std::vector<float>> result(arrays, std::vector<float>(header.count));
  for (uint64_t a = 0; a < arrays; ++a) {
    std::memcpy(result[a].data(), payload.data() + a * header.count * sizeof(float),
                header.count * sizeof(float));
  }
  if (step) *step = header.step;
  return result;
}

const std::string& required(const std::map<std::string, std::string>& values,
                            const std::string& key, const std::string& label) {
  auto it = values.find(key);
  if (it == values.end()) throw Error(label + ": missing key '" + key + "'");
  return it->second;
}

// All of `text` read by `read` (std::stoll, std::stoull, std::stod), else the Error
// "<what>: '<text>' is <kind>".
template <typename Read>
auto read_whole(const std::string& text, const std::string& what, const char* kind, Read read) {
  try {
    size_t used = 0;
    const auto value = read(text, &used);
    if (used != text.size()) throw std::invalid_argument("trailing");
    return value;
  } catch (const std::exception&) {
    throw Error(what + ": '" + text + "' is " + kind);
  }
}

int64_t parse_int(const std::string& text, const std::string& what) {
  return read_whole(text, what, "not an integer",
                    [](const std::string& t, size_t* used) { return std::stoll(t, used); });
}

uint64_t parse_uint(const std::string& text, const std::string& what) {
  const char* kind = "not a non-negative integer";
  if (text.empty() || text[0] == '-') throw Error(what + ": '" + text + "' is " + kind);
  return read_whole(text, what, kind,
                    [](const std::string& t, size_t* used) { return std::stoull(t, used); });
}

double parse_double(const std::string& text, const std::string& what) {
  return read_whole(text, what, "not a number",
                    [](const std::string& t, size_t* used) { return std::stod(t, used); });
}

std::map<std::string, std::string> progress_to_key_values(const TrainingProgress& p) {
  return {
      {"step", std::to_string(p.step)},
      {"data_epoch", std::to_string(p.data.epoch)},
      {"data_batch_index", std::to_string(p.data.batch_index)},
      {"data_seed", std::to_string(p.data.seed)},
      {"rng_seed", std::to_string(p.rng_seed)},
      {"elapsed_seconds", format_double(p.elapsed_seconds)},
      {"tokens_seen", std::to_string(p.tokens_seen)},
      {"has_best", p.has_best ? "1" : "0"},
      {"best_valid_loss", format_double(p.best_valid_loss)},
      {"best_valid_bleu", format_double(p.best_valid_bleu)},
      {"validations_without_improvement", std::to_string(p.validations_without_improvement)},
      {"last_valid_loss", format_double(p.last_valid_loss)},
      {"last_valid_bleu", format_double(p.last_valid_bleu)},
  };
}

TrainingProgress progress_from_key_values(const std::map<std::string, std::string>& v,
                                          const std::string& label) {
  auto get = [&](const char* key) { return required(v, key, label); };
  auto what = [&](const char* key) { return label + ": " + key; };
  TrainingProgress p;
  p.step = parse_int(get("step"), what("step"));
  p.data.epoch = parse_uint(get("data_epoch"), what("data_epoch"));
  p.data.batch_index = parse_uint(get("data_batch_index"), what("data_batch_index"));
  p.data.seed = parse_uint(get("data_seed"), what("data_seed"));
  p.rng_seed = parse_uint(get("rng_seed"), what("rng_seed"));
  p.elapsed_seconds = parse_double(get("elapsed_seconds"), what("elapsed_seconds"));
  p.tokens_seen = parse_int(get("tokens_seen"), what("tokens_seen"));
  p.has_best = get("has_best") == "1";
  p.best_valid_loss = parse_double(get("best_valid_loss"), what("best_valid_loss"));
  p.best_valid_bleu = parse_double(get("best_valid_bleu"), what("best_valid_bleu"));
  p.validations_without_improvement =
      parse_int(get("validations_without_improvement"), what("validations_without_improvement"));
  p.last_valid_loss = parse_double(get("last_valid_loss"), what("last_valid_loss"));
  p.last_valid_bleu = parse_double(get("last_valid_bleu"), what("last_valid_bleu"));
  return p;
}

void write_text(const std::string& path, const std::string& text) {
  write_file_atomically(path, text.data(), text.size());
}

// Moves `from` onto `to`, replacing an existing directory there: the old one is first renamed
// aside, so at every moment either the old or the new checkpoint exists under a name.
void replace_directory(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::path old = to.parent_path() / ("." + to.filename().string() + ".old." +
                                     std::to_string(::getpid()));
  bool had_old = fs::exists(to);
  if (had_old) {
    fs::remove_all(old, ec);
    fs::rename(to, old, ec);
    if (ec) throw Error(to.string() + ": cannot move the old checkpoint aside: " + ec.message());
  }
  fs::rename(from, to, ec);
  if (ec) throw Error(to.string() + ": cannot rename the new checkpoint into place: " + ec.message());
  if (had_old) fs::remove_all(old, ec);
}

}  // namespace

std::string checkpoint_name(int64_t step) {
  char name[40];
  std::snprintf(name, sizeof(name), "step-%06lld", static_cast<long long>(step));
  return name;
}

std::map<std::string, std::string> parse_key_values(const std::string& text,
                                                    const std::string& label,
                                                    size_t first_line_number) {
  std::map<std::string, std::string> values;
  std::istringstream lines(text);
  std::string line;
  size_t number = first_line_number - 1;
  while (std::getline(lines, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error(label + ":" + std::to_string(number) + ": expected key=value");
    }
    values[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return values;
}

std::map<std::string, std::string> read_key_values(const std::string& path) {
  return parse_key_values(read_file_bytes(path), path, 1);
}

std::string format_key_values(const std::map<std::string, std::string>& values) {
  std::string text;
  for (const auto& [key, value] : values) {
    if (key.find_first_of("=\n") != std::string::npos || value.find('\n') != std::string::npos) {
      throw Error("key=value: '" + key + "' cannot be written on one line");
    }
    text += key + "=" + value + "\n";
  }
  return text;
}

std::map<std::string, std::string> config_to_key_values(const ModelConfig& config) {
  const auto fields = config_to_text(config);
  return {fields.begin(), fields.end()};
}

ModelConfig config_from_key_values(const std::map<std::string, std::string>& values,
                                   const std::string& label) {
  try {
    return config_from_text([&](const std::string& key) -> std::optional<std::string> {
      const auto it = values.find(key);
      if (it == values.end()) return std::nullopt;
      return it->second;
    });
  } catch (const Error& e) {
    throw Error(label + ": " + e.what());
  }
}

void write_checkpoint(const std::string& directory, const Checkpoint& checkpoint) {
  const size_t parameter_count = transformer_parameter_count(checkpoint.config);
  if (checkpoint.parameters.size() != parameter_count) {
    throw Error(directory + ": " + std::to_string(checkpoint.parameters.size()) +
                " parameters, the config needs " + std::to_string(parameter_count));
  }
  if (checkpoint.adam.first_moment.size() != parameter_count ||
      checkpoint.adam.second_moment.size() != parameter_count) {
    throw Error(directory + ": Adam moments do not match the parameter count");
  }
  fs::path target(directory);
  if (target.filename().empty()) target = target.parent_path();  // "dir/" -> "dir"
  fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw Error(parent.string() + ": cannot create directory: " + ec.message());
  fs::path temp = parent / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(temp, ec);
  if (!fs::create_directory(temp, ec) || ec) {
    throw Error(temp.string() + ": cannot create directory: " + ec.message());
  }
  const std::string t = temp.string() + "/";
  write_text(t + kConfigFile, format_key_values(config_to_key_values(checkpoint.config)));
  write_text(t + kOptionsFile, format_key_values(checkpoint.options));
  write_float_arrays(t + kParametersFile, "XFPB", checkpoint.progress.step, {&checkpoint.parameters});
  write_float_arrays(t + kAdamFile, "XFAD", checkpoint.adam.step,
                     {&checkpoint.adam.first_moment, &checkpoint.adam.second_moment});
  write_text(t + kTokenizerFile, checkpoint.tokenizer_model);
  // The marker last: a directory with a marker has every other file.
  write_text(t + kMarkerFile, std::string(kMarkerHeader) + " " + std::to_string(kCheckpointVersion) +
                                  "\n" + format_key_values(progress_to_key_values(checkpoint.progress)));
  replace_directory(temp, target);
}

Checkpoint read_checkpoint(const std::string& directory) {
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) {
    throw Error(directory + ": not an xf checkpoint (not a directory)");
  }
  const std::string d = directory + "/";
  if (!fs::exists(d + kMarkerFile, ec)) {
    throw Error(directory + ": not an xf checkpoint (no " + kMarkerFile + ")");
  }
  std::string marker = read_file_bytes(d + kMarkerFile);
  std::string first_line = marker.substr(0, marker.find('\n'));
  std::string expected_header = std::string(kMarkerHeader) + " ";
  if (first_line.rfind(expected_header, 0) != 0) {
    throw Error(d + kMarkerFile + ": not an xf checkpoint marker");
  }
  if (first_line != expected_header + std::to_string(kCheckpointVersion)) {
    throw Error(d + kMarkerFile + ": checkpoint version '" + first_line.substr(expected_header.size()) +
                "' is not supported");
  }
  for (const char* file : {kConfigFile, kOptionsFile, kParametersFile, kAdamFile, kTokenizerFile}) {
    if (!fs::exists(d + file, ec)) throw Error(directory + ": checkpoint is missing " + file);
  }
  Checkpoint checkpoint;
  size_t first_newline = marker.find('\n');
  std::string progress_text = first_newline == std::string::npos ? "" : marker.substr(first_newline + 1);
  checkpoint.progress = progress_from_key_values(
      parse_key_values(progress_text, d + kMarkerFile, 2), d + kMarkerFile);
  checkpoint.config = config_from_key_values(read_key_values(d + kConfigFile), d + kConfigFile);
  checkpoint.options = read_key_values(d + kOptionsFile);
  int64_t parameter_step = 0;
  checkpoint.parameters = read_float_arrays(d + kParametersFile, "XFPB", 1, &parameter_step)[0];
  auto moments = read_float_arrays(d + kAdamFile, "XFAD", 2, &checkpoint.adam.step);
  checkpoint.adam.first_moment = std::move(moments[0]);
  checkpoint.adam.second_moment = std::move(moments[1]);
  checkpoint.tokenizer_model = read_file_bytes(d + kTokenizerFile);
  // xf-train always saves its tokenizer: an empty file would convert into a model without one.
  if (checkpoint.tokenizer_model.empty()) {
    throw Error(d + kTokenizerFile + ": empty (a checkpoint holds its SentencePiece model)");
  }

  const size_t parameter_count = transformer_parameter_count(checkpoint.config);
  if (checkpoint.parameters.size() != parameter_count) {
    throw Error(d + kParametersFile + ": " + std::to_string(checkpoint.parameters.size()) +
                " parameters, config.txt needs " + std::to_string(parameter_count));
  }
  if (checkpoint.adam.first_moment.size() != parameter_count) {
    throw Error(d + kAdamFile + ": moments do not match the parameter count");
  }
  if (parameter_step != checkpoint.progress.step) {
    throw Error(directory + ": parameters.bin is from step " + std::to_string(parameter_step) +
                ", checkpoint.txt says " + std::to_string(checkpoint.progress.step));
  }
  return checkpoint;
}

std::vector<std::string> list_checkpoints(const std::string& run_directory) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(run_directory, ec)) return {};
  for (const auto& entry : fs::directory_iterator(run_directory, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !entry.is_directory()) continue;
    std::string digits = name.substr(5);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    found.emplace_back(std::stoll(digits), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& [step, path] : found) paths.push_back(std::move(path));
  return paths;
}

std::string save_checkpoint(const std::string& run_directory, const Checkpoint& checkpoint,
                            int keep_last) {
  std::string path = run_directory + "/" + checkpoint_name(checkpoint.progress.step);
  write_checkpoint(path, checkpoint);
  if (keep_last > 0) {
    auto all = list_checkpoints(run_directory);
    for (size_t i = 0; i + keep_last < all.size(); ++i) {
      std::error_code ec;
      fs::remove_all(all[i], ec);
    }
  }
  return path;
}

std::string save_best_checkpoint(const std::string& run_directory, const Checkpoint& checkpoint) {
  std::string path = run_directory + "/best";
  write_checkpoint(path, checkpoint);
  return path;
}

}  // namespace xf::trainer
