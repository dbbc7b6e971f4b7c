#pragma once
// Test-only reads of a backend's intermediate values, apart from the Backend interface that the
// Translator uses. Every backend built on TransformerBackend implements them; tests reach them
// through probe(). Internal: not installed, not part of any public header.
#include <vector>

#include "backend.h"
#include "xf/error.h"

namespace xf {
struct TensorView;
}

namespace xf::runtime {

class BackendProbe {
 public:
  virtual ~BackendProbe() = default;
  // The last encoder output [sentences, source_len, d_model] and the last step's logits
  // [rows, target_vocab], copied to host memory as f32.
  virtual void copy_encoder_output(float* out) const = 0;
  virtual void copy_logits(float* out) const = 0;
  // The stored matrices whose mapped pages the backend released (ModelFile::release_pages)
  // because it reads copies of them. Views into the model's ModelFile.
  virtual std::vector<const TensorView*> released_weights() const = 0;
};

inline BackendProbe& probe(Backend& backend) {
  auto* probe = dynamic_cast<BackendProbe*>(&backend);
  if (probe == nullptr) throw Error("internal: this backend has no test probe");
  return *probe;
}

}  // namespace xf::runtime
