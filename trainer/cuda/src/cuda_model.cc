// The training step on a CUDA GPU: trainer/src/transformer.cc's forward and backward passes, the
// same residual blocks, dropout sites and loss, over device buffers. Host code only (g++): the
// GPU work is xf::cuda's kernels and cuBLAS, all enqueued on one stream.
#include "xf/trainer/cuda_model.h"

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <utility>

#include "xf/error.h"
#include "xf/kernels_cuda/backward.h"
#include "xf/kernels_cuda/check.h"
#include "xf/kernels_cuda/kernels.h"
#include "xf/kernels_cuda/matmul.h"
#include "xf/kernels_cuda/memory.h"

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

struct CudaTransformerModel::Impl {
  struct Linear {
    size_t weight = 0, bias = 0;
    int64_t out = 0, in = 0;
  };
  struct Norm {
    size_t gamma = 0, beta = 0;
  };
  struct EncoderLayer {
    Linear qkv, self_output, ffn_inner, ffn_outer;
    Norm self_norm, ffn_norm;
  };
  struct DecoderLayer {
    Linear qkv, self_output, cross_query, cross_key_value, cross_output, ffn_inner, ffn_outer;
    Norm self_norm, cross_norm, ffn_norm;
  };
  // One residual block's activations (rows = B*S or B*T), as transformer.cc's Block; the
  // sub-layer output and the residual sum share a buffer (the sum is formed in place), and no
  // dropout mask is stored (the backward pass recomputes it from the hash).
  struct Block {
    const float* x = nullptr;  // block input [rows, d] (not owned)
    float* sub_in = nullptr;   // LayerNorm(x) when pre-norm [rows, d]
    float* sum = nullptr;      // Dropout(F(sub_in)), then x + that [rows, d]
    float* y = nullptr;        // block output: LayerNorm(sum) when post-norm, else sum
    float* mean = nullptr;     // [rows]
    float* rstd = nullptr;     // [rows]
    uint64_t site = 0;         // dropout site of the sub-layer output
  };
  struct Attention {
    float* probabilities = nullptr;  // [B, H, Tq, Tk]
    float* context = nullptr;        // [rows, d]
    uint64_t site = 0;               // dropout site of the probabilities
  };
  struct EncoderActivations {
    Block self, ffn;
    float* qkv = nullptr;     // [B*S, 3d]
    Attention attention;
    float* hidden = nullptr;  // [B*S, d_ff] after ReLU
  };
  struct DecoderActivations {
    Block self, cross, ffn;
    float* qkv = nullptr;        // [B*T, 3d]
    Attention self_attention;
    float* query = nullptr;      // [B*T, d]
    float* key_value = nullptr;  // [B*S, 2d]
    Attention cross_attention;
    float* hidden = nullptr;     // [B*T, d_ff]
  };

  ModelConfig config;
  TrainingOptions options;
  CudaPrecision precision = CudaPrecision::f32;
  AdamOptions adam_options;
  LossScaleOptions loss_scale_options;
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  DeviceArray<uint8_t> cublas_workspace;

  std::vector<ParameterSlot> slots;
  std::unordered_map<std::string, size_t> slot_index;
  size_t parameter_count = 0;
  DeviceArray<float> parameters, gradients, first_moment, second_moment;  // [parameter_count]
  DeviceArray<__half> half_parameters;  // [parameter_count], mixed precision only
  DeviceArray<double> sum_of_squares;   // [kSumOfSquaresPartials + 1], the last is the result
  int64_t adam_steps = 0;
  double current_loss_scale = 1.0;
  double gradients_loss_scale = 1.0;  // the scale the gradients in `gradients` carry
  int64_t good_steps = 0;  // since the loss scale last changed

  size_t source_embedding = 0, target_embedding = 0, output_weight = 0, output_bias = 0;
  bool has_output_bias = false;
  std::vector<EncoderLayer> encoder_layers;
  std::vector<DecoderLayer> decoder_layers;
  Norm encoder_final_norm, decoder_final_norm;

  // ---- Activations of the last forward pass, planned per batch shape ----
  int64_t B = 0, S = 0, T = 0;
  int64_t row_offset = 0;  // Batch::row_offset of the loaded batch
  bool training = false;
  uint64_t seed = 0;  // dropout seed of the last forward pass
  DeviceArray<float> value_arena;
  DeviceArray<__half> half_arena;    // two f16 operand copies for the matrix products
  DeviceArray<int32_t> index_arena;  // ids, positions, targets, lengths
  DeviceArray<double> row_arena;     // row_loss | row_nll [B*T each]
  std::vector<int32_t> host_indices;  // staging for index_arena, same layout
  std::vector<double> host_rows;
  size_t half_capacity = 0;          // elements of each f16 copy
  int32_t* source_ids = nullptr;     // [B*S]
  int32_t* source_positions = nullptr;
  int32_t* target_ids = nullptr;     // [B*T]
  int32_t* target_positions = nullptr;
  int32_t* targets = nullptr;        // [B*T], -1 = not scored
  int32_t* source_lengths = nullptr;  // [B]

