#pragma once
// The encoder-decoder Transformer's forward and backward passes, written once (in the manner of
// llm.c) over the device interface TrainingOps (training_ops.h): the CPU model
// (TransformerModel, transformer.h) and the CUDA model (trainer/cuda) both run this code, each
// with its own ops.
//
// Every sub-layer F (self-attention, cross-attention, FFN; in a decoder of kind ssru, the SSRU
// cell in place of self-attention: relu of Marian's recurrence over the fused input_forget
// product, xf/kernels/recurrent.h) sits in a residual block:
//   post-norm: y = LayerNorm(x + Dropout(F(x)))
//   pre-norm:  y = x + Dropout(F(LayerNorm(x)))   (plus a final LayerNorm per stack)
// Activations of the last forward pass live in the device's arena, planned for the batch shape;
// it grows to the largest shape seen and is reused, so steady-state training allocates nothing.
// Dropout masks are not stored: each site's mask is drawn again from its DropoutDraw in backward.
//
// A new layer goes here (its parameters in format/'s parameter list, its activations in
// lay_out_activations(), its forward and backward below); a new op goes into TrainingOps and
// every device's ops.
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "xf/format/config.h"
#include "xf/format/schema.h"
#include "xf/trainer/batch.h"
#include "xf/trainer/parameter_slot.h"
#include "xf/trainer/training_ops.h"
#include "xf/trainer/training_options.h"

namespace xf::trainer {

// Throws the one-line xf::Error of an option outside [0, 1).
void validate_training_options(const TrainingOptions& options);

template <typename T>
class TransformerGraph {
 public:
  // The ops' parameter and gradient buffers must hold parameter_slots(config)'s elements.
  TransformerGraph(const ModelConfig& config, const TrainingOptions& options, TrainingOps<T>& ops);

  // Forward with dropout from dropout_seed, then backward: ADDS d(loss_sum)/d(parameters) to
  // the ops' gradients.
  LossSums forward_backward(const Batch& batch, uint64_t dropout_seed);
  // Forward only, without dropout; gradients untouched.
  LossSums evaluate(const Batch& batch);

  size_t find(const std::string& name) const;  // index in slots; throws xf::Error if unknown
  // Logits of the last pass ([B*T, vocab], device memory; their gradient after forward_backward).
  const T* last_logits() const { return logits; }

  ModelConfig config;
  TrainingOptions options;  // read by every pass: may change between passes
  std::vector<ParameterSlot> slots;

 private:
  struct Linear {
    size_t weight = 0, bias = 0;
    int64_t out = 0, in = 0;
  };
  struct Norm {
    size_t gamma = 0, beta = 0;
  };
  using EncoderLayer = schema::EncoderLayer<Linear, Norm>;
  using DecoderLayer = schema::DecoderLayer<Linear, Norm>;
  // One residual block's activations (rows = B*S or B*T). F writes its output into `sum`, where
  // dropout and the residual addition then happen in place.
  struct Block {
    const T* x = nullptr;  // block input [rows, d] (not owned)
    T* sub_in = nullptr;   // LayerNorm(x) when pre-norm [rows, d]
    T* sum = nullptr;      // Dropout(F(sub_in)), then x + that [rows, d]
    T* y = nullptr;        // block output: LayerNorm(sum) when post-norm, else sum
    T* mean = nullptr;     // [rows] of the block's LayerNorm
    T* rstd = nullptr;     // [rows]
    uint64_t site = 0;     // dropout site of the sub-layer output
  };
  struct Attention {
    T* probabilities = nullptr;  // [B, H, Tq, Tk]
    T* context = nullptr;        // [rows, d] attention output before the output projection
    uint64_t site = 0;           // dropout site of the probabilities
  };
  struct EncoderActivations {
    Block self, ffn;
    T* qkv = nullptr;  // [B*S, 3d]
    Attention attention;
    T* hidden = nullptr;  // [B*S, d_ff] after ReLU
  };
  struct DecoderActivations {
    Block self, cross, ffn;  // self: the self-attention's block, or the SSRU's
    T* qkv = nullptr;  // [B*T, 3d]
    Attention self_attention;
    T* ssru_input = nullptr;  // SSRU layers: [B*T, 2d], the candidate x then the forget gate's f
    T* ssru_cell = nullptr;   // [B*T, d], the cell states c
    T* query = nullptr;      // [B*T, d]
    T* key_value = nullptr;  // [B*S, 2d] from the encoder output
    Attention cross_attention;
    T* hidden = nullptr;  // [B*T, d_ff]
  };

  // Lays every activation of a (B, S, T) batch out in the ops' arenas.
  void plan(int64_t batch, int64_t source_len, int64_t target_len);
  // plan's parts: every activation and backward temporary, each from take(count) in order; the
  // ops' workspace and the index arena.
  template <typename Take>
  void lay_out_activations(Take&& take);
  void plan_workspace_and_indices();
  // Validates the batch, plans for its shape and uploads its ids.
  void load_batch(const Batch& batch);
  void encode(uint64_t seed);
  void decode(uint64_t seed);
  // Logits of `rows` decoder rows: out[rows, V] = x E^T (+ bias).
  void project(const T* x, int64_t rows, T* out);
  LossSums loss(bool write_gradient);
  void backward();
  // backward's halves: the output projection and the decoder down to its embedding, which
  // leaves the encoder output's gradient; then the encoder down to its embedding.
  void decoder_backward();
  void encoder_backward();

  TrainingOps<T>& ops;
  std::unordered_map<std::string, size_t> slot_index;

