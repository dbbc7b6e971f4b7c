// The training step on a CUDA GPU: the forward and backward passes of transformer_graph.h over
// CudaTrainingOps (xf::cuda's kernels and cuBLAS, all enqueued on one stream), plus Adam and the
// loss scale on the device. Host code only (g++).
#include "xf/trainer/cuda_model.h"

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "xf/error.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/dropout.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels/optimizer.h"
#include "xf/kernels/recurrent.h"
#include "xf/kernels/softmax.h"
#include "xf/kernels_cuda/check.h"
#include "xf/kernels_cuda/memory.h"
#include "xf/trainer/transformer_graph.h"

namespace xf::trainer {
namespace {

// One device allocation of `count` T, through xf::cuda's counted allocator; grows, never shrinks.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() { cuda::device_free(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  // Makes room for at least `count` elements; the old contents are lost when it grows.
  void reserve(size_t count) {
    if (count <= count_) return;
    cuda::device_free(data_);
    data_ = nullptr;
    count_ = 0;
    data_ = static_cast<T*>(cuda::device_malloc(count * sizeof(T)));
    count_ = count;
  }
  T* get() const { return data_; }
  size_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

// 256-byte aligned element counts, so every planned buffer suits cuBLAS and vector loads.
size_t aligned_count(int64_t count, size_t element_bytes) {
  return cuda::align_up(static_cast<size_t>(count) * element_bytes, cuda::kArenaAlignment) /
         element_bytes;
}

}  // namespace

const char* to_string(CudaPrecision precision) {
  return precision == CudaPrecision::f32 ? "f32" : "mixed-f16";
}

void require_cuda_training_device(int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw Error(std::string("CUDA training: no usable CUDA device (") +
                (status != cudaSuccess ? cudaGetErrorString(status) : "none visible") + ")");
  }
  if (device < 0 || device >= count)
    throw Error("CUDA training: device " + std::to_string(device) + " does not exist (" +
                std::to_string(count) + " visible)");
}

