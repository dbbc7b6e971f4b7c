#pragma once
// A model's training-time options (dropout, label smoothing), read by every pass of every model.
namespace xf::trainer {

struct TrainingOptions {
  float dropout = 0.1f;            // on sub-layer outputs and on embedding + position sums
  float attention_dropout = 0.0f;  // on attention probabilities
  float label_smoothing = 0.1f;    // q = (1 - eps) * onehot(y) + eps / vocab (PyTorch's rule)
};

}  // namespace xf::trainer