  float* encoder_input = nullptr;  // [B*S, d]
  std::vector<EncoderActivations> encoder;
  float* encoder_final = nullptr;  // [B*S, d]
  float* encoder_final_mean = nullptr, *encoder_final_rstd = nullptr;
  const float* encoder_output = nullptr;
  float* decoder_input = nullptr;  // [B*T, d]
  std::vector<DecoderActivations> decoder;
  float* decoder_final = nullptr;  // [B*T, d]
  float* decoder_final_mean = nullptr, *decoder_final_rstd = nullptr;
  const float* decoder_output = nullptr;
  float* logits = nullptr;  // [B*T, V] (its gradient after the loss)
  // Backward temporaries, shared by all layers.
  float* d_stream = nullptr;          // [max rows, d]
  float* d_encoder_output = nullptr;  // [B*S, d]
  float* d_sum = nullptr;             // [max rows, d]
  float* d_sub = nullptr;             // [max rows, d]
  float* d_sub_in = nullptr;          // [max rows, d]
  float* d_context = nullptr;         // [max rows, d]
  float* d_qkv = nullptr;             // [max rows, 3d]
  float* d_key_value = nullptr;       // [B*S, 2d]
  float* d_hidden = nullptr;          // [max rows, d_ff]
  float* column_workspace = nullptr;  // column_reduction_workspace_floats(max rows, widest)
  float* attention_workspace = nullptr;  // attention_backward_workspace_floats (largest)

  int64_t d() const { return config.d_model; }
  int64_t vocab() const { return static_cast<int64_t>(config.target_vocab_size); }
  float* param(size_t offset) const { return parameters.get() + offset; }
  float* grad(size_t offset) const { return gradients.get() + offset; }
  const __half* half_param(size_t offset) const { return half_parameters.get() + offset; }
  bool pre_norm() const { return config.norm_position == NormPosition::pre; }
  bool mixed() const { return precision == CudaPrecision::mixed_f16; }
  __half* half_a() const { return half_arena.get(); }
  __half* half_b() const { return half_arena.get() + half_capacity; }

  size_t find(const std::string& name) const {
    auto it = slot_index.find(name);
    if (it == slot_index.end()) throw Error("CUDA transformer: no parameter named '" + name + "'");
    return it->second;
  }
  size_t offset_of(const std::string& name) const { return slots[find(name)].offset; }
  Linear linear(const std::string& prefix) const {
    const ParameterSlot& w = slots[find(prefix + schema::kWeight)];
    return {w.offset, offset_of(prefix + schema::kBias), static_cast<int64_t>(w.spec.shape[0]),
            static_cast<int64_t>(w.spec.shape[1])};
  }
  Norm norm(const std::string& prefix) const {
    return {offset_of(prefix + schema::kGamma), offset_of(prefix + schema::kBeta)};
  }

  // The host model's layout: transformer_parameters(config) in order, back to back.
  void build_layout() {
    size_t offset = 0;
    for (ParameterSpec& spec : transformer_parameters(config)) {
      size_t size = 1;
      for (uint64_t dim : spec.shape) size *= static_cast<size_t>(dim);
      slot_index[spec.name] = slots.size();
      slots.push_back({std::move(spec), offset, size});
      offset += size;
    }
    parameter_count = offset;
    source_embedding = offset_of(param::source_embedding(config));
    target_embedding = offset_of(param::target_embedding(config));
    output_weight = offset_of(param::output_projection(config));
    has_output_bias = config.output_bias;
    if (has_output_bias) output_bias = offset_of(param::kOutputBias);
    for (uint32_t i = 0; i < config.encoder_layers; ++i) {
      const std::string p = param::encoder_layer(i);
      encoder_layers.push_back({linear(p + schema::kSelfAttentionQkv.name),
                                linear(p + schema::kSelfAttentionOutput.name), linear(p + schema::kFfnInner.name),
                                linear(p + schema::kFfnOuter.name), norm(p + schema::kSelfAttentionNorm.name),
                                norm(p + schema::kFfnNorm.name)});
    }
    for (uint32_t i = 0; i < config.decoder_layers; ++i) {
      const std::string p = param::decoder_layer(i);
      decoder_layers.push_back(
          {linear(p + schema::kSelfAttentionQkv.name), linear(p + schema::kSelfAttentionOutput.name),
           linear(p + schema::kCrossAttentionQuery.name), linear(p + schema::kCrossAttentionKeyValue.name),
           linear(p + schema::kCrossAttentionOutput.name), linear(p + schema::kFfnInner.name), linear(p + schema::kFfnOuter.name),
           norm(p + schema::kSelfAttentionNorm.name), norm(p + schema::kCrossAttentionNorm.name),
           norm(p + schema::kFfnNorm.name)});
    }
    if (pre_norm()) {
      encoder_final_norm = norm(schema::kEncoderFinalNorm.name);
      decoder_final_norm = norm(schema::kDecoderFinalNorm.name);
    }
    encoder.resize(config.encoder_layers);
    decoder.resize(config.decoder_layers);
  }