  size_t source_embedding = 0, target_embedding = 0, output_weight = 0, output_bias = 0;
  bool has_output_bias = false;
  std::vector<EncoderLayer> encoder_layers;
  std::vector<DecoderLayer> decoder_layers;
  Norm encoder_final_norm, decoder_final_norm;

  // ---- Activations of the last forward pass (device memory) ----
  int64_t B = 0, S = 0, Tt = 0;  // Tt: target length (T is the scalar type)
  int64_t row_offset = 0;        // Batch::row_offset of the loaded batch
  bool training = false;
  uint64_t seed = 0;  // dropout seed of the last forward pass
  std::vector<int32_t> host_indices;  // staging for the index arena, same layout
  std::vector<double> row_loss, row_nll;  // [B*T], host
  int32_t* source_ids = nullptr;        // [B*S]
  int32_t* source_positions = nullptr;  // [B*S]
  int32_t* target_ids = nullptr;        // [B*T]
  int32_t* target_positions = nullptr;  // [B*T]
  int32_t* targets = nullptr;           // [B*T], -1 = not scored
  int32_t* source_lengths = nullptr;    // [B]

  T* encoder_input = nullptr;  // [B*S, d] embedding + positions after dropout
  std::vector<EncoderActivations> encoder;
  T* encoder_final = nullptr;  // [B*S, d] pre-norm's final LayerNorm output
  T* encoder_final_mean = nullptr, *encoder_final_rstd = nullptr;
  const T* encoder_output = nullptr;  // what cross-attention reads [B*S, d]
  T* decoder_input = nullptr;  // [B*T, d]
  std::vector<DecoderActivations> decoder;
  T* decoder_final = nullptr;  // [B*T, d]
  T* decoder_final_mean = nullptr, *decoder_final_rstd = nullptr;
  const T* decoder_output = nullptr;  // what the output projection reads [B*T, d]
  T* logits = nullptr;  // [B*T, V] (its gradient after backward)
  // Backward temporaries, shared by all layers.
  T* d_stream = nullptr;          // [max rows, d] gradient of the residual stream
  T* d_encoder_output = nullptr;  // [B*S, d]
  T* d_sum = nullptr;             // [max rows, d]
  T* d_sub = nullptr;             // [max rows, d]
  T* d_sub_in = nullptr;          // [max rows, d]
  T* d_context = nullptr;         // [max rows, d]
  T* d_qkv = nullptr;             // [max rows, 3d] (also d_query, and an SSRU's d(x, f))
  T* d_key_value = nullptr;       // [B*S, 2d]
  T* d_hidden = nullptr;          // [max rows, d_ff]

  size_t values_needed_ = 0;  // the arena's size for the planned shape
  int64_t d() const { return config.d_model; }
  int64_t vocab() const { return static_cast<int64_t>(config.target_vocab_size); }
  T* param(size_t offset) { return ops.parameters() + offset; }
  T* grad(size_t offset) { return ops.gradients() + offset; }
  bool pre_norm() const { return config.norm_position == NormPosition::pre; }
  bool ssru() const { return config.decoder_layer_kind == DecoderLayerKind::ssru; }
  size_t offset_of(const std::string& name) const;
  Linear linear(const std::string& prefix) const;
  Norm norm(const std::string& prefix) const;
  void build_layout();

  float dropout_rate() const;
  float attention_dropout_rate() const;
  DropoutDraw draw(uint64_t site, float p, int64_t count) const;
  void dropout(T* x, int64_t count, uint64_t site);
  void layer_norm(const T* x, const Norm& norm, int64_t rows, T* out, T* mean, T* rstd);
  template <typename F>
  void block_forward(Block& b, const T* x, int64_t rows, const Norm& norm, uint64_t site,
                     F sublayer);
  AttentionShape attention_shape(int64_t tq, int64_t tk) const;
  HeadStrides strides(int64_t len, int64_t width) const;
  void attention(Attention& a, const T* q, HeadStrides qs, const T* k, HeadStrides ks,
                 const T* v, HeadStrides vs, int64_t tq, int64_t tk, const int32_t* key_lengths,
                 bool causal, uint64_t site);
  void self_attention_forward(const Linear& qkv, const Linear& output, T* qkv_buffer,
                              Attention& a, const T* x, T* out, int64_t len,
                              const int32_t* key_lengths, bool causal, uint64_t site);
  void ssru_forward(const Linear& input_forget, DecoderActivations& a, const T* x, T* out);
  void ssru_backward(const Linear& input_forget, DecoderActivations& a, const T* x, const T* d_out, T* d_x);
  void ffn_forward(const Linear& inner, const Linear& outer, T* hidden, const T* x, T* out,
                   int64_t rows);
  void linear_forward(const T* x, const Linear& w, bool with_bias, int64_t rows, T* y);
  void linear_backward(const T* dy, const T* x, const Linear& w, int64_t rows, T* dx,
                       bool accumulate_dx, bool with_bias);
  template <typename F>
  void block_backward(Block& b, int64_t rows, const Norm& norm, F sublayer_backward);
  void attention_backward(Attention& a, const T* q, HeadStrides qs, const T* k, HeadStrides ks,
                          const T* v, HeadStrides vs, T* dq, T* dk, T* dv, HeadStrides dqs,
                          HeadStrides dks, HeadStrides dvs, int64_t tq, int64_t tk);
  void self_attention_backward(const Linear& qkv, const Linear& output, const T* qkv_buffer,
                               Attention& a, const T* x, const T* d_out, T* d_x, int64_t len);
  void ffn_backward(const Linear& inner, const Linear& outer, T* hidden, const T* x,
                    const T* d_out, T* d_x, int64_t rows);
};

extern template class TransformerGraph<float>;
extern template class TransformerGraph<double>;

}  // namespace xf::trainer
