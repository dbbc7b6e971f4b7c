// The Transformer's explicit forward and backward passes (in the manner of llm.c).
//
// Every sub-layer F (self-attention, cross-attention, FFN) sits in a residual block:
//   post-norm: y = LayerNorm(x + Dropout(F(x)))
//   pre-norm:  y = x + Dropout(F(LayerNorm(x)))   (plus a final LayerNorm per stack)
// Activations of the last forward pass are kept in two arenas (values, dropout masks) planned
// for the batch shape; they grow to the largest shape seen and are reused, so steady-state
// training allocates nothing of its own.
#include "xf/trainer/transformer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>

#include "xf/error.h"
#include "xf/trainer/layers.h"

namespace xf::trainer {

// ---- Batch -------------------------------------------------------------------------------------

void Batch::validate(const ModelConfig& config) const {
  auto fail = [](const std::string& what) { throw Error("invalid batch: " + what); };
  if (batch_size < 1) fail("batch_size must be >= 1");
  if (source_len < 1 || target_len < 1) fail("source_len and target_len must be >= 1");
  const size_t b = static_cast<size_t>(batch_size);
  if (source_ids.size() != b * source_len) fail("source_ids size is not batch_size * source_len");
  if (target_input_ids.size() != b * target_len || target_output_ids.size() != b * target_len)
    fail("target ids size is not batch_size * target_len");
  if (source_lengths.size() != b || target_lengths.size() != b) fail("lengths size != batch_size");
  if (static_cast<uint64_t>(std::max(source_len, target_len)) > config.max_positions)
    fail("sequence length " + std::to_string(std::max(source_len, target_len)) +
         " exceeds max_positions " + std::to_string(config.max_positions));
  int64_t src_tokens = 0, tgt_tokens = 0;
  for (size_t i = 0; i < b; ++i) {
    if (source_lengths[i] < 1 || source_lengths[i] > source_len)
      fail("source_lengths[" + std::to_string(i) + "] out of 1..source_len");
    if (target_lengths[i] < 1 || target_lengths[i] > target_len)
      fail("target_lengths[" + std::to_string(i) + "] out of 1..target_len");
    src_tokens += source_lengths[i];
    tgt_tokens += target_lengths[i];
  }
  auto check_ids = [&](const std::vector<int32_t>& ids, uint32_t vocab, const char* name) {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || static_cast<uint32_t>(ids[i]) >= vocab)
        fail(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
             " is outside the vocabulary of " + std::to_string(vocab));
  };
  check_ids(source_ids, config.source_vocab_size, "source_ids");
  check_ids(target_input_ids, config.target_vocab_size, "target_input_ids");
  check_ids(target_output_ids, config.target_vocab_size, "target_output_ids");
  if (src_tokens != source_tokens || tgt_tokens != target_tokens)
    fail("source_tokens/target_tokens disagree with the lengths");
}

Batch make_batch(const ModelConfig& config, const std::vector<std::vector<int32_t>>& sources,
                 const std::vector<std::vector<int32_t>>& targets, int64_t min_source_len,
                 int64_t min_target_len) {
  if (sources.size() != targets.size() || sources.empty())
    throw Error("make_batch: need as many targets as sources, at least one");
  Batch batch;
  batch.batch_size = static_cast<int64_t>(sources.size());
  batch.source_len = min_source_len;
  batch.target_len = min_target_len;
  for (size_t i = 0; i < sources.size(); ++i) {
    batch.source_len = std::max<int64_t>(batch.source_len, sources[i].size() + 1);
    batch.target_len = std::max<int64_t>(batch.target_len, targets[i].size() + 1);
  }
  const size_t b = sources.size();
  batch.source_ids.assign(b * batch.source_len, config.pad_id);
  batch.target_input_ids.assign(b * batch.target_len, config.pad_id);
  batch.target_output_ids.assign(b * batch.target_len, config.pad_id);
  for (size_t i = 0; i < b; ++i) {
    int32_t* src = &batch.source_ids[i * batch.source_len];
    std::copy(sources[i].begin(), sources[i].end(), src);
    src[sources[i].size()] = config.eos_id;
    int32_t* in = &batch.target_input_ids[i * batch.target_len];
    int32_t* out = &batch.target_output_ids[i * batch.target_len];
    in[0] = config.bos_id;
    std::copy(targets[i].begin(), targets[i].end(), in + 1);
    std::copy(targets[i].begin(), targets[i].end(), out);
    out[targets[i].size()] = config.eos_id;
    batch.source_lengths.push_back(static_cast<int32_t>(sources[i].size() + 1));
    batch.target_lengths.push_back(static_cast<int32_t>(targets[i].size() + 1));
    batch.source_tokens += batch.source_lengths.back();
    batch.target_tokens += batch.target_lengths.back();
  }
  return batch;
}