  // Lays out every activation of a (B, S, T) batch: a counting pass, growth when needed, then a
  // pass that hands out pointers (as transformer.cc's plan).
  void plan(int64_t batch, int64_t source_len, int64_t target_len) {
    B = batch;
    S = source_len;
    T = target_len;
    const int64_t dm = d(), ff = config.d_ff, heads = config.num_heads;
    const int64_t ns = B * S, nt = B * T, rows = std::max(ns, nt);
    const int64_t widest = std::max({3 * dm, ff, has_output_bias ? vocab() : int64_t{0}});
    cuda::AttentionShape largest;
    largest.batch = B;
    largest.heads = heads;
    largest.query_len = std::max(S, T);
    largest.key_len = std::max(S, T);
    for (int pass = 0; pass < 2; ++pass) {
      size_t values = 0;
      float* base = pass ? value_arena.get() : nullptr;
      auto take = [&](int64_t n) {
        float* p = base ? base + values : nullptr;
        values += aligned_count(n, sizeof(float));
        return p;
      };
      auto block = [&](Block& b, int64_t n) {
        b.sub_in = pre_norm() ? take(n * dm) : nullptr;
        b.sum = take(n * dm);
        b.y = pre_norm() ? b.sum : take(n * dm);
        b.mean = take(n);
        b.rstd = take(n);
      };
      auto attention = [&](Attention& a, int64_t n, int64_t tq, int64_t tk) {
        a.probabilities = take(B * heads * tq * tk);
        a.context = take(n * dm);
      };
      encoder_input = take(ns * dm);
      for (EncoderActivations& e : encoder) {
        block(e.self, ns);
        block(e.ffn, ns);
        e.qkv = take(ns * 3 * dm);
        attention(e.attention, ns, S, S);
        e.hidden = take(ns * ff);
      }
      encoder_final = take(ns * dm);
      encoder_final_mean = take(ns);
      encoder_final_rstd = take(ns);
      decoder_input = take(nt * dm);
      for (DecoderActivations& e : decoder) {
        block(e.self, nt);
        block(e.cross, nt);
        block(e.ffn, nt);
        e.qkv = take(nt * 3 * dm);
        attention(e.self_attention, nt, T, T);
        e.query = take(nt * dm);
        e.key_value = take(ns * 2 * dm);
        attention(e.cross_attention, nt, T, S);
        e.hidden = take(nt * ff);
      }
      decoder_final = take(nt * dm);
      decoder_final_mean = take(nt);
      decoder_final_rstd = take(nt);
      logits = take(nt * vocab());
      d_stream = take(rows * dm);
      d_encoder_output = take(ns * dm);
      d_sum = take(rows * dm);
      d_sub = take(rows * dm);
      d_sub_in = take(rows * dm);
      d_context = take(rows * dm);
      d_qkv = take(rows * 3 * dm);
      d_key_value = take(ns * 2 * dm);
      d_hidden = take(rows * ff);
      column_workspace =
          take(static_cast<int64_t>(cuda::column_reduction_workspace_floats(rows, widest)));
      attention_workspace =
          take(static_cast<int64_t>(cuda::attention_backward_workspace_floats(largest)));
      if (pass == 0) value_arena.reserve(values);
    }
    // f16 copies: the widest operand is the logits' gradient [B*T, V] or a hidden [rows, d_ff].
    if (mixed()) {
      half_capacity = aligned_count(std::max({nt * vocab(), rows * ff, rows * 3 * dm}),
                                    sizeof(__half));
      half_arena.reserve(2 * half_capacity);
    }
    const size_t index_count = static_cast<size_t>(2 * ns + 3 * nt + B);
    index_arena.reserve(index_count);
    host_indices.assign(index_count, 0);
    source_ids = index_arena.get();
    source_positions = source_ids + ns;
    target_ids = source_positions + ns;
    target_positions = target_ids + nt;
    targets = target_positions + nt;
    source_lengths = targets + nt;
    row_arena.reserve(static_cast<size_t>(2 * nt));
    host_rows.assign(static_cast<size_t>(2 * nt), 0.0);
  }

  // Validates the batch, plans for its shape and uploads its ids (host_indices has the layout of
  // index_arena).
  void load_batch(const Batch& batch) {
    batch.validate(config);
    const int64_t max_key = cuda::max_attention_key_len();
    if (batch.source_len > max_key || batch.target_len > max_key)
      throw Error("CUDA transformer: sequence length " +
                  std::to_string(std::max(batch.source_len, batch.target_len)) +
                  " exceeds the attention kernel's limit of " + std::to_string(max_key));
    plan(batch.batch_size, batch.source_len, batch.target_len);
    row_offset = batch.row_offset;
    const int64_t ns = B * S, nt = B * T;
    int32_t* h = host_indices.data();
    for (int64_t b = 0; b < B; ++b) {
      h[2 * ns + 3 * nt + b] = batch.source_lengths[b];
      for (int64_t s = 0; s < S; ++s) {
        h[b * S + s] = batch.source_ids[b * S + s];
        h[ns + b * S + s] = static_cast<int32_t>(s);
      }
      for (int64_t t = 0; t < T; ++t) {
        h[2 * ns + b * T + t] = batch.target_input_ids[b * T + t];
        h[2 * ns + nt + b * T + t] = static_cast<int32_t>(t);
        h[2 * ns + 2 * nt + b * T + t] =
            t < batch.target_lengths[b] ? batch.target_output_ids[b * T + t] : -1;
      }
    }
    XF_CUDA_CHECK(cudaMemcpyAsync(index_arena.get(), h, host_indices.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream));
  }

  // ---- Forward pieces ----

  float dropout_rate() const { return training ? options.dropout : 0.0f; }
  float attention_dropout_rate() const { return training ? options.attention_dropout : 0.0f; }
  // The rule of a site of `count` elements, for this batch's rows of the global batch
  // (Batch::row_offset, as transformer.cc's first_index): ranks draw one process's masks.
  cuda::DropoutRule rule(uint64_t site, float p, int64_t count) const {
    cuda::DropoutRule dropout = cuda::make_dropout_rule(seed, site, p);
    dropout.stream += static_cast<uint64_t>(row_offset * (count / B));
    return dropout;
  }

