#pragma once
// Tensors as other software stores them, widened to f32: safetensors (Hugging Face) and .npz
// (Marian, numpy). Every refusal is one line naming the file and what is wrong.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace xf::importers {

struct ForeignTensor {
  std::vector<uint64_t> shape;
  std::vector<float> values;  // row-major
  std::string bytes;          // the raw bytes instead, for 1-byte element types (Marian's text items)
  // Marian's intgemm8 matrices (read_marian_bin): `bytes` holds the int8 values of the matrix
  // transposed ([out, in] rows of Marian's [in, out] shape), each value q standing for
  // q * (1 / intgemm8_multiplier); `values` holds those f32 values. 0: not an intgemm8 matrix
  // (an intgemm8 embedding is not one: Marian widens it to f32 at load time, so `values` only).
  float intgemm8_multiplier = 0;
};

using ForeignTensors = std::map<std::string, ForeignTensor>;

// A .safetensors file: an 8-byte little-endian header size, a JSON header, the data. F32, F16
// and BF16 tensors.
ForeignTensors read_safetensors(const std::string& path);

// A .npz file (a zip of .npy arrays, stored or deflated): float32/float16 arrays, and 1-byte
// arrays (int8, uint8, S1) as raw bytes. The ".npy" of each name is dropped.
ForeignTensors read_npz(const std::string& path);

// Marian's binary model (a .bin from marian-conv, or saved by Marian under a .bin name): version
// 1, the item headers, names, shapes, then each item's bytes from a 256-byte boundary. Items of
// type float32, int8 (special:model.yml) and intgemm8 (the hardware-independent layout that
// `marian-conv --gemm-type intgemm8` writes and Firefox Translations ships: see ForeignTensor;
// the precomputed activation multipliers of its *.alphas.bin, float32 items "..._QuantMultA",
// are read like any item and left unused by the importer); any other type (float16, the packed
// or ISA-prepared types such as intgemm8avx2) is refused naming the item and the type.
ForeignTensors read_marian_bin(const std::string& path);

// A pytorch_model.bin (torch.save's zip: <prefix>/data.pkl, a pickle of a dict of tensors, and
// <prefix>/data/<key>, each storage's little-endian bytes), read without PyTorch: the pickle is
// run by a strict reader of the opcodes and globals torch.save writes for a state dict of
// contiguous F32, F16 or BF16 tensors; anything else is refused naming the opcode or global.
ForeignTensors read_pytorch_bin(const std::string& path);

// A zip archive's entries, each read whole: the container of .npz and pytorch_model.bin. Throws
// "<path>: not a complete <what> (zip) file: <reason>" when it does not open.
class ZipArchive {
 public:
  ZipArchive(const std::string& path, const std::string& what);
  ~ZipArchive();
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  // Throws "<path>: truncated entry '<name>' in the <what>" (or "no entry").
  std::string read(const std::string& name) const;

 private:
  std::string path_, what_;
  void* archive_;  // zip_t
};

// The whole file as bytes; throws "<path>: cannot read (<reason>)" naming `what` it should be.
std::string read_whole_file(const std::string& path, const std::string& what);

}  // namespace xf::importers