// ---- The model ---------------------------------------------------------------------------------

template <typename T>
struct BasicTransformerModel<T>::Impl {
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

  // One residual block's activations (rows = B*S or B*T).
  struct Block {
    const T* x = nullptr;       // block input [rows, d] (not owned)
    T* sub_in = nullptr;        // F's input: LayerNorm(x) when pre-norm, else x [rows, d]
    T* sub_out = nullptr;       // Dropout(F(sub_in)) [rows, d]
    uint8_t* mask = nullptr;    // [rows * d]
    T* sum = nullptr;           // x + sub_out [rows, d]
    T* y = nullptr;             // block output: LayerNorm(sum) when post-norm, else sum
    T* mean = nullptr;          // [rows] of the block's LayerNorm
    T* rstd = nullptr;          // [rows]
  };
  struct Attention {
    T* probabilities = nullptr;  // [B, H, Tq, Tk]
    uint8_t* mask = nullptr;     // [B, H, Tq, Tk], only with attention dropout
    T* context = nullptr;        // [rows, d] attention output before the output projection
  };
  struct EncoderActivations {
    Block self, ffn;
    T* qkv = nullptr;     // [B*S, 3d]
    Attention attention;
    T* hidden = nullptr;  // [B*S, d_ff] after ReLU
  };
  struct DecoderActivations {
    Block self, cross, ffn;
    T* qkv = nullptr;        // [B*T, 3d]
    Attention self_attention;
    T* query = nullptr;      // [B*T, d]
    T* key_value = nullptr;  // [B*S, 2d] from the encoder output
    Attention cross_attention;
    T* hidden = nullptr;     // [B*T, d_ff]
  };

  ModelConfig config;
  TrainingOptions options;
  int threads = 1;
  std::vector<ParameterSlot> slots;
  std::unordered_map<std::string, size_t> slot_index;
  std::vector<T> parameters, gradients;

  size_t source_embedding = 0, target_embedding = 0, output_weight = 0, output_bias = 0;
  bool has_output_bias = false;
  std::vector<EncoderLayer> encoder_layers;
  std::vector<DecoderLayer> decoder_layers;
  Norm encoder_final_norm, decoder_final_norm;

  // ---- Activations of the last forward pass, planned per batch shape ----
  int64_t B = 0, S = 0, Tt = 0;  // Tt: target length (T is the scalar type)
  int64_t row_offset = 0;        // Batch::row_offset of the loaded batch
  bool training = false;
  std::vector<T> value_arena;
  std::vector<uint8_t> mask_arena;
  std::vector<int32_t> source_ids, target_ids, source_positions, target_positions, targets,
      source_lengths;  // [B*S], [B*T], [B*S], [B*T], [B*T] (-1 = not scored), [B]
  std::vector<double> row_loss, row_nll;  // [B*T]

  T* encoder_input = nullptr;   // [B*S, d] embedding + positions after dropout
  uint8_t* encoder_input_mask = nullptr;
  std::vector<EncoderActivations> encoder;
  T* encoder_final = nullptr;   // [B*S, d] pre-norm's final LayerNorm output
  T* encoder_final_mean = nullptr, *encoder_final_rstd = nullptr;
  const T* encoder_output = nullptr;  // what cross-attention reads [B*S, d]
  T* decoder_input = nullptr;   // [B*T, d]
  uint8_t* decoder_input_mask = nullptr;
  std::vector<DecoderActivations> decoder;
  T* decoder_final = nullptr;   // [B*T, d]
  T* decoder_final_mean = nullptr, *decoder_final_rstd = nullptr;
  const T* decoder_output = nullptr;  // what the output projection reads [B*T, d]
  T* logits = nullptr;          // [B*T, V] (its gradient after backward)
  T* attention_scratch = nullptr;  // [threads, 2 * max(S, T)]
  // Backward temporaries, shared by all layers.
  T* d_stream = nullptr;      // [max rows, d] gradient of the residual stream
  T* d_encoder_output = nullptr;  // [B*S, d]
  T* d_sum = nullptr;         // [max rows, d]
  T* d_sub = nullptr;         // [max rows, d]
  T* d_sub_in = nullptr;      // [max rows, d]
  T* d_context = nullptr;     // [max rows, d]
  T* d_qkv = nullptr;         // [max rows, 3d] (also d_query | d_key_value)
  T* d_key_value = nullptr;   // [B*S, 2d]
  T* d_hidden = nullptr;      // [max rows, d_ff]

  int64_t d() const { return config.d_model; }
  T* param(size_t offset) { return parameters.data() + offset; }
  T* grad(size_t offset) { return gradients.data() + offset; }
  T epsilon() const { return static_cast<T>(config.layer_norm_epsilon); }
  bool pre_norm() const { return config.norm_position == NormPosition::pre; }