  // y[rows, out] = x W^T (+ bias); in mixed precision through f16 copies of x and W.
  void linear_forward(const float* x, const Linear& w, bool with_bias, int64_t rows, float* y) {
    linear_forward(x, w.weight, with_bias ? param(w.bias) : nullptr, rows, w.in, w.out, y);
  }
  void linear_forward(const float* x, size_t weight, const float* bias, int64_t rows, int64_t in,
                      int64_t out, float* y) {
    if (mixed()) {
      cuda::convert(x, rows * in, half_a(), stream);
      cuda::gemm(cublas, false, true, rows, out, in, 1.0f, half_a(), in, half_param(weight), in,
                 0.0f, y, out);
    } else {
      cuda::gemm(cublas, false, true, rows, out, in, 1.0f, x, in, param(weight), in, 0.0f, y,
                 out);
    }
    if (bias) cuda::add_bias_residual(y, bias, nullptr, rows, out, stream);
  }

  // Backward of y = x W^T + b: dW += dy^T x; db += column sums of dy (when given);
  // dx = dy W (+= when accumulate_dx; dx may be null).
  void linear_backward(const float* dy, const float* x, size_t weight, int64_t rows, int64_t in,
                       int64_t out, float* dx, bool accumulate_dx, float* dbias) {
    const float dx_beta = accumulate_dx ? 1.0f : 0.0f;
    if (mixed()) {
      cuda::convert(dy, rows * out, half_a(), stream);
      cuda::convert(x, rows * in, half_b(), stream);
      if (dx)
        cuda::gemm(cublas, false, false, rows, in, out, 1.0f, half_a(), out, half_param(weight),
                   in, dx_beta, dx, in);
      cuda::gemm(cublas, true, false, out, in, rows, 1.0f, half_a(), out, half_b(), in, 1.0f,
                 grad(weight), in);
    } else {
      if (dx)
        cuda::gemm(cublas, false, false, rows, in, out, 1.0f, dy, out, param(weight), in, dx_beta,
                   dx, in);
      cuda::gemm(cublas, true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, grad(weight), in);
    }
    if (dbias) cuda::bias_backward(dy, rows, out, dbias, column_workspace, stream);
  }
  void linear_backward(const float* dy, const float* x, const Linear& w, int64_t rows, float* dx,
                       bool accumulate_dx, bool with_bias) {
    linear_backward(dy, x, w.weight, rows, w.in, w.out, dx, accumulate_dx,
                    with_bias ? grad(w.bias) : nullptr);
  }

  void layer_norm(const float* x, const Norm& norm, int64_t rows, float* out, float* mean,
                  float* rstd) {
    cuda::add_bias_residual_layer_norm(x, nullptr, nullptr, param(norm.gamma), param(norm.beta),
                                       config.layer_norm_epsilon, rows, d(), out, mean, rstd,
                                       stream);
  }

  // The residual block around F, as transformer.cc's block_forward. F(sub_in, out) writes F's
  // output to `out`.
  template <typename F>
  void block_forward(Block& b, const float* x, int64_t rows, const Norm& norm, uint64_t site,
                     F sublayer) {
    const int64_t n = rows * d();
    b.x = x;
    b.site = site;
    const float* sub_in = x;
    if (pre_norm()) {
      layer_norm(x, norm, rows, b.sub_in, b.mean, b.rstd);
      sub_in = b.sub_in;
    }
    sublayer(sub_in, b.sum);
    if (dropout_rate() > 0) cuda::dropout(b.sum, n, rule(site, dropout_rate(), n), stream);
    cuda::add_bias_residual(b.sum, nullptr, x, rows, d(), stream);  // sum = x + Dropout(F)
    if (!pre_norm()) layer_norm(b.sum, norm, rows, b.y, b.mean, b.rstd);
  }

  cuda::AttentionShape attention_shape(int64_t tq, int64_t tk) const {
    cuda::AttentionShape shape;
    shape.batch = B;
    shape.heads = config.num_heads;
    shape.query_len = tq;
    shape.key_len = tk;
    shape.head_dim = config.head_dim();
    return shape;
  }
  // A [B, len, width] buffer seen as [B, heads, len, head_dim].
  cuda::HeadStrides strides(int64_t len, int64_t width) const {
    return {len * width, static_cast<int64_t>(config.head_dim()), width};
  }

  void attention(Attention& a, const float* q, cuda::HeadStrides qs, const float* k,
                 cuda::HeadStrides ks, const float* v, cuda::HeadStrides vs, int64_t tq,
                 int64_t tk, const int32_t* key_lengths, bool causal, uint64_t site) {
    const cuda::AttentionShape shape = attention_shape(tq, tk);
    a.site = site;
    cuda::attention(q, qs, k, ks, v, vs, a.context, strides(tq, d()), shape, key_lengths,
                    causal ? 0 : -1, a.probabilities, stream);
    const float p = attention_dropout_rate();
    if (p > 0)  // the context again, from the dropped-out probabilities
      cuda::attention_dropout_values(a.probabilities,
                                     rule(site, p, shape.batch * shape.heads * tq * tk), v, vs,
                                     a.context,
                                     strides(tq, d()), shape, stream);
  }

