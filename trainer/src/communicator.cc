#include "xf/trainer/communicator.h"

#include "xf/error.h"

namespace xf::trainer {

void Communicator::all_reduce_device_sum(float*, size_t) {
  throw Error(description() + " sums host memory only: GPU ranks need NCCL");
}

void broadcast_string(Communicator& comm, std::string* text, int root) {
  uint64_t size = text->size();
  comm.broadcast(&size, sizeof(size), root);
  text->resize(size);
  if (size > 0) comm.broadcast(text->data(), size, root);
}

}  // namespace xf::trainer