  size_t find(const std::string& name) const {
    auto it = slot_index.find(name);
    if (it == slot_index.end()) throw Error("transformer: no parameter named '" + name + "'");
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

  void build_layout() {
    size_t offset = 0;
    for (ParameterSpec& spec : transformer_parameters(config)) {
      size_t size = 1;
      for (uint64_t dim : spec.shape) size *= static_cast<size_t>(dim);
      slot_index[spec.name] = slots.size();
      slots.push_back({std::move(spec), offset, size});
      offset += size;
    }
    parameters.assign(offset, T(0));
    gradients.assign(offset, T(0));
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

  // Lays every activation of a (B, S, T) batch out in the arenas: a first pass counts, the
  // arenas grow when needed, a second pass hands out pointers.
  // with_logits: room for the full [B*T, V] logits (greedy decoding projects last rows only).
  void plan(int64_t batch, int64_t source_len, int64_t target_len, bool with_logits = true) {
    B = batch;
    S = source_len;
    Tt = target_len;
    const int64_t dm = d(), ff = config.d_ff, heads = config.num_heads;
    const int64_t ns = B * S, nt = B * Tt, rows = std::max(ns, nt);
    const int64_t vocab = config.target_vocab_size;
    for (int pass = 0; pass < 2; ++pass) {
      size_t values = 0, masks = 0;
      T* vbase = pass ? value_arena.data() : nullptr;
      uint8_t* mbase = pass ? mask_arena.data() : nullptr;
      // 64-byte aligned chunks, so each buffer starts on a cache line.
      auto take = [&](int64_t n) {
        T* p = vbase ? vbase + values : nullptr;
        values += (static_cast<size_t>(n) * sizeof(T) + 63) / 64 * 64 / sizeof(T);
        return p;
      };
      auto take_mask = [&](int64_t n) {
        uint8_t* p = mbase ? mbase + masks : nullptr;
        masks += (static_cast<size_t>(n) + 63) / 64 * 64;
        return p;
      };
      auto block = [&](Block& b, int64_t n) {
        b.sub_in = pre_norm() ? take(n * dm) : nullptr;
        b.sub_out = take(n * dm);
        b.mask = take_mask(n * dm);
        b.sum = take(n * dm);
        b.y = pre_norm() ? b.sum : take(n * dm);
        b.mean = take(n);
        b.rstd = take(n);
      };
      auto attention = [&](Attention& a, int64_t n, int64_t tq, int64_t tk) {
        a.probabilities = take(B * heads * tq * tk);
        a.mask = options.attention_dropout > 0 ? take_mask(B * heads * tq * tk) : nullptr;
        a.context = take(n * dm);
      };
      encoder_input = take(ns * dm);
      encoder_input_mask = take_mask(ns * dm);
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
      decoder_input_mask = take_mask(nt * dm);
      for (DecoderActivations& e : decoder) {
        block(e.self, nt);
        block(e.cross, nt);
        block(e.ffn, nt);
        e.qkv = take(nt * 3 * dm);
        attention(e.self_attention, nt, Tt, Tt);
        e.query = take(nt * dm);
        e.key_value = take(ns * 2 * dm);
        attention(e.cross_attention, nt, Tt, S);
        e.hidden = take(nt * ff);
      }
      decoder_final = take(nt * dm);
      decoder_final_mean = take(nt);
      decoder_final_rstd = take(nt);
      logits = take(with_logits ? nt * vocab : 0);
      attention_scratch = take(threads * 2 * std::max(S, Tt));
      d_stream = take(rows * dm);
      d_encoder_output = take(ns * dm);
      d_sum = take(rows * dm);
      d_sub = take(rows * dm);
      d_sub_in = take(rows * dm);
      d_context = take(rows * dm);
      d_qkv = take(rows * 3 * dm);
      d_key_value = take(ns * 2 * dm);
      d_hidden = take(rows * ff);
      if (pass == 0) {
        if (value_arena.size() < values) value_arena.resize(values);
        if (mask_arena.size() < masks) mask_arena.resize(masks);
      }
    }
    auto grow = [](auto& v, size_t n) {
      if (v.size() < n) v.resize(n);
    };
    grow(source_ids, ns);
    grow(source_positions, ns);
    grow(target_ids, nt);
    grow(target_positions, nt);
    grow(targets, nt);
    grow(source_lengths, B);
    grow(row_loss, nt);
    grow(row_nll, nt);
  }

  void load_batch(const Batch& batch) {
    batch.validate(config);
    plan(batch.batch_size, batch.source_len, batch.target_len);
    row_offset = batch.row_offset;
    for (int64_t b = 0; b < B; ++b) {
      source_lengths[b] = batch.source_lengths[b];
      for (int64_t s = 0; s < S; ++s) {
        source_ids[b * S + s] = batch.source_ids[b * S + s];
        source_positions[b * S + s] = static_cast<int32_t>(s);
      }
      for (int64_t t = 0; t < Tt; ++t) {
        target_ids[b * Tt + t] = batch.target_input_ids[b * Tt + t];
        target_positions[b * Tt + t] = static_cast<int32_t>(t);
        targets[b * Tt + t] = t < batch.target_lengths[b] ? batch.target_output_ids[b * Tt + t] : -1;
      }
    }
  }

  // ---- Forward pieces ----

  float dropout_rate() const { return training ? options.dropout : 0.0f; }

  // The index of this batch's first element of a site of `count` elements in the global batch
  // (Batch::row_offset): ranks sharing a batch draw the masks one process would.
  uint64_t first_index(int64_t count) const {
    return static_cast<uint64_t>(row_offset * (count / B));
  }

  void dropout(T* x, uint8_t* mask, int64_t count, uint64_t seed, uint64_t site) {
    const float p = dropout_rate();
    if (p <= 0) return;
    make_dropout_mask(seed, site, static_cast<size_t>(count), p, mask, threads, first_index(count));
    apply_dropout(x, mask, static_cast<size_t>(count), static_cast<T>(1.0 / (1.0 - p)), threads);
  }

  // Runs the residual block around F. F(sub_in, sub_out) writes F's output.
  template <typename F>
  void block_forward(Block& b, const T* x, int64_t rows, const Norm& norm, uint64_t seed,
                     uint64_t site, F sublayer) {
    const int64_t dm = d();
    b.x = x;
    const T* sub_in = x;
    if (pre_norm()) {
      layer_norm_forward(x, param(norm.gamma), param(norm.beta), epsilon(), rows, dm, b.sub_in,
                         b.mean, b.rstd, threads);
      sub_in = b.sub_in;
    }
    sublayer(sub_in, b.sub_out);
    dropout(b.sub_out, b.mask, rows * dm, seed, site);
    const int64_t n = rows * dm;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) b.sum[i] = x[i] + b.sub_out[i];
    if (!pre_norm())
      layer_norm_forward(b.sum, param(norm.gamma), param(norm.beta), epsilon(), rows, dm, b.y,
                         b.mean, b.rstd, threads);
  }

  AttentionShape attention_shape(int64_t tq, int64_t tk) const {
    AttentionShape shape;
    shape.batch = B;
    shape.heads = config.num_heads;
    shape.query_len = tq;
    shape.key_len = tk;
    shape.head_dim = config.head_dim();
    return shape;
  }
  // A [B, len, width] buffer seen as [B, heads, len, head_dim].
  HeadStrides strides(int64_t len, int64_t width) const {
    return {len * width, static_cast<int64_t>(config.head_dim()), width};
  }

  void attention(Attention& a, const T* q, HeadStrides qs, const T* k, HeadStrides ks, const T* v,
                 HeadStrides vs, int64_t tq, int64_t tk, const int32_t* key_lengths, bool causal,
                 uint64_t seed, uint64_t site) {
    const AttentionShape shape = attention_shape(tq, tk);
    const float p = training ? options.attention_dropout : 0.0f;
    if (p > 0) {
      const int64_t count = B * shape.heads * tq * tk;
      make_dropout_mask(seed, site, static_cast<size_t>(count), p, a.mask, threads,
                        first_index(count));
    }
    attention_forward(q, qs, k, ks, v, vs, a.context, strides(tq, d()), shape, key_lengths,
                      causal ? 0 : -1, a.probabilities, p > 0 ? a.mask : nullptr,
                      static_cast<T>(1.0 / (1.0 - p)), attention_scratch, threads);
  }

  void self_attention_forward(const Linear& qkv, const Linear& output, T* qkv_buffer,
                              Attention& a, const T* x, T* out, int64_t len,
                              const int32_t* key_lengths, bool causal, uint64_t seed,
                              uint64_t site) {
    const int64_t dm = d(), rows = B * len;
    linear_forward(x, param(qkv.weight), param(qkv.bias), rows, dm, 3 * dm, qkv_buffer, threads);
    const HeadStrides s = strides(len, 3 * dm);
    attention(a, qkv_buffer, s, qkv_buffer + dm, s, qkv_buffer + 2 * dm, s, len, len, key_lengths,
              causal, seed, site);
    linear_forward(a.context, param(output.weight), param(output.bias), rows, dm, dm, out, threads);
  }

  void ffn_forward(const Linear& inner, const Linear& outer, T* hidden, const T* x, T* out,
                   int64_t rows) {
    linear_forward(x, param(inner.weight), static_cast<const T*>(nullptr), rows, inner.in,
                   inner.out, hidden, threads);
    bias_relu_forward(hidden, param(inner.bias), rows, inner.out, threads);
    linear_forward(hidden, param(outer.weight), param(outer.bias), rows, outer.in, outer.out, out,
                   threads);
  }

  // Dropout sites: a distinct id per place a mask is drawn.
  static uint64_t site(uint64_t stack, uint64_t layer, uint64_t which) {
    return (stack << 32) | (layer << 8) | which;
  }

  void encode(uint64_t seed) {
    const int64_t dm = d(), ns = B * S;
    const T scale = static_cast<T>(std::sqrt(static_cast<double>(dm)));
    embedding_forward(param(source_embedding), config.source_vocab_size, dm, source_ids.data(),
                      source_positions.data(), ns, scale, encoder_input, threads);
    dropout(encoder_input, encoder_input_mask, ns * dm, seed, site(1, 0, 0));
    const T* x = encoder_input;
    for (size_t l = 0; l < encoder.size(); ++l) {
      EncoderLayer& w = encoder_layers[l];
      EncoderActivations& a = encoder[l];
      block_forward(a.self, x, ns, w.self_norm, seed, site(1, l, 1), [&](const T* in, T* out) {
        self_attention_forward(w.qkv, w.self_output, a.qkv, a.attention, in, out, S,
                               source_lengths.data(), false, seed, site(1, l, 2));
      });
      block_forward(a.ffn, a.self.y, ns, w.ffn_norm, seed, site(1, l, 3),
                    [&](const T* in, T* out) {
                      ffn_forward(w.ffn_inner, w.ffn_outer, a.hidden, in, out, ns);
                    });
      x = a.ffn.y;
    }
    if (pre_norm()) {
      layer_norm_forward(x, param(encoder_final_norm.gamma), param(encoder_final_norm.beta),
                         epsilon(), ns, dm, encoder_final, encoder_final_mean, encoder_final_rstd,
                         threads);
      x = encoder_final;
    }
    encoder_output = x;
  }

  void decode(uint64_t seed) {
    const int64_t dm = d(), nt = B * Tt, ns = B * S;
    const T scale = static_cast<T>(std::sqrt(static_cast<double>(dm)));
    embedding_forward(param(target_embedding), config.target_vocab_size, dm, target_ids.data(),
                      target_positions.data(), nt, scale, decoder_input, threads);
    dropout(decoder_input, decoder_input_mask, nt * dm, seed, site(2, 0, 0));
    const T* x = decoder_input;
    for (size_t l = 0; l < decoder.size(); ++l) {
      DecoderLayer& w = decoder_layers[l];
      DecoderActivations& a = decoder[l];
      block_forward(a.self, x, nt, w.self_norm, seed, site(2, l, 1), [&](const T* in, T* out) {
        self_attention_forward(w.qkv, w.self_output, a.qkv, a.self_attention, in, out, Tt,
                               nullptr, true, seed, site(2, l, 2));
      });
      block_forward(a.cross, a.self.y, nt, w.cross_norm, seed, site(2, l, 3),
                    [&](const T* in, T* out) {
                      linear_forward(in, param(w.cross_query.weight), param(w.cross_query.bias),
                                     nt, dm, dm, a.query, threads);
                      linear_forward(encoder_output, param(w.cross_key_value.weight),
                                     param(w.cross_key_value.bias), ns, dm, 2 * dm, a.key_value,
                                     threads);
                      const HeadStrides kv = strides(S, 2 * dm);
                      attention(a.cross_attention, a.query, strides(Tt, dm), a.key_value, kv,
                                a.key_value + dm, kv, Tt, S, source_lengths.data(), false, seed,
                                site(2, l, 4));
                      linear_forward(a.cross_attention.context, param(w.cross_output.weight),
                                     param(w.cross_output.bias), nt, dm, dm, out, threads);
                    });
      block_forward(a.ffn, a.cross.y, nt, w.ffn_norm, seed, site(2, l, 5),
                    [&](const T* in, T* out) {
                      ffn_forward(w.ffn_inner, w.ffn_outer, a.hidden, in, out, nt);
                    });
      x = a.ffn.y;
    }
    if (pre_norm()) {
      layer_norm_forward(x, param(decoder_final_norm.gamma), param(decoder_final_norm.beta),
                         epsilon(), nt, dm, decoder_final, decoder_final_mean, decoder_final_rstd,
                         threads);
      x = decoder_final;
    }
    decoder_output = x;
  }

  // Logits of `rows` decoder rows: out[rows, V] = x E^T (+ bias).
  void project(const T* x, int64_t rows, T* out) {
    linear_forward(x, param(output_weight), has_output_bias ? param(output_bias) : nullptr, rows,
                   d(), static_cast<int64_t>(config.target_vocab_size), out, threads);
  }

  LossSums loss(bool write_gradient) {
    const int64_t nt = B * Tt;
    project(decoder_output, nt, logits);
    cpu::label_smoothed_cross_entropy(logits, targets.data(), nt,
                                      static_cast<int64_t>(config.target_vocab_size),
                                      static_cast<T>(options.label_smoothing), -1, write_gradient,
                                      row_loss.data(), row_nll.data(), threads);
    LossSums sums;
    for (int64_t r = 0; r < nt; ++r) {  // in order: independent of the thread count
      sums.loss_sum += row_loss[r];
      sums.nll_sum += row_nll[r];
      sums.token_count += targets[r] >= 0;
    }
    return sums;
  }

  // ---- Backward pieces ----

  // d_stream holds d(loss)/d(block output) on entry and d(loss)/d(block input) on return.
  // F_backward(d_sub_out, d_sub_in) writes d(loss)/d(sub_in) given d(loss)/d(F output).
  template <typename F>
  void block_backward(Block& b, int64_t rows, const Norm& norm, F sublayer_backward) {
    const int64_t dm = d(), n = rows * dm;
    const float p = dropout_rate();
    const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
    if (!pre_norm()) {
      std::fill(d_sum, d_sum + n, T(0));
      cpu::layer_norm_backward(d_stream, b.sum, b.mean, b.rstd, param(norm.gamma), rows, dm, d_sum,
                               grad(norm.gamma), grad(norm.beta), threads);
      std::copy(d_sum, d_sum + n, d_sub);
      if (p > 0) apply_dropout(d_sub, b.mask, static_cast<size_t>(n), keep_scale, threads);
      sublayer_backward(d_sub, d_sub_in);
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t i = 0; i < n; ++i) d_stream[i] = d_sum[i] + d_sub_in[i];
    } else {
      std::copy(d_stream, d_stream + n, d_sub);
      if (p > 0) apply_dropout(d_sub, b.mask, static_cast<size_t>(n), keep_scale, threads);
      sublayer_backward(d_sub, d_sub_in);
      cpu::layer_norm_backward(d_sub_in, b.x, b.mean, b.rstd, param(norm.gamma), rows, dm,
                               d_stream, grad(norm.gamma), grad(norm.beta), threads);
    }
  }