  void self_attention_forward(const Linear& qkv, const Linear& output, float* qkv_buffer,
                              Attention& a, const float* x, float* out, int64_t len,
                              const int32_t* key_lengths, bool causal, uint64_t site) {
    const int64_t dm = d(), rows = B * len;
    linear_forward(x, qkv, true, rows, qkv_buffer);
    const cuda::HeadStrides s = strides(len, 3 * dm);
    attention(a, qkv_buffer, s, qkv_buffer + dm, s, qkv_buffer + 2 * dm, s, len, len, key_lengths,
              causal, site);
    linear_forward(a.context, output, true, rows, out);
  }

  void ffn_forward(const Linear& inner, const Linear& outer, float* hidden, const float* x,
                   float* out, int64_t rows) {
    linear_forward(x, inner, false, rows, hidden);
    cuda::bias_relu(hidden, param(inner.bias), rows, inner.out, stream);
    linear_forward(hidden, outer, true, rows, out);
  }

  // Dropout sites: transformer.cc's numbering, so both backends draw the same masks.
  static uint64_t site(uint64_t stack, uint64_t layer, uint64_t which) {
    return (stack << 32) | (layer << 8) | which;
  }

  void embed_with_dropout(size_t table, int64_t table_vocab, const int32_t* ids,
                          const int32_t* positions, int64_t count, float* out, uint64_t where) {
    const float scale = static_cast<float>(std::sqrt(static_cast<double>(d())));
    cuda::embed(param(table), table_vocab, d(), ids, positions, count, scale, out, stream);
    if (dropout_rate() > 0) {
      cuda::dropout(out, count * d(), rule(where, dropout_rate(), count * d()), stream);
    }
  }

  void encode() {
    const int64_t ns = B * S;
    embed_with_dropout(source_embedding, config.source_vocab_size, source_ids, source_positions,
                       ns, encoder_input, site(1, 0, 0));
    const float* x = encoder_input;
    for (size_t l = 0; l < encoder.size(); ++l) {
      EncoderLayer& w = encoder_layers[l];
      EncoderActivations& a = encoder[l];
      block_forward(a.self, x, ns, w.self_norm, site(1, l, 1), [&](const float* in, float* out) {
        self_attention_forward(w.qkv, w.self_output, a.qkv, a.attention, in, out, S,
                               source_lengths, false, site(1, l, 2));
      });
      block_forward(a.ffn, a.self.y, ns, w.ffn_norm, site(1, l, 3),
                    [&](const float* in, float* out) {
                      ffn_forward(w.ffn_inner, w.ffn_outer, a.hidden, in, out, ns);
                    });
      x = a.ffn.y;
    }
    if (pre_norm()) {
      layer_norm(x, encoder_final_norm, ns, encoder_final, encoder_final_mean,
                 encoder_final_rstd);
      x = encoder_final;
    }
    encoder_output = x;
  }

  void decode() {
    const int64_t dm = d(), nt = B * T, ns = B * S;
    embed_with_dropout(target_embedding, config.target_vocab_size, target_ids, target_positions,
                       nt, decoder_input, site(2, 0, 0));
    const float* x = decoder_input;
    for (size_t l = 0; l < decoder.size(); ++l) {
      DecoderLayer& w = decoder_layers[l];
      DecoderActivations& a = decoder[l];
      block_forward(a.self, x, nt, w.self_norm, site(2, l, 1), [&](const float* in, float* out) {
        self_attention_forward(w.qkv, w.self_output, a.qkv, a.self_attention, in, out, T,
                               nullptr, true, site(2, l, 2));
      });
      block_forward(a.cross, a.self.y, nt, w.cross_norm, site(2, l, 3),
                    [&](const float* in, float* out) {
                      linear_forward(in, w.cross_query, true, nt, a.query);
                      linear_forward(encoder_output, w.cross_key_value, true, ns, a.key_value);
                      const cuda::HeadStrides kv = strides(S, 2 * dm);
                      attention(a.cross_attention, a.query, strides(T, dm), a.key_value, kv,
                                a.key_value + dm, kv, T, S, source_lengths, false,
                                site(2, l, 4));
                      linear_forward(a.cross_attention.context, w.cross_output, true, nt, out);
                    });
      block_forward(a.ffn, a.cross.y, nt, w.ffn_norm, site(2, l, 5),
                    [&](const float* in, float* out) {
                      ffn_forward(w.ffn_inner, w.ffn_outer, a.hidden, in, out, nt);
                    });
      x = a.ffn.y;
    }
    if (pre_norm()) {
      layer_norm(x, decoder_final_norm, nt, decoder_final, decoder_final_mean,
                 decoder_final_rstd);
      x = decoder_final;
    }
    decoder_output = x;
  }

  // Logits, the loss and (when asked) its gradient times the loss scale, in place of the logits.
  LossSums loss(bool write_gradient) {
    const int64_t nt = B * T;
    linear_forward(decoder_output, output_weight, has_output_bias ? param(output_bias) : nullptr,
                   nt, d(), vocab(), logits);
    double* row_loss = row_arena.get();
    double* row_nll = row_loss + nt;
    cuda::label_smoothed_cross_entropy(logits, targets, nt, vocab(), options.label_smoothing, -1,
                                       write_gradient, static_cast<float>(current_loss_scale),
                                       row_loss, row_nll, stream);
    XF_CUDA_CHECK(cudaMemcpyAsync(host_rows.data(), row_loss, 2 * nt * sizeof(double),
                                  cudaMemcpyDeviceToHost, stream));
    XF_CUDA_CHECK(cudaStreamSynchronize(stream));
    LossSums sums;
    const int32_t* host_targets = host_indices.data() + 2 * B * S + 2 * nt;
    for (int64_t r = 0; r < nt; ++r) {  // in order, as the CPU model sums
      sums.loss_sum += host_rows[r];
      sums.nll_sum += host_rows[nt + r];
      sums.token_count += host_targets[r] >= 0;
    }
    return sums;
  }

