// The Transformer's forward and backward passes over TrainingOps (transformer_graph.h): the one
// copy that every device runs.
#include "xf/trainer/transformer_graph.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "xf/error.h"
#include "xf/format/schema.h"

namespace xf::trainer {

std::vector<ParameterSlot> parameter_slots(const ModelConfig& config) {
  std::vector<ParameterSlot> slots;
  size_t offset = 0;
  for (ParameterSpec& spec : transformer_parameters(config)) {
    const size_t size = static_cast<size_t>(spec.elements());
    slots.push_back({std::move(spec), offset, size});
    offset += size;
  }
  return slots;
}

void validate_training_options(const TrainingOptions& options) {
  auto check = [](float value, const char* name) {
    if (!(value >= 0.0f && value < 1.0f))
      throw Error(std::string("training options: ") + name + " must be in [0, 1), got " +
                  std::to_string(value));
  };
  check(options.dropout, "dropout");
  check(options.attention_dropout, "attention dropout");
  check(options.label_smoothing, "label smoothing");
}

template <typename T>
TransformerGraph<T>::TransformerGraph(const ModelConfig& config, const TrainingOptions& options,
                                      TrainingOps<T>& ops)
    : config(config), options(options), ops(ops) {
  validate_config(config);
  validate_training_options(options);
  build_layout();
}

// ---- Layout ----------------------------------------------------------------------------------

template <typename T>
size_t TransformerGraph<T>::find(const std::string& name) const {
  auto it = slot_index.find(name);
  if (it == slot_index.end()) throw Error("transformer: no parameter named '" + name + "'");
  return it->second;
}

template <typename T>
size_t TransformerGraph<T>::offset_of(const std::string& name) const {
  return slots[find(name)].offset;
}

template <typename T>
typename TransformerGraph<T>::Linear TransformerGraph<T>::linear(const std::string& prefix) const {
  const ParameterSlot& w = slots[find(prefix + schema::kWeight)];
  return {w.offset, offset_of(prefix + schema::kBias), static_cast<int64_t>(w.spec.shape[0]),
          static_cast<int64_t>(w.spec.shape[1])};
}

template <typename T>
typename TransformerGraph<T>::Norm TransformerGraph<T>::norm(const std::string& prefix) const {
  return {offset_of(prefix + schema::kGamma), offset_of(prefix + schema::kBeta)};
}

template <typename T>
void TransformerGraph<T>::build_layout() {
  slots = parameter_slots(config);
  for (size_t i = 0; i < slots.size(); ++i) slot_index[slots[i].spec.name] = i;
  source_embedding = offset_of(param::source_embedding(config));
  target_embedding = offset_of(param::target_embedding(config));
  output_weight = offset_of(param::output_projection(config));
  has_output_bias = config.output_bias;
  if (has_output_bias) output_bias = offset_of(param::kOutputBias);
  for (uint32_t i = 0; i < config.encoder_layers; ++i) {
    const std::string p = param::encoder_layer(i);
    encoder_layers.push_back(
        {linear(p + schema::kSelfAttentionQkv.name), linear(p + schema::kSelfAttentionOutput.name),
         linear(p + schema::kFfnInner.name), linear(p + schema::kFfnOuter.name),
         norm(p + schema::kSelfAttentionNorm.name), norm(p + schema::kFfnNorm.name)});
  }
  for (uint32_t i = 0; i < config.decoder_layers; ++i) {
    const std::string p = param::decoder_layer(i);
    DecoderLayer layer;
    if (ssru()) {
      layer.ssru_input_forget = linear(p + schema::kSsruInputForget.name);
      layer.ssru_norm = norm(p + schema::kSsruNorm.name);
    } else {
      layer.qkv = linear(p + schema::kSelfAttentionQkv.name);
      layer.self_output = linear(p + schema::kSelfAttentionOutput.name);
      layer.self_norm = norm(p + schema::kSelfAttentionNorm.name);
    }
    layer.cross_query = linear(p + schema::kCrossAttentionQuery.name);
    layer.cross_key_value = linear(p + schema::kCrossAttentionKeyValue.name);
    layer.cross_output = linear(p + schema::kCrossAttentionOutput.name);
    layer.ffn_inner = linear(p + schema::kFfnInner.name);
    layer.ffn_outer = linear(p + schema::kFfnOuter.name);
    layer.cross_norm = norm(p + schema::kCrossAttentionNorm.name);
    layer.ffn_norm = norm(p + schema::kFfnNorm.name);
    decoder_layers.push_back(layer);
  }
  if (pre_norm()) {
    encoder_final_norm = norm(schema::kEncoderFinalNorm.name);
    decoder_final_norm = norm(schema::kDecoderFinalNorm.name);
  }
  encoder.resize(config.encoder_layers);
  decoder.resize(config.decoder_layers);
}

// ---- Plan --------------------------------------------------------------------------------------

template <typename T>
void TransformerGraph<T>::plan(int64_t batch, int64_t source_len, int64_t target_len) {
  B = batch;
  S = source_len;
  Tt = target_len;
  const size_t alignment = ops.value_alignment();
  // A first pass counts, the arena grows when needed, a second pass hands out pointers; each
  // buffer starts on the device's alignment.
  for (int pass = 0; pass < 2; ++pass) {
    size_t values = 0;
    T* base = pass ? ops.reserve_values(values_needed_) : nullptr;
    lay_out_activations([&](int64_t n) {
      T* p = base ? base + values : nullptr;
      values += (static_cast<size_t>(n) * sizeof(T) + alignment - 1) / alignment * alignment /
                sizeof(T);
      return p;
    });
    values_needed_ = values;
  }
  plan_workspace_and_indices();
}

template <typename T>
template <typename Take>
void TransformerGraph<T>::lay_out_activations(Take&& take) {
  const int64_t dm = d(), ff = config.d_ff, heads = config.num_heads;
  const int64_t ns = B * S, nt = B * Tt, rows = std::max(ns, nt);
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
    if (ssru()) {
      e.ssru_input = take(nt * 2 * dm);
      e.ssru_cell = take(nt * dm);
    } else {
      e.qkv = take(nt * 3 * dm);
      attention(e.self_attention, nt, Tt, Tt);
    }
    e.query = take(nt * dm);
    e.key_value = take(ns * 2 * dm);
    attention(e.cross_attention, nt, Tt, S);
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
}

template <typename T>
void TransformerGraph<T>::plan_workspace_and_indices() {
  const int64_t dm = d(), ff = config.d_ff;
  const int64_t ns = B * S, nt = B * Tt, rows = std::max(ns, nt);
  AttentionShape largest;
  largest.batch = B;
  largest.heads = config.num_heads;
  largest.query_len = std::max(S, Tt);
  largest.key_len = std::max(S, Tt);
  largest.head_dim = config.head_dim();
  ops.reserve_workspace(rows, std::max({vocab(), ff, 3 * dm}), largest);

  const size_t index_count = static_cast<size_t>(2 * ns + 3 * nt + B);
  host_indices.assign(index_count, 0);
  source_ids = ops.reserve_indices(index_count);
  source_positions = source_ids + ns;
  target_ids = source_positions + ns;
  target_positions = target_ids + nt;
  targets = target_positions + nt;
  source_lengths = targets + nt;
  row_loss.resize(static_cast<size_t>(nt));
  row_nll.resize(static_cast<size_t>(nt));
}

template <typename T>
void TransformerGraph<T>::load_batch(const Batch& batch) {
  batch.validate(config);
  const int64_t max_key = ops.max_key_length();
  if (max_key > 0 && (batch.source_len > max_key || batch.target_len > max_key))
    throw Error("transformer: sequence length " +
                std::to_string(std::max(batch.source_len, batch.target_len)) +
                " exceeds the attention kernel's limit of " + std::to_string(max_key));
  plan(batch.batch_size, batch.source_len, batch.target_len);
  row_offset = batch.row_offset;
  const int64_t ns = B * S, nt = B * Tt;
  int32_t* h = host_indices.data();  // the index arena's layout (plan)
  for (int64_t b = 0; b < B; ++b) {
    h[2 * ns + 3 * nt + b] = batch.source_lengths[b];
    for (int64_t s = 0; s < S; ++s) {
      h[b * S + s] = batch.source_ids[b * S + s];
      h[ns + b * S + s] = static_cast<int32_t>(s);
    }
    for (int64_t t = 0; t < Tt; ++t) {
      h[2 * ns + b * Tt + t] = batch.target_input_ids[b * Tt + t];
      h[2 * ns + nt + b * Tt + t] = static_cast<int32_t>(t);
      h[2 * ns + 2 * nt + b * Tt + t] =
          t < batch.target_lengths[b] ? batch.target_output_ids[b * Tt + t] : -1;
    }
  }
  ops.upload_indices(source_ids, h, host_indices.size());
}

// ---- Forward -----------------------------------------------------------------------------------

template <typename T>
float TransformerGraph<T>::dropout_rate() const {
  return training ? options.dropout : 0.0f;
}
template <typename T>
float TransformerGraph<T>::attention_dropout_rate() const {
  return training ? options.attention_dropout : 0.0f;
}

// The draw of a site of `count` elements, for this batch's rows of the global batch
// (Batch::row_offset): ranks sharing a batch draw the masks one process would.
template <typename T>
DropoutDraw TransformerGraph<T>::draw(uint64_t site, float p, int64_t count) const {
  return {seed, site, static_cast<uint64_t>(row_offset * (count / B)), p};
}

template <typename T>
void TransformerGraph<T>::dropout(T* x, int64_t count, uint64_t site) {
  const float p = dropout_rate();
  if (p > 0) ops.dropout(x, count, draw(site, p, count));
}

template <typename T>
void TransformerGraph<T>::layer_norm(const T* x, const Norm& n, int64_t rows, T* out, T* mean,
                                     T* rstd) {
  ops.layer_norm_forward(x, param(n.gamma), param(n.beta), config.layer_norm_epsilon, rows, d(),
                         out, mean, rstd);
}

template <typename T>
void TransformerGraph<T>::linear_forward(const T* x, const Linear& w, bool with_bias,
                                         int64_t rows, T* y) {
  ops.linear_forward(x, param(w.weight), with_bias ? param(w.bias) : nullptr, rows, w.in, w.out,
                     y);
}

// The residual block around F. F(sub_in, out) writes F's output to `out`.
template <typename T>
template <typename F>
void TransformerGraph<T>::block_forward(Block& b, const T* x, int64_t rows, const Norm& n,
                                        uint64_t site, F sublayer) {
  const int64_t count = rows * d();
  b.x = x;
  b.site = site;
  const T* sub_in = x;
  if (pre_norm()) {
    layer_norm(x, n, rows, b.sub_in, b.mean, b.rstd);
    sub_in = b.sub_in;
  }
  sublayer(sub_in, b.sum);
  dropout(b.sum, count, site);
  ops.add(b.sum, x, b.sum, count);  // sum = x + Dropout(F)
  if (!pre_norm()) layer_norm(b.sum, n, rows, b.y, b.mean, b.rstd);
}

template <typename T>
AttentionShape TransformerGraph<T>::attention_shape(int64_t tq, int64_t tk) const {
  AttentionShape shape;
  shape.batch = B;
  shape.heads = config.num_heads;
  shape.query_len = tq;
  shape.key_len = tk;
  shape.head_dim = config.head_dim();
  return shape;
}

// A [B, len, width] buffer seen as [B, heads, len, head_dim].
template <typename T>
HeadStrides TransformerGraph<T>::strides(int64_t len, int64_t width) const {
  return {len * width, static_cast<int64_t>(config.head_dim()), width};
}

template <typename T>
void TransformerGraph<T>::attention(Attention& a, const T* q, HeadStrides qs, const T* k,
                                    HeadStrides ks, const T* v, HeadStrides vs, int64_t tq,
                                    int64_t tk, const int32_t* key_lengths, bool causal,
                                    uint64_t site) {
  const AttentionShape shape = attention_shape(tq, tk);
  a.site = site;
  const float p = attention_dropout_rate();
  const DropoutDraw dropout = draw(site, p, B * shape.heads * tq * tk);
  ops.attention_forward(q, qs, k, ks, v, vs, a.context, strides(tq, d()), shape, key_lengths,
                        causal ? 0 : -1, a.probabilities, p > 0 ? &dropout : nullptr);
}

template <typename T>
void TransformerGraph<T>::self_attention_forward(const Linear& qkv, const Linear& output,
                                                 T* qkv_buffer, Attention& a, const T* x, T* out,
                                                 int64_t len, const int32_t* key_lengths,
                                                 bool causal, uint64_t site) {
  const int64_t dm = d(), rows = B * len;
  linear_forward(x, qkv, true, rows, qkv_buffer);
  const HeadStrides s = strides(len, 3 * dm);
  attention(a, qkv_buffer, s, qkv_buffer + dm, s, qkv_buffer + 2 * dm, s, len, len, key_lengths,
            causal, site);
  linear_forward(a.context, output, true, rows, out);
}

// The SSRU cell over the whole target: [x | f] = in W^T + b, then the recurrence along each
// sentence's steps (the decoder's rows are b * T + t); out = relu(c).
template <typename T>
void TransformerGraph<T>::ssru_forward(const Linear& input_forget, DecoderActivations& a, const T* x, T* out) {
  const int64_t dm = d();
  linear_forward(x, input_forget, true, B * Tt, a.ssru_input);
  ops.ssru_forward(a.ssru_input, a.ssru_input + dm, 2 * dm, B, Tt, dm, a.ssru_cell, out);
}

template <typename T>
void TransformerGraph<T>::ffn_forward(const Linear& inner, const Linear& outer, T* hidden,
                                      const T* x, T* out, int64_t rows) {
  linear_forward(x, inner, false, rows, hidden);
  ops.bias_relu_forward(hidden, param(inner.bias), rows, inner.out);
  linear_forward(hidden, outer, true, rows, out);
}

namespace {
// Dropout sites: a distinct id per place a mask is drawn.
uint64_t site(uint64_t stack, uint64_t layer, uint64_t which) {
  return (stack << 32) | (layer << 8) | which;
}
}  // namespace

template <typename T>
void TransformerGraph<T>::encode(uint64_t dropout_seed) {
  seed = dropout_seed;
  const int64_t dm = d(), ns = B * S;
  const T scale = static_cast<T>(std::sqrt(static_cast<double>(dm)));
  ops.embedding_forward(param(source_embedding), config.source_vocab_size, dm, source_ids,
                        source_positions, ns, scale, encoder_input);
  dropout(encoder_input, ns * dm, site(1, 0, 0));
  const T* x = encoder_input;
  for (size_t l = 0; l < encoder.size(); ++l) {
    EncoderLayer& w = encoder_layers[l];
    EncoderActivations& a = encoder[l];
    block_forward(a.self, x, ns, w.self_norm, site(1, l, 1), [&](const T* in, T* out) {
      self_attention_forward(w.qkv, w.self_output, a.qkv, a.attention, in, out, S, source_lengths,
                             false, site(1, l, 2));
    });
    block_forward(a.ffn, a.self.y, ns, w.ffn_norm, site(1, l, 3), [&](const T* in, T* out) {
      ffn_forward(w.ffn_inner, w.ffn_outer, a.hidden, in, out, ns);
    });
    x = a.ffn.y;
  }
  if (pre_norm()) {
    layer_norm(x, encoder_final_norm, ns, encoder_final, encoder_final_mean, encoder_final_rstd);
    x = encoder_final;
  }
  encoder_output = x;
}

template <typename T>
void TransformerGraph<T>::decode(uint64_t dropout_seed) {
  seed = dropout_seed;
  const int64_t dm = d(), nt = B * Tt, ns = B * S;
  const T scale = static_cast<T>(std::sqrt(static_cast<double>(dm)));
  ops.embedding_forward(param(target_embedding), config.target_vocab_size, dm, target_ids,
                        target_positions, nt, scale, decoder_input);
  dropout(decoder_input, nt * dm, site(2, 0, 0));
  const T* x = decoder_input;
  for (size_t l = 0; l < decoder.size(); ++l) {
    DecoderLayer& w = decoder_layers[l];
    DecoderActivations& a = decoder[l];
    block_forward(a.self, x, nt, ssru() ? w.ssru_norm : w.self_norm, site(2, l, 1), [&](const T* in, T* out) {
      if (ssru()) return ssru_forward(w.ssru_input_forget, a, in, out);
      self_attention_forward(w.qkv, w.self_output, a.qkv, a.self_attention, in, out, Tt, nullptr,
                             true, site(2, l, 2));
    });
    block_forward(a.cross, a.self.y, nt, w.cross_norm, site(2, l, 3), [&](const T* in, T* out) {
      linear_forward(in, w.cross_query, true, nt, a.query);
      linear_forward(encoder_output, w.cross_key_value, true, ns, a.key_value);
      const HeadStrides kv = strides(S, 2 * dm);
      attention(a.cross_attention, a.query, strides(Tt, dm), a.key_value, kv, a.key_value + dm,
                kv, Tt, S, source_lengths, false, site(2, l, 4));
      linear_forward(a.cross_attention.context, w.cross_output, true, nt, out);
    });
    block_forward(a.ffn, a.cross.y, nt, w.ffn_norm, site(2, l, 5), [&](const T* in, T* out) {
      ffn_forward(w.ffn_inner, w.ffn_outer, a.hidden, in, out, nt);
    });
    x = a.ffn.y;
  }
  if (pre_norm()) {
    layer_norm(x, decoder_final_norm, nt, decoder_final, decoder_final_mean, decoder_final_rstd);
    x = decoder_final;
  }
  decoder_output = x;
}

template <typename T>
void TransformerGraph<T>::project(const T* x, int64_t rows, T* out) {
  ops.linear_forward(x, param(output_weight), has_output_bias ? param(output_bias) : nullptr, rows,
                     d(), vocab(), out);
}

template <typename T>
LossSums TransformerGraph<T>::loss(bool write_gradient) {
  const int64_t nt = B * Tt;
  project(decoder_output, nt, logits);
  ops.cross_entropy(logits, targets, nt, vocab(), options.label_smoothing, write_gradient,
                    row_loss.data(), row_nll.data());
  const int32_t* host_targets = host_indices.data() + 2 * B * S + 2 * nt;
  LossSums sums;
  for (int64_t r = 0; r < nt; ++r) {  // in order: independent of the thread count and device
    sums.loss_sum += row_loss[r];
    sums.nll_sum += row_nll[r];
    sums.token_count += host_targets[r] >= 0;
  }
  return sums;
}

// ---- Backward ----------------------------------------------------------------------------------

template <typename T>
void TransformerGraph<T>::linear_backward(const T* dy, const T* x, const Linear& w, int64_t rows,
                                          T* dx, bool accumulate_dx, bool with_bias) {
  ops.linear_backward(dy, x, param(w.weight), rows, w.in, w.out, dx, accumulate_dx,
                      grad(w.weight), with_bias ? grad(w.bias) : nullptr);
}

// d_stream holds d(loss)/d(block output) on entry and d(loss)/d(block input) on return.
// F_backward(d_sub_out, d_sub_in) writes d(loss)/d(sub_in) given d(loss)/d(F output).
template <typename T>
template <typename F>
void TransformerGraph<T>::block_backward(Block& b, int64_t rows, const Norm& n,
                                         F sublayer_backward) {
  const int64_t dm = d(), count = rows * dm;
  if (!pre_norm()) {
    ops.zero(d_sum, count);
    ops.layer_norm_backward(d_stream, b.sum, b.mean, b.rstd, param(n.gamma), rows, dm, d_sum,
                            grad(n.gamma), grad(n.beta));
    ops.copy(d_sub, d_sum, count);
    dropout(d_sub, count, b.site);
    sublayer_backward(d_sub, d_sub_in);
    ops.add(d_stream, d_sum, d_sub_in, count);
  } else {
    ops.copy(d_sub, d_stream, count);
    dropout(d_sub, count, b.site);
    sublayer_backward(d_sub, d_sub_in);
    ops.layer_norm_backward(d_sub_in, b.x, b.mean, b.rstd, param(n.gamma), rows, dm, d_stream,
                            grad(n.gamma), grad(n.beta));
  }
}

template <typename T>
void TransformerGraph<T>::attention_backward(Attention& a, const T* q, HeadStrides qs, const T* k,
                                             HeadStrides ks, const T* v, HeadStrides vs, T* dq,
                                             T* dk, T* dv, HeadStrides dqs, HeadStrides dks,
                                             HeadStrides dvs, int64_t tq, int64_t tk) {
  const float p = attention_dropout_rate();
  const DropoutDraw dropout = draw(a.site, p, B * config.num_heads * tq * tk);
  ops.attention_backward(d_context, strides(tq, d()), q, qs, k, ks, v, vs, a.probabilities,
                         p > 0 ? &dropout : nullptr, dq, dqs, dk, dks, dv, dvs,
                         attention_shape(tq, tk));
}

template <typename T>
void TransformerGraph<T>::self_attention_backward(const Linear& qkv, const Linear& output,
                                                  const T* qkv_buffer, Attention& a, const T* x,
                                                  const T* d_out, T* d_x, int64_t len) {
  const int64_t dm = d(), rows = B * len;
  linear_backward(d_out, a.context, output, rows, d_context, false, true);
  const HeadStrides s = strides(len, 3 * dm);
  attention_backward(a, qkv_buffer, s, qkv_buffer + dm, s, qkv_buffer + 2 * dm, s, d_qkv,
                     d_qkv + dm, d_qkv + 2 * dm, s, s, s, len, len);
  linear_backward(d_qkv, x, qkv, rows, d_x, false, true);
}

template <typename T>
void TransformerGraph<T>::ssru_backward(const Linear& input_forget, DecoderActivations& a, const T* x,
                                        const T* d_out, T* d_x) {
  const int64_t dm = d(), nt = B * Tt;
  ops.ssru_backward(d_out, a.ssru_input, a.ssru_input + dm, 2 * dm, a.ssru_cell, B, Tt, dm, d_qkv, d_qkv + dm,
                    2 * dm);
  linear_backward(d_qkv, x, input_forget, nt, d_x, false, true);
}

template <typename T>
void TransformerGraph<T>::ffn_backward(const Linear& inner, const Linear& outer, T* hidden,
                                       const T* x, const T* d_out, T* d_x, int64_t rows) {
  linear_backward(d_out, hidden, outer, rows, d_hidden, false, true);
  ops.bias_relu_backward(d_hidden, hidden, rows, inner.out, grad(inner.bias));
  linear_backward(d_hidden, x, inner, rows, d_x, false, false);
}

template <typename T>
void TransformerGraph<T>::backward() {
  decoder_backward();
  encoder_backward();
}

template <typename T>
void TransformerGraph<T>::decoder_backward() {
  const int64_t dm = d(), nt = B * Tt, ns = B * S;
  const T scale = static_cast<T>(std::sqrt(static_cast<double>(dm)));
  // Output projection: logits hold d(loss)/d(logits) (times the device's loss scale).
  T* d_output = pre_norm() ? d_sum : d_stream;
  ops.linear_backward(logits, decoder_output, param(output_weight), nt, dm, vocab(), d_output,
                      false, grad(output_weight), has_output_bias ? grad(output_bias) : nullptr);
  if (pre_norm()) {
    ops.zero(d_stream, nt * dm);
    const T* x = decoder.empty() ? decoder_input : decoder.back().ffn.y;
    ops.layer_norm_backward(d_output, x, decoder_final_mean, decoder_final_rstd,
                            param(decoder_final_norm.gamma), nt, dm, d_stream,
                            grad(decoder_final_norm.gamma), grad(decoder_final_norm.beta));
  }
  ops.zero(d_encoder_output, ns * dm);
  for (size_t l = decoder.size(); l-- > 0;) {
    DecoderLayer& w = decoder_layers[l];
    DecoderActivations& a = decoder[l];
    block_backward(a.ffn, nt, w.ffn_norm, [&](const T* d_out, T* d_x) {
      ffn_backward(w.ffn_inner, w.ffn_outer, a.hidden, pre_norm() ? a.ffn.sub_in : a.ffn.x, d_out,
                   d_x, nt);
    });
    block_backward(a.cross, nt, w.cross_norm, [&](const T* d_out, T* d_x) {
      linear_backward(d_out, a.cross_attention.context, w.cross_output, nt, d_context, false,
                      true);
      T* d_query = d_qkv;  // [B*T, d]
      const HeadStrides kv = strides(S, 2 * dm);
      attention_backward(a.cross_attention, a.query, strides(Tt, dm), a.key_value, kv,
                         a.key_value + dm, kv, d_query, d_key_value, d_key_value + dm,
                         strides(Tt, dm), kv, kv, Tt, S);
      linear_backward(d_key_value, encoder_output, w.cross_key_value, ns, d_encoder_output, true,
                      true);
      linear_backward(d_query, pre_norm() ? a.cross.sub_in : a.cross.x, w.cross_query, nt, d_x,
                      false, true);
    });
    block_backward(a.self, nt, ssru() ? w.ssru_norm : w.self_norm, [&](const T* d_out, T* d_x) {
      const T* in = pre_norm() ? a.self.sub_in : a.self.x;
      if (ssru()) return ssru_backward(w.ssru_input_forget, a, in, d_out, d_x);
      self_attention_backward(w.qkv, w.self_output, a.qkv, a.self_attention, in, d_out, d_x, Tt);
    });
  }
  dropout(d_stream, nt * dm, site(2, 0, 0));
  ops.embedding_backward(d_stream, target_ids, nt, dm, config.target_vocab_size, scale,
                         grad(target_embedding));
}

template <typename T>
void TransformerGraph<T>::encoder_backward() {
  const int64_t dm = d(), ns = B * S;
  const T scale = static_cast<T>(std::sqrt(static_cast<double>(dm)));
  // Encoder: its output's gradient came from every decoder layer's cross-attention.
  if (pre_norm()) {
    ops.zero(d_stream, ns * dm);
    const T* x = encoder.empty() ? encoder_input : encoder.back().ffn.y;
    ops.layer_norm_backward(d_encoder_output, x, encoder_final_mean, encoder_final_rstd,
                            param(encoder_final_norm.gamma), ns, dm, d_stream,
                            grad(encoder_final_norm.gamma), grad(encoder_final_norm.beta));
  } else {
    ops.copy(d_stream, d_encoder_output, ns * dm);
  }
  for (size_t l = encoder.size(); l-- > 0;) {
    EncoderLayer& w = encoder_layers[l];
    EncoderActivations& a = encoder[l];
    block_backward(a.ffn, ns, w.ffn_norm, [&](const T* d_out, T* d_x) {
      ffn_backward(w.ffn_inner, w.ffn_outer, a.hidden, pre_norm() ? a.ffn.sub_in : a.ffn.x, d_out,
                   d_x, ns);
    });
    block_backward(a.self, ns, w.self_norm, [&](const T* d_out, T* d_x) {
      self_attention_backward(w.qkv, w.self_output, a.qkv, a.attention,
                              pre_norm() ? a.self.sub_in : a.self.x, d_out, d_x, S);
    });
  }
  dropout(d_stream, ns * dm, site(1, 0, 0));
  ops.embedding_backward(d_stream, source_ids, ns, dm, config.source_vocab_size, scale,
                         grad(source_embedding));
}

// ---- Steps -------------------------------------------------------------------------------------

template <typename T>
LossSums TransformerGraph<T>::forward_backward(const Batch& batch, uint64_t dropout_seed) {
  load_batch(batch);
  training = true;
  encode(dropout_seed);
  decode(dropout_seed);
  const LossSums sums = loss(true);
  backward();
  return sums;
}

template <typename T>
LossSums TransformerGraph<T>::evaluate(const Batch& batch) {
  load_batch(batch);
  training = false;
  encode(0);
  decode(0);
  return loss(false);
}

template class TransformerGraph<float>;
template class TransformerGraph<double>;

}  // namespace xf::trainer