  void attention_backward_pass(Attention& a, const T* q, HeadStrides qs, const T* k,
                               HeadStrides ks, const T* v, HeadStrides vs, T* dq, T* dk, T* dv,
                               HeadStrides dqs, HeadStrides dks, HeadStrides dvs, int64_t tq,
                               int64_t tk) {
    const float p = training ? options.attention_dropout : 0.0f;
    cpu::attention_backward(d_context, strides(tq, d()), q, qs, k, ks, v, vs, a.probabilities,
                            p > 0 ? a.mask : nullptr, static_cast<T>(1.0 / (1.0 - p)), dq, dqs,
                            dk, dks, dv, dvs, attention_shape(tq, tk), attention_scratch,
                            threads);
  }

  void self_attention_backward(const Linear& qkv, const Linear& output, const T* qkv_buffer,
                               Attention& a, const T* x, const T* d_out, T* d_x, int64_t len) {
    const int64_t dm = d(), rows = B * len;
    linear_backward(d_out, a.context, param(output.weight), rows, dm, dm, d_context, false,
                    grad(output.weight), grad(output.bias), threads);
    const HeadStrides s = strides(len, 3 * dm);
    attention_backward_pass(a, qkv_buffer, s, qkv_buffer + dm, s, qkv_buffer + 2 * dm, s, d_qkv,
                            d_qkv + dm, d_qkv + 2 * dm, s, s, s, len, len);
    linear_backward(d_qkv, x, param(qkv.weight), rows, dm, 3 * dm, d_x, false, grad(qkv.weight),
                    grad(qkv.bias), threads);
  }