  // ---- Backward pieces ----

  void copy(float* to, const float* from, int64_t count) {
    XF_CUDA_CHECK(cudaMemcpyAsync(to, from, static_cast<size_t>(count) * sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream));
  }
  void zero(float* to, int64_t count) {
    XF_CUDA_CHECK(cudaMemsetAsync(to, 0, static_cast<size_t>(count) * sizeof(float), stream));
  }

  // d_stream: d(loss)/d(block output) on entry, d(loss)/d(block input) on return, as
  // transformer.cc's block_backward.
  template <typename F>
  void block_backward(Block& b, int64_t rows, const Norm& norm, F sublayer_backward) {
    const int64_t dm = d(), n = rows * dm;
    const float p = dropout_rate();
    if (!pre_norm()) {
      zero(d_sum, n);
      cuda::layer_norm_backward(d_stream, b.sum, b.mean, b.rstd, param(norm.gamma), rows, dm,
                                d_sum, grad(norm.gamma), grad(norm.beta), column_workspace,
                                stream);
      copy(d_sub, d_sum, n);
      if (p > 0) cuda::dropout(d_sub, n, rule(b.site, p, n), stream);
      sublayer_backward(d_sub, d_sub_in);
      cuda::add_bias_residual(d_sub_in, nullptr, d_sum, rows, dm, stream);
      copy(d_stream, d_sub_in, n);
    } else {
      copy(d_sub, d_stream, n);
      if (p > 0) cuda::dropout(d_sub, n, rule(b.site, p, n), stream);
      sublayer_backward(d_sub, d_sub_in);
      cuda::layer_norm_backward(d_sub_in, b.x, b.mean, b.rstd, param(norm.gamma), rows, dm,
                                d_stream, grad(norm.gamma), grad(norm.beta), column_workspace,
                                stream);
    }
  }

  void attention_backward(Attention& a, const float* q, cuda::HeadStrides qs, const float* k,
                          cuda::HeadStrides ks, const float* v, cuda::HeadStrides vs, float* dq,
                          float* dk, float* dv, cuda::HeadStrides dqs, cuda::HeadStrides dks,
                          cuda::HeadStrides dvs, int64_t tq, int64_t tk) {
    const float p = attention_dropout_rate();
    const cuda::DropoutRule dropout = rule(a.site, p, B * config.num_heads * tq * tk);
    cuda::attention_backward(d_context, strides(tq, d()), q, qs, k, ks, v, vs, a.probabilities,
                             p > 0 ? &dropout : nullptr, dq, dqs, dk, dks, dv, dvs,
                             attention_shape(tq, tk), attention_workspace, stream);
  }

  void self_attention_backward(const Linear& qkv, const Linear& output, const float* qkv_buffer,
                               Attention& a, const float* x, const float* d_out, float* d_x,
                               int64_t len) {
    const int64_t dm = d(), rows = B * len;
    linear_backward(d_out, a.context, output, rows, d_context, false, true);
    const cuda::HeadStrides s = strides(len, 3 * dm);
    attention_backward(a, qkv_buffer, s, qkv_buffer + dm, s, qkv_buffer + 2 * dm, s, d_qkv,
                       d_qkv + dm, d_qkv + 2 * dm, s, s, s, len, len);
    linear_backward(d_qkv, x, qkv, rows, d_x, false, true);
  }

  void ffn_backward(const Linear& inner, const Linear& outer, float* hidden, const float* x,
                    const float* d_out, float* d_x, int64_t rows) {
    linear_backward(d_out, hidden, outer, rows, d_hidden, false, true);
    cuda::bias_relu_backward(d_hidden, hidden, rows, inner.out, grad(inner.bias),
                             column_workspace, stream);
    linear_backward(d_hidden, x, inner, rows, d_x, false, false);
  }

