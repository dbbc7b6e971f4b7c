// Thousands of randomly corrupted files: each must give an xf::Error or a valid model, never a
// crash, an over-read (run it under the asan preset) or another exception. When a model is
// valid, every tensor byte is read. Besides blind byte damage, some mutations rewrite header
// fields and recompute the checksum, so the checks behind it are reached too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>

#include "format_test_support.h"
#include "xf/error.h"
#include "xf/format/file_layout.h"
#include "xf/format/model_file.h"

namespace xf::test {
namespace {

using Bytes = std::vector<uint8_t>;

uint32_t header_size_of(const Bytes& file) {
  uint32_t size = 0;
  if (file.size() >= 4) std::memcpy(&size, file.data(), 4);
  return size;
}

void recompute_checksum(Bytes& file) {
  const uint32_t header_size = header_size_of(file);
  if (file.size() < kPreambleSize || header_size > file.size() - kPreambleSize) return;
  const uint32_t crc = crc32(file.data() + kPreambleSize, header_size);
  std::memcpy(file.data() + 4, &crc, 4);
}

// A value that is often near a meaningful boundary: 0, small, aligned, huge, or random.
uint64_t interesting_value(std::mt19937_64& rng, uint64_t near) {
  switch (rng() % 8) {
    case 0: return 0;
    case 1: return rng() % 8;
    case 2: return near + (rng() % 3) * 256 - 256;
    case 3: return near + rng() % 16;
    case 4: return ~uint64_t{0} - rng() % 512;
    case 5: return uint64_t{1} << (rng() % 64);
    case 6: return (rng() % 64) * 256;
    default: return rng();
  }
}

// One field of a hand-made description changed, then rebuilt with a valid checksum.
Bytes rewrite_field(const Bytes& valid, std::mt19937_64& rng) {
  HandMadeModel m = HandMadeModel::describe(valid);
  TensorEntry& t = m.tensors[rng() % m.tensors.size()];
  switch (rng() % 14) {
    case 0: t.offset = interesting_value(rng, t.offset); break;
    case 1: t.size = interesting_value(rng, t.size); break;
    case 2: t.scales_offset = interesting_value(rng, t.scales_offset); break;
    case 3: t.dtype = static_cast<int8_t>(rng()); break;
    case 4:
      if (!t.shape.empty()) t.shape[rng() % t.shape.size()] = interesting_value(rng, t.shape[0]);
      break;
    case 5: t.shape.resize(rng() % 6, 1 + rng() % 4); break;
    case 6: m.blob_size = interesting_value(rng, m.blob_size); break;
    case 7: m.format_version = static_cast<uint32_t>(interesting_value(rng, 1)); break;
    case 8: m.tensors.erase(m.tensors.begin() + rng() % m.tensors.size()); break;
    case 9:
      if (rng() % 2) {
        m.tensors.push_back(m.tensors[rng() % m.tensors.size()]);  // a duplicate entry
      } else {
        // A well-formed extra entry, sorted last, with bytes of its own.
        TensorEntry extra = m.tensors[rng() % m.tensors.size()];
        extra.name = "~extra";
        extra.offset = m.blob.size();
        m.blob.resize(align_up(extra.offset + extra.size, kBlobAlignment));
        if (extra.scales_offset) {
          extra.scales_offset = m.blob.size();
          m.blob.resize(align_up(extra.scales_offset + extra.shape[0] * 4, kBlobAlignment));
        }
        m.blob_size = m.blob.size();
        m.tensors.push_back(extra);
      }
      break;
    case 10: {
      uint32_t* fields[] = {&m.config.d_model, &m.config.num_heads, &m.config.d_ff,
                            &m.config.encoder_layers, &m.config.decoder_layers,
                            &m.config.source_vocab_size, &m.config.target_vocab_size,
                            &m.config.max_positions};
      uint32_t& field = *fields[rng() % 8];
      field = static_cast<uint32_t>(interesting_value(rng, field));
      break;
    }
    case 12: {  // the blob cut short, with blob_size and file size agreeing
      const size_t cut = 1 + rng() % std::min<size_t>(600, m.blob.size());
      m.blob.resize(m.blob.size() - cut);
      m.blob_size = m.blob.size();
      break;
    }
    case 13: {  // the tensor with the largest offset moved towards the end
      TensorEntry* last = &m.tensors[0];
      for (TensorEntry& e : m.tensors) {
        if (e.offset > last->offset) last = &e;
      }
      last->offset += 256 * (1 + rng() % 2);
      break;
    }
    default:
      m.config.shared_embeddings = !m.config.shared_embeddings;
      m.config.output_bias = rng() % 2;
      break;
  }
  return m.build();
}

Bytes mutate(const Bytes& valid, std::mt19937_64& rng, int kind) {
  Bytes file = valid;
  const uint32_t header_size = header_size_of(valid);
  switch (kind) {
    case 0: {  // flip a few bits anywhere
      const int flips = 1 + rng() % 8;
      for (int i = 0; i < flips; ++i) file[rng() % file.size()] ^= uint8_t(1u << (rng() % 8));
      break;
    }
    case 1:  // truncate
      file.resize(rng() % file.size());
      break;
    case 2: {  // insert random bytes
      const size_t at = rng() % (file.size() + 1), count = 1 + rng() % 300;
      Bytes noise(count);
      for (uint8_t& b : noise) b = static_cast<uint8_t>(rng());
      file.insert(file.begin() + at, noise.begin(), noise.end());
      break;
    }
    case 3: {  // delete a range
      const size_t at = rng() % file.size();
      const size_t count = 1 + rng() % std::min<size_t>(300, file.size() - at);
      file.erase(file.begin() + at, file.begin() + at + count);
      break;
    }
    case 4: {  // damage the header's bytes, then make the checksum agree
      const int writes = 1 + rng() % 4;
      for (int i = 0; i < writes; ++i) {
        file[kPreambleSize + rng() % header_size] = static_cast<uint8_t>(rng());
      }
      recompute_checksum(file);
      break;
    }
    case 5: {  // a plausible header size in the preamble
      const uint32_t new_size = static_cast<uint32_t>(interesting_value(rng, header_size));
      std::memcpy(file.data(), &new_size, 4);
      if (rng() % 2) recompute_checksum(file);
      break;
    }
    default:
      file = rewrite_field(valid, rng);
      break;
  }
  return file;
}

// Reads every byte a valid model hands out, so an out-of-bounds view would be caught.
uint64_t touch_every_tensor_byte(const ModelFile& model) {
  uint64_t sum = 0;
  for (const TensorView& t : model.tensors()) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    for (size_t i = 0; i < t.bytes; ++i) sum += p[i];
    if (t.row_scales) {
      for (uint64_t r = 0; r < t.rows(); ++r) sum += static_cast<uint64_t>(t.row_scales[r] > 0);
    }
  }
  for (char c : model.source_tokenizer()) sum += static_cast<uint8_t>(c);
  for (char c : model.target_tokenizer()) sum += static_cast<uint8_t>(c);
  return sum;
}

// The message without the label, quoted names and numbers: which check fired.
std::string check_name(const std::string& message) {
  std::string out;
  bool quoted = false;
  for (char c : message.substr(message.find(": ") + 2)) {
    if (c == '\'') quoted = !quoted;
    if (!quoted && !std::isdigit(static_cast<unsigned char>(c))) out += c;
  }
  return out;
}

TEST(FormatMutation, CorruptedFilesGiveAnErrorOrAValidModel) {
  ModelConfig separate = tiny_config();
  separate.shared_embeddings = false;
  separate.tied_output = false;
  separate.output_bias = true;
  separate.norm_position = NormPosition::pre;
  // Format version 3: SSRU decoder layers, and a stored shortlist for the reader to check.
  ModelConfig ssru = tiny_config();
  ssru.decoder_layer_kind = DecoderLayerKind::ssru;
  ModelWriter ssru_writer(ssru);
  add_parameters(ssru_writer, random_parameters(ssru, DType::f32, 4));
  LexicalShortlist lists;
  lists.first_num = 3;
  lists.offsets = {0, 2, 2, 5};
  lists.targets = {1, 7, 0, 4, 11};
  ssru_writer.set_shortlist(lists);
  const std::vector<Bytes> valid_files = {valid_model_bytes(tiny_config(), DType::f32, 1),
                                          valid_model_bytes(separate, DType::int8, 2),
                                          valid_model_bytes(tiny_config(), DType::f16, 3),
                                          ssru_writer.serialize()};
  constexpr int kMutations = 4000, kKinds = 7;
  std::mt19937_64 rng(20240601);
  std::map<std::string, int> errors_by_check;
  int valid_models = 0;
  for (int i = 0; i < kMutations; ++i) {
    const int kind = i % kKinds;
    const Bytes file = mutate(valid_files[rng() % valid_files.size()], rng, kind);
    // An exact-size heap copy: AddressSanitizer flags a read one byte past the end.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[std::max<size_t>(file.size(), 1)]);
    std::copy(file.begin(), file.end(), exact.get());
    try {
      const auto model = ModelFile::from_memory(exact.get(), file.size(), "mutant");
      touch_every_tensor_byte(*model);
      ++valid_models;
    } catch (const Error& e) {
      const std::string message = e.what();
      ASSERT_EQ(message.rfind("mutant: ", 0), 0u) << message;
      ASSERT_EQ(message.find('\n'), std::string::npos) << message;
      ++errors_by_check[check_name(message)];
    }
  }
  // The mutations must reach deep into the reader, not just trip the checksum.
  for (const char* check :
       {"checksum mismatch", "fails FlatBuffers verification", "the header needs",
        "the weights need", "unexpected bytes after the weight blob", "invalid model config",
        "newer than this reader", "unknown dtype", "is not a multiple of", "lies past the end",
        "disagrees with shape", "not sorted by name", "missing tensor", "unexpected tensor",
        "the config needs"}) {
    const bool reached = std::any_of(errors_by_check.begin(), errors_by_check.end(),
                                     [&](const auto& entry) {
                                       return entry.first.find(check) != std::string::npos;
                                     });
    EXPECT_TRUE(reached) << "no mutation reached the check: " << check;
  }
  std::string summary;
  for (const auto& [check, count] : errors_by_check) {
    summary += "  " + std::to_string(count) + "  " + check + "\n";
  }
  std::printf("%d mutants: %d valid models, errors by check:\n%s", kMutations, valid_models,
              summary.c_str());
}

}  // namespace
}  // namespace xf::test