  void ffn_backward(const Linear& inner, const Linear& outer, T* hidden, const T* x,
                    const T* d_out, T* d_x, int64_t rows) {
    linear_backward(d_out, hidden, param(outer.weight), rows, outer.in, outer.out, d_hidden,
                    false, grad(outer.weight), grad(outer.bias), threads);
    cpu::bias_relu_backward(d_hidden, hidden, rows, inner.out, grad(inner.bias), threads);
    linear_backward(d_hidden, x, param(inner.weight), rows, inner.in, inner.out, d_x, false,
                    grad(inner.weight), static_cast<T*>(nullptr), threads);
  }

  void backward() {
    const int64_t dm = d(), nt = B * Tt, ns = B * S;
    const T scale = static_cast<T>(std::sqrt(static_cast<double>(dm)));
    const float p = dropout_rate();
    const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
    // Output projection: logits hold d(loss)/d(logits).
    T* d_output = pre_norm() ? d_sum : d_stream;
    linear_backward(logits, decoder_output, param(output_weight), nt, dm,
                    static_cast<int64_t>(config.target_vocab_size), d_output, false,
                    grad(output_weight), has_output_bias ? grad(output_bias) : nullptr, threads);
    if (pre_norm()) {
      std::fill(d_stream, d_stream + nt * dm, T(0));
      const T* x = decoder.empty() ? decoder_input : decoder.back().ffn.y;
      cpu::layer_norm_backward(d_output, x, decoder_final_mean, decoder_final_rstd,
                               param(decoder_final_norm.gamma), nt, dm, d_stream,
                               grad(decoder_final_norm.gamma), grad(decoder_final_norm.beta),
                               threads);
    }
    std::fill(d_encoder_output, d_encoder_output + ns * dm, T(0));
    for (size_t l = decoder.size(); l-- > 0;) {
      DecoderLayer& w = decoder_layers[l];
      DecoderActivations& a = decoder[l];
      block_backward(a.ffn, nt, w.ffn_norm, [&](const T* d_out, T* d_x) {
        ffn_backward(w.ffn_inner, w.ffn_outer, a.hidden, pre_norm() ? a.ffn.sub_in : a.ffn.x,
                     d_out, d_x, nt);
      });
      block_backward(a.cross, nt, w.cross_norm, [&](const T* d_out, T* d_x) {
        linear_backward(d_out, a.cross_attention.context, param(w.cross_output.weight), nt, dm, dm,
                        d_context, false, grad(w.cross_output.weight), grad(w.cross_output.bias),
                        threads);
        T* d_query = d_qkv;  // [B*T, d]
        const HeadStrides kv = strides(S, 2 * dm);
        attention_backward_pass(a.cross_attention, a.query, strides(Tt, dm), a.key_value, kv,
                                a.key_value + dm, kv, d_query, d_key_value, d_key_value + dm,
                                strides(Tt, dm), kv, kv, Tt, S);
        linear_backward(d_key_value, encoder_output, param(w.cross_key_value.weight), ns, dm,
                        2 * dm, d_encoder_output, true, grad(w.cross_key_value.weight),
                        grad(w.cross_key_value.bias), threads);
        linear_backward(d_query, pre_norm() ? a.cross.sub_in : a.cross.x,
                        param(w.cross_query.weight), nt, dm, dm, d_x, false,
                        grad(w.cross_query.weight), grad(w.cross_query.bias), threads);
      });
      block_backward(a.self, nt, w.self_norm, [&](const T* d_out, T* d_x) {
        self_attention_backward(w.qkv, w.self_output, a.qkv, a.self_attention,
                                pre_norm() ? a.self.sub_in : a.self.x, d_out, d_x, Tt);
      });
    }
    if (p > 0) apply_dropout(d_stream, decoder_input_mask, static_cast<size_t>(nt * dm), keep_scale, threads);
    cpu::embedding_backward(d_stream, target_ids.data(), nt, dm, scale, grad(target_embedding),
                            threads);

    // Encoder: its output's gradient came from every decoder layer's cross-attention.
    if (pre_norm()) {
      std::fill(d_stream, d_stream + ns * dm, T(0));
      const T* x = encoder.empty() ? encoder_input : encoder.back().ffn.y;
      cpu::layer_norm_backward(d_encoder_output, x, encoder_final_mean, encoder_final_rstd,
                               param(encoder_final_norm.gamma), ns, dm, d_stream,
                               grad(encoder_final_norm.gamma), grad(encoder_final_norm.beta),
                               threads);
    } else {
      std::copy(d_encoder_output, d_encoder_output + ns * dm, d_stream);
    }
    for (size_t l = encoder.size(); l-- > 0;) {
      EncoderLayer& w = encoder_layers[l];
      EncoderActivations& a = encoder[l];
      block_backward(a.ffn, ns, w.ffn_norm, [&](const T* d_out, T* d_x) {
        ffn_backward(w.ffn_inner, w.ffn_outer, a.hidden, pre_norm() ? a.ffn.sub_in : a.ffn.x,
                     d_out, d_x, ns);
      });
      block_backward(a.self, ns, w.self_norm, [&](const T* d_out, T* d_x) {
        self_attention_backward(w.qkv, w.self_output, a.qkv, a.attention,
                                pre_norm() ? a.self.sub_in : a.self.x, d_out, d_x, S);
      });
    }
    if (p > 0) apply_dropout(d_stream, encoder_input_mask, static_cast<size_t>(ns * dm), keep_scale, threads);
    cpu::embedding_backward(d_stream, source_ids.data(), ns, dm, scale, grad(source_embedding),
                            threads);
  }
};

