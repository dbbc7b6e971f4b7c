#pragma once
// The pickle (data.pkl) of a state dict saved by torch.save, read without Python or PyTorch: a
// strict interpreter of exactly the opcodes and globals torch.save writes for a dict of
// tensors (protocol 2: collections.OrderedDict, torch._utils._rebuild_tensor_v2, persistent ids
// ('storage', torch.FloatStorage, key, location, numel)). Any other opcode, global or call is
// refused, so no pickle can make the reader do more than build that dict.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace xf::importers {

// One tensor as the pickle describes it; its values are in the archive's <prefix>/data/<key>.
struct TorchTensorRef {
  std::string storage_key;
  std::string dtype;              // "f32", "f16" or "bf16" (the storage's type)
  uint64_t storage_elements = 0;  // the storage's length, in elements
  uint64_t offset = 0;            // where the tensor starts in it, in elements
  std::vector<uint64_t> shape;    // row-major: non-contiguous strides are refused
};

// The (name, tensor) entries of the pickled dict, in order. Throws xf::Error with a one-line
// problem (the caller names the file): an opcode or global outside the subset, a malformed or
// truncated pickle, a non-contiguous tensor, a dict entry that is not a tensor.
std::vector<std::pair<std::string, TorchTensorRef>> read_state_dict_pickle(const std::string& pickle);

}  // namespace xf::importers