  void backward() {
    const int64_t dm = d(), nt = B * T, ns = B * S;
    const float scale = static_cast<float>(std::sqrt(static_cast<double>(dm)));
    const float p = dropout_rate();
    // Output projection: logits hold d(loss)/d(logits) (times the loss scale).
    float* d_output = pre_norm() ? d_sum : d_stream;
    linear_backward(logits, decoder_output, output_weight, nt, dm, vocab(), d_output, false,
                    has_output_bias ? grad(output_bias) : nullptr);
    if (pre_norm()) {
      zero(d_stream, nt * dm);
      const float* x = decoder.empty() ? decoder_input : decoder.back().ffn.y;
      cuda::layer_norm_backward(d_output, x, decoder_final_mean, decoder_final_rstd,
                                param(decoder_final_norm.gamma), nt, dm, d_stream,
                                grad(decoder_final_norm.gamma), grad(decoder_final_norm.beta),
                                column_workspace, stream);
    }
    zero(d_encoder_output, ns * dm);
    for (size_t l = decoder.size(); l-- > 0;) {
      DecoderLayer& w = decoder_layers[l];
      DecoderActivations& a = decoder[l];
      block_backward(a.ffn, nt, w.ffn_norm, [&](const float* d_out, float* d_x) {
        ffn_backward(w.ffn_inner, w.ffn_outer, a.hidden, pre_norm() ? a.ffn.sub_in : a.ffn.x,
                     d_out, d_x, nt);
      });
      block_backward(a.cross, nt, w.cross_norm, [&](const float* d_out, float* d_x) {
        linear_backward(d_out, a.cross_attention.context, w.cross_output, nt, d_context, false,
                        true);
        float* d_query = d_qkv;  // [B*T, d]
        const cuda::HeadStrides kv = strides(S, 2 * dm);
        attention_backward(a.cross_attention, a.query, strides(T, dm), a.key_value, kv,
                           a.key_value + dm, kv, d_query, d_key_value, d_key_value + dm,
                           strides(T, dm), kv, kv, T, S);
        linear_backward(d_key_value, encoder_output, w.cross_key_value, ns, d_encoder_output,
                        true, true);
        linear_backward(d_query, pre_norm() ? a.cross.sub_in : a.cross.x, w.cross_query, nt, d_x,
                        false, true);
      });
      block_backward(a.self, nt, w.self_norm, [&](const float* d_out, float* d_x) {
        self_attention_backward(w.qkv, w.self_output, a.qkv, a.self_attention,
                                pre_norm() ? a.self.sub_in : a.self.x, d_out, d_x, T);
      });
    }
    if (p > 0) cuda::dropout(d_stream, nt * dm, rule(site(2, 0, 0), p, nt * dm), stream);
    cuda::embedding_backward(d_stream, target_ids, nt, dm, config.target_vocab_size, scale,
                             grad(target_embedding), stream);

    // Encoder: its output's gradient came from every decoder layer's cross-attention.
    if (pre_norm()) {
      zero(d_stream, ns * dm);
      const float* x = encoder.empty() ? encoder_input : encoder.back().ffn.y;
      cuda::layer_norm_backward(d_encoder_output, x, encoder_final_mean, encoder_final_rstd,
                                param(encoder_final_norm.gamma), ns, dm, d_stream,
                                grad(encoder_final_norm.gamma), grad(encoder_final_norm.beta),
                                column_workspace, stream);
    } else {
      copy(d_stream, d_encoder_output, ns * dm);
    }
    for (size_t l = encoder.size(); l-- > 0;) {
      EncoderLayer& w = encoder_layers[l];
      EncoderActivations& a = encoder[l];
      block_backward(a.ffn, ns, w.ffn_norm, [&](const float* d_out, float* d_x) {
        ffn_backward(w.ffn_inner, w.ffn_outer, a.hidden, pre_norm() ? a.ffn.sub_in : a.ffn.x,
                     d_out, d_x, ns);
      });
      block_backward(a.self, ns, w.self_norm, [&](const float* d_out, float* d_x) {
        self_attention_backward(w.qkv, w.self_output, a.qkv, a.attention,
                                pre_norm() ? a.self.sub_in : a.self.x, d_out, d_x, S);
      });
    }
    if (p > 0) cuda::dropout(d_stream, ns * dm, rule(site(1, 0, 0), p, ns * dm), stream);
    cuda::embedding_backward(d_stream, source_ids, ns, dm, config.source_vocab_size, scale,
                             grad(source_embedding), stream);
  }

  void refresh_half_parameters() {
    if (mixed()) cuda::convert(parameters.get(), static_cast<int64_t>(parameter_count),
                               half_parameters.get(), stream);
  }