template <typename T>
BasicTransformerModel<T>::BasicTransformerModel(const ModelConfig& config,
                                                const TrainingOptions& options, int threads)
    : impl_(std::make_unique<Impl>()) {
  validate_config(config);
  if (threads < 1) throw Error("transformer: threads must be >= 1");
  impl_->config = config;
  impl_->threads = threads;
  set_options(options);
  impl_->build_layout();
}

template <typename T>
BasicTransformerModel<T>::~BasicTransformerModel() = default;

template <typename T>
const ModelConfig& BasicTransformerModel<T>::config() const { return impl_->config; }
template <typename T>
const TrainingOptions& BasicTransformerModel<T>::options() const { return impl_->options; }
template <typename T>
void BasicTransformerModel<T>::set_options(const TrainingOptions& options) {
  auto check = [](float value, const char* name) {
    if (!(value >= 0.0f && value < 1.0f))
      throw Error(std::string("training options: ") + name + " must be in [0, 1), got " +
                  std::to_string(value));
  };
  check(options.dropout, "dropout");
  check(options.attention_dropout, "attention dropout");
  check(options.label_smoothing, "label smoothing");
  impl_->options = options;  // every forward pass plans its arenas anew from these
}
template <typename T>
int BasicTransformerModel<T>::threads() const { return impl_->threads; }
template <typename T>
const std::vector<ParameterSlot>& BasicTransformerModel<T>::slots() const { return impl_->slots; }
template <typename T>
const ParameterSlot& BasicTransformerModel<T>::slot(const std::string& name) const {
  return impl_->slots[impl_->find(name)];
}
template <typename T>
size_t BasicTransformerModel<T>::parameter_count() const { return impl_->parameters.size(); }
template <typename T>
T* BasicTransformerModel<T>::parameters() { return impl_->parameters.data(); }
template <typename T>
const T* BasicTransformerModel<T>::parameters() const { return impl_->parameters.data(); }
template <typename T>
T* BasicTransformerModel<T>::gradients() { return impl_->gradients.data(); }
template <typename T>
const T* BasicTransformerModel<T>::gradients() const { return impl_->gradients.data(); }
template <typename T>
const T* BasicTransformerModel<T>::last_logits() const { return impl_->logits; }