namespace {

// TrainingOps on a CUDA GPU: kernels_cuda's kernels and cuBLAS on one stream, with the
// precision policy: in mixed_f16 the matrix products read f16 copies (the parameters' copy is
// refreshed by each Adam step, activations and gradients are rounded just before each product)
// and the loss gradient carries the loss scale.
class CudaTrainingOps final : public TrainingOps<float> {
 public:
  CudaTrainingOps(size_t parameter_count, CudaPrecision precision, int device)
      : parameter_count_(parameter_count), precision_(precision) {
    XF_CUDA_CHECK(cudaSetDevice(device));
    XF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    XF_CUBLAS_CHECK(cublasCreate(&cublas_));
    const size_t workspace_bytes = cuda::recommended_cublas_workspace_bytes(device);
    cublas_workspace_.reserve(workspace_bytes);
    cuda::bind_cublas_handle(cublas_, stream_, cublas_workspace_.get(), workspace_bytes);
    for (DeviceArray<float>* buffer : {&parameters_, &gradients_}) {
      buffer->reserve(parameter_count);
      zero(buffer->get(), static_cast<int64_t>(parameter_count));
    }
    if (mixed()) {
      half_parameters_.reserve(parameter_count);
      refresh_half_parameters();
    }
    XF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  ~CudaTrainingOps() override {
    // Nothing to report from a destructor: a failure here is an earlier sticky error.
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  cudaStream_t stream() const { return stream_; }
  bool mixed() const { return precision_ == CudaPrecision::mixed_f16; }
  // The scale the loss gradient is multiplied by (1 in f32).
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  __half* half_parameters() const { return half_parameters_.get(); }
  void refresh_half_parameters() {
    if (mixed())
      cuda::convert(parameters_.get(), static_cast<int64_t>(parameter_count_),
                    half_parameters_.get(), stream_);
  }

  float* parameters() override { return parameters_.get(); }
  float* gradients() override { return gradients_.get(); }
  float* reserve_values(size_t count) override {
    values_.reserve(count);
    return values_.get();
  }
  size_t value_alignment() const override { return cuda::kArenaAlignment; }  // cuBLAS, vectors
  int32_t* reserve_indices(size_t count) override {
    indices_.reserve(count);
    return indices_.get();
  }
  void upload_indices(int32_t* device, const int32_t* host, size_t count) override {
    XF_CUDA_CHECK(cudaMemcpyAsync(device, host, count * sizeof(int32_t), cudaMemcpyHostToDevice,
                                  stream_));
    // The host staging may change before the copy ran: wait.
    XF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void reserve_workspace(int64_t rows, int64_t width, const AttentionShape& largest) override {
    column_floats_ = aligned_count(
        static_cast<int64_t>(cuda::column_reduction_workspace_floats(rows, width)), sizeof(float));
    workspace_.reserve(column_floats_ +
                       cuda::attention_backward_workspace_floats(to_cuda(largest)));
    if (mixed()) {  // two f16 operand copies, each as large as the widest product operand
      half_capacity_ = aligned_count(rows * width, sizeof(__half));
      half_arena_.reserve(2 * half_capacity_);
    }
  }
  int64_t max_key_length() const override { return cuda::max_attention_key_len(); }

  void copy(float* to, const float* from, int64_t count) override {
    XF_CUDA_CHECK(cudaMemcpyAsync(to, from, static_cast<size_t>(count) * sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream_));
  }
  void zero(float* x, int64_t count) override {
    XF_CUDA_CHECK(cudaMemsetAsync(x, 0, static_cast<size_t>(count) * sizeof(float), stream_));
  }
  void add(float* out, const float* a, const float* b, int64_t count) override {
    if (out != a && out != b) copy(out, a, count);
    cuda::add_bias_residual(out, nullptr, out == b ? a : b, count, 1, stream_);
  }
  void dropout(float* x, int64_t count, const DropoutDraw& draw) override {
    cuda::dropout(x, count, rule(draw), stream_);
  }
  void bias_relu_forward(float* x, const float* bias, int64_t rows, int64_t dim) override {
    cuda::bias_relu(x, bias, rows, dim, stream_);
  }
  void bias_relu_backward(float* dy, const float* y, int64_t rows, int64_t dim,
                          float* dbias) override {
    cuda::bias_relu_backward(dy, y, rows, dim, dbias, column_workspace(), stream_);
  }
  void ssru_forward(const float* x, const float* f, int64_t in_stride, int64_t batch, int64_t len, int64_t dim,
                    float* cell, float* out) override {
    cuda::ssru_scan_forward(x, f, in_stride, batch, len, dim, cell, out, stream_);
  }
  void ssru_backward(const float* dout, const float* x, const float* f, int64_t in_stride, const float* cell,
                     int64_t batch, int64_t len, int64_t dim, float* dx, float* df, int64_t d_stride) override {
    cuda::ssru_scan_backward(dout, x, f, in_stride, cell, batch, len, dim, dx, df, d_stride, stream_);
  }
  void embedding_forward(const float* table, int64_t vocab, int64_t dim, const int32_t* ids,
                         const int32_t* positions, int64_t count, float scale,
                         float* out) override {
    cuda::embed(table, vocab, dim, ids, positions, count, scale, out, stream_);
  }
  void embedding_backward(const float* dout, const int32_t* ids, int64_t count, int64_t dim,
                          int64_t vocab, float scale, float* dtable) override {
    cuda::embedding_backward(dout, ids, count, dim, vocab, scale, dtable, stream_);
  }
  void linear_forward(const float* x, const float* weight, const float* bias, int64_t rows,
                      int64_t in, int64_t out, float* y) override {
    if (mixed()) {
      cuda::convert(x, rows * in, half_a(), stream_);
      cuda::gemm(cublas_, false, true, rows, out, in, 1.0f, half_a(), in, half_of(weight), in,
                 0.0f, y, out);
    } else {
      cuda::gemm(cublas_, false, true, rows, out, in, 1.0f, x, in, weight, in, 0.0f, y, out);
    }
    if (bias) cuda::add_bias_residual(y, bias, nullptr, rows, out, stream_);
  }
  void linear_backward(const float* dy, const float* x, const float* weight, int64_t rows,
                       int64_t in, int64_t out, float* dx, bool accumulate_dx, float* dweight,
                       float* dbias) override {
    const float dx_beta = accumulate_dx ? 1.0f : 0.0f;
    if (mixed()) {
      cuda::convert(dy, rows * out, half_a(), stream_);
      cuda::convert(x, rows * in, half_b(), stream_);
      if (dx)
        cuda::gemm(cublas_, false, false, rows, in, out, 1.0f, half_a(), out, half_of(weight), in,
                   dx_beta, dx, in);
      cuda::gemm(cublas_, true, false, out, in, rows, 1.0f, half_a(), out, half_b(), in, 1.0f,
                 dweight, in);
    } else {
      if (dx)
        cuda::gemm(cublas_, false, false, rows, in, out, 1.0f, dy, out, weight, in, dx_beta, dx,
                   in);
      cuda::gemm(cublas_, true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dweight, in);
    }
    if (dbias) cuda::bias_backward(dy, rows, out, dbias, column_workspace(), stream_);
  }
  void layer_norm_forward(const float* x, const float* gamma, const float* beta, float epsilon,
                          int64_t rows, int64_t dim, float* out, float* mean,
                          float* rstd) override {
    cuda::add_bias_residual_layer_norm(x, nullptr, nullptr, gamma, beta, epsilon, rows, dim, out,
                                       mean, rstd, stream_);
  }
  void layer_norm_backward(const float* dout, const float* x, const float* mean,
                           const float* rstd, const float* gamma, int64_t rows, int64_t dim,
                           float* dx, float* dgamma, float* dbeta) override {
    cuda::layer_norm_backward(dout, x, mean, rstd, gamma, rows, dim, dx, dgamma, dbeta,
                              column_workspace(), stream_);
  }
  void attention_forward(const float* q, HeadStrides q_strides, const float* k,
                         HeadStrides k_strides, const float* v, HeadStrides v_strides, float* out,
                         HeadStrides out_strides, const AttentionShape& shape,
                         const int32_t* key_lengths, int64_t causal_offset, float* probabilities,
                         const DropoutDraw* dropout) override {
    const cuda::AttentionShape s = to_cuda(shape);
    cuda::attention(q, to_cuda(q_strides), k, to_cuda(k_strides), v, to_cuda(v_strides), out,
                    to_cuda(out_strides), s, key_lengths, causal_offset, probabilities, stream_);
    if (dropout)  // the output again, from the dropped-out probabilities
      cuda::attention_dropout_values(probabilities, rule(*dropout), v, to_cuda(v_strides), out,
                                     to_cuda(out_strides), s, stream_);
  }
  void attention_backward(const float* dout, HeadStrides dout_strides, const float* q,
                          HeadStrides q_strides, const float* k, HeadStrides k_strides,
                          const float* v, HeadStrides v_strides, const float* probabilities,
                          const DropoutDraw* dropout, float* dq, HeadStrides dq_strides,
                          float* dk, HeadStrides dk_strides, float* dv, HeadStrides dv_strides,
                          const AttentionShape& shape) override {
    const cuda::DropoutRule dropout_rule = dropout ? rule(*dropout) : cuda::DropoutRule{};
    cuda::attention_backward(dout, to_cuda(dout_strides), q, to_cuda(q_strides), k,
                             to_cuda(k_strides), v, to_cuda(v_strides), probabilities,
                             dropout ? &dropout_rule : nullptr, dq, to_cuda(dq_strides), dk,
                             to_cuda(dk_strides), dv, to_cuda(dv_strides), to_cuda(shape),
                             workspace_.get() + column_floats_, stream_);
  }
  void cross_entropy(float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                     float smoothing, bool write_gradient, double* row_loss,
                     double* row_nll) override {
    rows_.reserve(static_cast<size_t>(2 * rows));
    double* device_loss = rows_.get();
    double* device_nll = device_loss + rows;
    cuda::label_smoothed_cross_entropy(logits, targets, rows, vocab, smoothing, -1,
                                       write_gradient, static_cast<float>(loss_scale_),
                                       device_loss, device_nll, stream_);
    const size_t bytes = static_cast<size_t>(rows) * sizeof(double);
    XF_CUDA_CHECK(cudaMemcpyAsync(row_loss, device_loss, bytes, cudaMemcpyDeviceToHost, stream_));
    XF_CUDA_CHECK(cudaMemcpyAsync(row_nll, device_nll, bytes, cudaMemcpyDeviceToHost, stream_));
    XF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  static cuda::HeadStrides to_cuda(HeadStrides s) { return {s.batch, s.head, s.position}; }
  static cuda::AttentionShape to_cuda(const AttentionShape& s) {
    return {s.batch, s.heads, s.query_len, s.key_len, s.head_dim};
  }
  static cuda::DropoutRule rule(const DropoutDraw& draw) {
    cuda::DropoutRule rule = cuda::make_dropout_rule(draw.seed, draw.site, draw.p);
    rule.stream += draw.first_index;
    return rule;
  }
  float* column_workspace() const { return workspace_.get(); }
  __half* half_a() const { return half_arena_.get(); }
  __half* half_b() const { return half_arena_.get() + half_capacity_; }
  // The f16 copy of a parameter: the same offset in half_parameters_.
  const __half* half_of(const float* weight) const {
    return half_parameters_.get() + (weight - parameters_.get());
  }

  size_t parameter_count_;
  CudaPrecision precision_;
  double loss_scale_ = 1.0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DeviceArray<uint8_t> cublas_workspace_;
  DeviceArray<float> parameters_, gradients_;  // [parameter_count]
  DeviceArray<__half> half_parameters_;        // [parameter_count], mixed precision only
  DeviceArray<float> values_;                  // the graph's activations
  DeviceArray<int32_t> indices_;               // ids, positions, targets, lengths
  DeviceArray<float> workspace_;  // column reductions [column_floats_] | attention backward
  size_t column_floats_ = 0;
  DeviceArray<__half> half_arena_;  // two f16 operand copies for the matrix products
  size_t half_capacity_ = 0;        // elements of each f16 copy
  DeviceArray<double> rows_;        // row_loss | row_nll
};

}  // namespace

struct CudaTransformerModel::Impl {
  Impl(const ModelConfig& config, const TrainingOptions& options, CudaPrecision precision,
       int device)
      : ops(parameter_count_of(config), precision, device), graph(config, options, ops) {}

  static size_t parameter_count_of(const ModelConfig& config) {
    validate_config(config);
    const std::vector<ParameterSlot> slots = parameter_slots(config);
    return slots.back().offset + slots.back().size;
  }

  CudaTrainingOps ops;
  TransformerGraph<float> graph;
  CudaPrecision precision = CudaPrecision::f32;
  AdamOptions adam_options;
  LossScaleOptions loss_scale_options;
  int device = 0;
  size_t parameter_count = 0;
  DeviceArray<float> first_moment, second_moment;  // [parameter_count]
  DeviceArray<double> sum_of_squares;  // [kSumOfSquaresPartials + 1], the last is the result
  int64_t adam_steps = 0;
  double current_loss_scale = 1.0;
  double gradients_loss_scale = 1.0;  // the scale the gradients in ops.gradients() carry
  int64_t good_steps = 0;             // since the loss scale last changed

  bool mixed() const { return precision == CudaPrecision::mixed_f16; }
  cudaStream_t stream() const { return ops.stream(); }

  void copy_to_host(float* host, const float* device_buffer) const {
    XF_CUDA_CHECK(cudaMemcpyAsync(host, device_buffer, parameter_count * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream()));
    XF_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  void copy_to_device(float* device_buffer, const float* host) {
    XF_CUDA_CHECK(cudaMemcpyAsync(device_buffer, host, parameter_count * sizeof(float),
                                  cudaMemcpyHostToDevice, stream()));
    XF_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
};

CudaTransformerModel::CudaTransformerModel(const ModelConfig& config,
                                           const TrainingOptions& options,
                                           CudaPrecision precision, const AdamOptions& adam,
                                           const LossScaleOptions& loss_scale, int device) {
  validate_config(config);
  validate_training_options(options);
  require_cuda_training_device(device);
  if (!(loss_scale.initial_scale >= 1.0) || loss_scale.growth_interval < 1 ||
      loss_scale.max_scale < loss_scale.initial_scale)
    throw Error("CUDA training: loss scale options need initial >= 1, growth interval >= 1 and "
                "max >= initial");
  impl_ = std::make_unique<Impl>(config, options, precision, device);
  Impl& m = *impl_;
  m.precision = precision;
  m.adam_options = adam;
  m.loss_scale_options = loss_scale;
  m.device = device;
  m.parameter_count = Impl::parameter_count_of(config);
  for (DeviceArray<float>* buffer : {&m.first_moment, &m.second_moment}) {
    buffer->reserve(m.parameter_count);
    m.ops.zero(buffer->get(), static_cast<int64_t>(m.parameter_count));
  }
  if (m.mixed()) m.current_loss_scale = loss_scale.initial_scale;
  m.ops.set_loss_scale(m.current_loss_scale);
  m.sum_of_squares.reserve(cuda::kSumOfSquaresPartials + 1);
  XF_CUDA_CHECK(cudaStreamSynchronize(m.stream()));
}

CudaTransformerModel::~CudaTransformerModel() = default;

CudaPrecision CudaTransformerModel::precision() const { return impl_->precision; }

std::string CudaTransformerModel::device_name() const {
  cudaDeviceProp properties{};
  XF_CUDA_CHECK(cudaGetDeviceProperties(&properties, impl_->device));
  return properties.name;
}

const std::vector<ParameterSlot>& CudaTransformerModel::slots() const {
  return impl_->graph.slots;
}
size_t CudaTransformerModel::parameter_count() const { return impl_->parameter_count; }

void CudaTransformerModel::set_parameters(const float* host) {
  impl_->copy_to_device(impl_->ops.parameters(), host);
  impl_->ops.refresh_half_parameters();
  XF_CUDA_CHECK(cudaStreamSynchronize(impl_->stream()));
}

void CudaTransformerModel::copy_parameters_to(float* host) const {
  impl_->copy_to_host(host, impl_->ops.parameters());
}

void CudaTransformerModel::copy_gradients_to(float* host) const {
  impl_->copy_to_host(host, impl_->ops.gradients());
  if (impl_->gradients_loss_scale != 1.0) {
    const float inverse = static_cast<float>(1.0 / impl_->gradients_loss_scale);  // a power of 2
    for (size_t i = 0; i < impl_->parameter_count; ++i) host[i] *= inverse;
  }
}

void CudaTransformerModel::set_gradients(const float* host) {
  impl_->copy_to_device(impl_->ops.gradients(), host);
  impl_->gradients_loss_scale = 1.0;
}

void CudaTransformerModel::zero_gradients() {
  impl_->ops.zero(impl_->ops.gradients(), static_cast<int64_t>(impl_->parameter_count));
}

LossSums CudaTransformerModel::forward_backward(const Batch& batch, uint64_t dropout_seed) {
  Impl& m = *impl_;
  m.gradients_loss_scale = m.current_loss_scale;
  m.ops.set_loss_scale(m.current_loss_scale);
  return m.graph.forward_backward(batch, dropout_seed);
}

LossSums CudaTransformerModel::evaluate(const Batch& batch) {
  return impl_->graph.evaluate(batch);
}

void CudaTransformerModel::all_reduce_gradients(Communicator& comm) {
  Impl& m = *impl_;
  XF_CUDA_CHECK(cudaStreamSynchronize(m.stream()));  // the backward pass wrote them on our stream
  comm.all_reduce_device_sum(m.ops.gradients(), m.parameter_count);
  m.gradients_loss_scale = m.current_loss_scale;
}

CudaStepResult CudaTransformerModel::adam_step(double learning_rate, double gradient_scale,
                                               double clip_norm) {
  Impl& m = *impl_;
  CudaStepResult result;
  result.loss_scale = m.gradients_loss_scale;
  double* partials = m.sum_of_squares.get();
  double* total = partials + cuda::kSumOfSquaresPartials;
  cuda::sum_of_squares(m.ops.gradients(), static_cast<int64_t>(m.parameter_count), partials,
                       total, m.stream());
  double sum = 0;
  XF_CUDA_CHECK(cudaMemcpyAsync(&sum, total, sizeof(double), cudaMemcpyDeviceToHost, m.stream()));
  XF_CUDA_CHECK(cudaStreamSynchronize(m.stream()));
  // The loss scale comes out with the per-token scale: one multiply per gradient.
  const double unscaled = gradient_scale / m.gradients_loss_scale;
  result.gradient_norm = std::sqrt(sum) * std::abs(unscaled);
  if (m.mixed() && !std::isfinite(sum)) {  // overflow in f16: skip, retry at half the scale
    result.applied = false;
    m.current_loss_scale = std::max(1.0, m.gradients_loss_scale / 2);
    m.good_steps = 0;
    return result;
  }
  m.adam_steps += 1;
  // Adam::step's constants (optimizer.h), for the device kernel.
  const AdamConstants constants = adam_constants(m.adam_options, m.adam_steps, learning_rate,
                                                 unscaled * clip_factor(result.gradient_norm, clip_norm));
  cuda::adam_step(m.ops.parameters(), m.ops.gradients(), m.first_moment.get(),
                  m.second_moment.get(), static_cast<int64_t>(m.parameter_count), constants,
                  m.mixed() ? m.ops.half_parameters() : nullptr, m.stream());
  if (m.mixed() && ++m.good_steps >= m.loss_scale_options.growth_interval) {
    m.current_loss_scale = std::min(m.loss_scale_options.max_scale, m.current_loss_scale * 2);
    m.good_steps = 0;
  }
  return result;
}

AdamState CudaTransformerModel::adam_state() const {
  AdamState state;
  state.step = impl_->adam_steps;
  state.first_moment.resize(impl_->parameter_count);
  state.second_moment.resize(impl_->parameter_count);
  impl_->copy_to_host(state.first_moment.data(), impl_->first_moment.get());
  impl_->copy_to_host(state.second_moment.data(), impl_->second_moment.get());
  return state;
}

void CudaTransformerModel::set_adam_state(const AdamState& state) {
  Impl& m = *impl_;
  if (state.first_moment.size() != m.parameter_count ||
      state.second_moment.size() != m.parameter_count)
    throw Error("Adam state: moments hold " + std::to_string(state.first_moment.size()) + " and " +
                std::to_string(state.second_moment.size()) + " values, the model has " +
                std::to_string(m.parameter_count) + " parameters");
  if (state.step < 0) throw Error("Adam state: negative step count");
  m.copy_to_device(m.first_moment.get(), state.first_moment.data());
  m.copy_to_device(m.second_moment.get(), state.second_moment.data());
  m.adam_steps = state.step;
}

double CudaTransformerModel::loss_scale() const { return impl_->current_loss_scale; }

}  // namespace xf::trainer