  void copy_to_host(float* host, const float* device_buffer) const {
    XF_CUDA_CHECK(cudaMemcpyAsync(host, device_buffer, parameter_count * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream));
    XF_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  void copy_to_device(float* device_buffer, const float* host) {
    XF_CUDA_CHECK(cudaMemcpyAsync(device_buffer, host, parameter_count * sizeof(float),
                                  cudaMemcpyHostToDevice, stream));
    XF_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
};

CudaTransformerModel::CudaTransformerModel(const ModelConfig& config,
                                           const TrainingOptions& options,
                                           CudaPrecision precision, const AdamOptions& adam,
                                           const LossScaleOptions& loss_scale, int device)
    : impl_(std::make_unique<Impl>()) {
  validate_config(config);
  Impl& m = *impl_;
  require_cuda_training_device(device);
  if (!(loss_scale.initial_scale >= 1.0) || loss_scale.growth_interval < 1 ||
      loss_scale.max_scale < loss_scale.initial_scale)
    throw Error("CUDA training: loss scale options need initial >= 1, growth interval >= 1 and "
                "max >= initial");
  m.config = config;
  m.precision = precision;
  m.adam_options = adam;
  m.loss_scale_options = loss_scale;
  m.device = device;
  set_options(options);
  XF_CUDA_CHECK(cudaSetDevice(device));
  m.build_layout();
  XF_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  XF_CUBLAS_CHECK(cublasCreate(&m.cublas));
  const size_t workspace_bytes = cuda::recommended_cublas_workspace_bytes(device);
  m.cublas_workspace.reserve(workspace_bytes);
  cuda::bind_cublas_handle(m.cublas, m.stream, m.cublas_workspace.get(), workspace_bytes);
  for (DeviceArray<float>* buffer :
       {&m.parameters, &m.gradients, &m.first_moment, &m.second_moment}) {
    buffer->reserve(m.parameter_count);
    XF_CUDA_CHECK(cudaMemsetAsync(buffer->get(), 0, m.parameter_count * sizeof(float), m.stream));
  }
  if (m.mixed()) {
    m.half_parameters.reserve(m.parameter_count);
    m.refresh_half_parameters();
    m.current_loss_scale = loss_scale.initial_scale;
  }
  m.sum_of_squares.reserve(cuda::kSumOfSquaresPartials + 1);
  XF_CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

CudaTransformerModel::~CudaTransformerModel() {
  // Nothing to report from a destructor: a failure here is an earlier sticky error.
  if (impl_->stream != nullptr) (void)cudaStreamSynchronize(impl_->stream);
  if (impl_->cublas != nullptr) (void)cublasDestroy(impl_->cublas);
  if (impl_->stream != nullptr) (void)cudaStreamDestroy(impl_->stream);
}

const ModelConfig& CudaTransformerModel::config() const { return impl_->config; }
const TrainingOptions& CudaTransformerModel::options() const { return impl_->options; }
CudaPrecision CudaTransformerModel::precision() const { return impl_->precision; }

void CudaTransformerModel::set_options(const TrainingOptions& options) {
  auto check = [](float value, const char* name) {
    if (!(value >= 0.0f && value < 1.0f))
      throw Error(std::string("training options: ") + name + " must be in [0, 1), got " +
                  std::to_string(value));
  };
  check(options.dropout, "dropout");
  check(options.attention_dropout, "attention dropout");
  check(options.label_smoothing, "label smoothing");
  impl_->options = options;
}

std::string CudaTransformerModel::device_name() const {
  cudaDeviceProp properties{};
  XF_CUDA_CHECK(cudaGetDeviceProperties(&properties, impl_->device));
  return properties.name;
}

const std::vector<ParameterSlot>& CudaTransformerModel::slots() const { return impl_->slots; }
size_t CudaTransformerModel::parameter_count() const { return impl_->parameter_count; }

void CudaTransformerModel::set_parameters(const float* host) {
  impl_->copy_to_device(impl_->parameters.get(), host);
  impl_->refresh_half_parameters();
  XF_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
}

void CudaTransformerModel::copy_parameters_to(float* host) const {
  impl_->copy_to_host(host, impl_->parameters.get());
}

void CudaTransformerModel::copy_gradients_to(float* host) const {
  impl_->copy_to_host(host, impl_->gradients.get());
  if (impl_->gradients_loss_scale != 1.0) {
    const float inverse = static_cast<float>(1.0 / impl_->gradients_loss_scale);  // a power of 2
    for (size_t i = 0; i < impl_->parameter_count; ++i) host[i] *= inverse;
  }
}

void CudaTransformerModel::set_gradients(const float* host) {
  impl_->copy_to_device(impl_->gradients.get(), host);
  impl_->gradients_loss_scale = 1.0;
}

void CudaTransformerModel::zero_gradients() {
  impl_->zero(impl_->gradients.get(), static_cast<int64_t>(impl_->parameter_count));
}

LossSums CudaTransformerModel::forward_backward(const Batch& batch, uint64_t dropout_seed) {
  Impl& m = *impl_;
  m.load_batch(batch);
  m.training = true;
  m.seed = dropout_seed;
  m.gradients_loss_scale = m.current_loss_scale;
  m.encode();
  m.decode();
  const LossSums sums = m.loss(true);
  m.backward();
  return sums;
}

LossSums CudaTransformerModel::evaluate(const Batch& batch) {
  Impl& m = *impl_;
  m.load_batch(batch);
  m.training = false;
  m.seed = 0;
  m.encode();
  m.decode();
  return m.loss(false);
}

void CudaTransformerModel::all_reduce_gradients(Communicator& comm) {
  Impl& m = *impl_;
  XF_CUDA_CHECK(cudaStreamSynchronize(m.stream));  // the backward pass wrote them on our stream
  comm.all_reduce_device_sum(m.gradients.get(), m.parameter_count);
  m.gradients_loss_scale = m.current_loss_scale;
}

CudaStepResult CudaTransformerModel::adam_step(double learning_rate, double gradient_scale,
                                               double clip_norm) {
  Impl& m = *impl_;
  CudaStepResult result;
  result.loss_scale = m.gradients_loss_scale;
  double* partials = m.sum_of_squares.get();
  double* total = partials + cuda::kSumOfSquaresPartials;
  cuda::sum_of_squares(m.gradients.get(), static_cast<int64_t>(m.parameter_count), partials,
                       total, m.stream);
  double sum = 0;
  XF_CUDA_CHECK(cudaMemcpyAsync(&sum, total, sizeof(double), cudaMemcpyDeviceToHost, m.stream));
  XF_CUDA_CHECK(cudaStreamSynchronize(m.stream));
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
  const double t = static_cast<double>(m.adam_steps);
  // Adam::step's constants, derived the same way (optimizer.cc).
  cuda::AdamConstants constants;
  constants.beta1 = static_cast<float>(m.adam_options.beta1);
  constants.beta2 = static_cast<float>(m.adam_options.beta2);
  constants.step_size =
      static_cast<float>(learning_rate / (1.0 - std::pow(m.adam_options.beta1, t)));
  constants.inv_sqrt_correction2 =
      static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(m.adam_options.beta2, t)));
  constants.epsilon = static_cast<float>(m.adam_options.epsilon);
  constants.gradient_scale =
      static_cast<float>(unscaled * clip_factor(result.gradient_norm, clip_norm));
  cuda::adam_step(m.parameters.get(), m.gradients.get(), m.first_moment.get(),
                  m.second_moment.get(), static_cast<int64_t>(m.parameter_count), constants,
                  m.mixed() ? m.half_parameters.get() : nullptr, m.stream);
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