template <typename T>
void BasicTransformerModel<T>::initialize(uint64_t seed) {
  Impl& m = *impl_;
  std::mt19937_64 rng(seed);
  const std::string source = param::source_embedding(m.config),
                    target = param::target_embedding(m.config);
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (const ParameterSlot& slot : m.slots) {
    T* p = m.parameters.data() + slot.offset;
    const std::string& name = slot.spec.name;
    if (name == source || name == target || name == schema::kOutputWeight) {
      std::normal_distribution<double> normal(0.0, 1.0 / std::sqrt(double(m.config.d_model)));
      for (size_t i = 0; i < slot.size; ++i) p[i] = static_cast<T>(normal(rng));
    } else if (slot.spec.shape.size() == 2) {
      const double fan_out = double(slot.spec.shape[0]), fan_in = double(slot.spec.shape[1]);
      const double limit = std::sqrt(6.0 / (fan_in + fan_out));
      std::uniform_real_distribution<double> uniform(-limit, limit);
      for (size_t i = 0; i < slot.size; ++i) p[i] = static_cast<T>(uniform(rng));
    } else {
      std::fill(p, p + slot.size, ends_with(name, schema::kGamma) ? T(1) : T(0));
    }
  }
}

template <typename T>
void BasicTransformerModel<T>::zero_gradients() {
  std::fill(impl_->gradients.begin(), impl_->gradients.end(), T(0));
}

template <typename T>
LossSums BasicTransformerModel<T>::forward_backward(const Batch& batch, uint64_t dropout_seed) {
  Impl& m = *impl_;
  omp_set_num_threads(m.threads);  // oneDNN's sgemm runs on this pool
  m.load_batch(batch);
  m.training = true;
  m.encode(dropout_seed);
  m.decode(dropout_seed);
  const LossSums sums = m.loss(true);
  m.backward();
  return sums;
}

template <typename T>
LossSums BasicTransformerModel<T>::evaluate(const Batch& batch) {
  Impl& m = *impl_;
  omp_set_num_threads(m.threads);
  m.load_batch(batch);
  m.training = false;
  m.encode(0);
  m.decode(0);
  return m.loss(false);
}

template class BasicTransformerModel<float>;
template class BasicTransformerModel<double>;

}  // namespace xf::trainer
