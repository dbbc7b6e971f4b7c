#pragma once
// The runtime's Transformer, written once for every device: weight binding, the arena's layout,
// the encoder, the incremental decoder step, the beam reorder of the self-attention caches and
// the dropping of finished sentences. A device supplies only its `Ops` (cpu_backend.cc,
// cuda_backend.cc): how a weight becomes a matrix product, the kernels, and how host inputs reach
// the device. The layer code never sees a device API.
//
// What an Ops provides (the CPU's and the CUDA's are the two examples):
//   types     Value (activations, K/V caches, biases: float, or half on CUDA), Linear, Norm, Table,
//             Logits (the output projection), HeadStrides, AttentionShape
//   binding   linear(prefix, max_rows, bias_in_product), norm(prefix), table(name),
//             output_projection(max_rows), weights_bound(); the weights themselves from one
//             WeightStore (weight_store.h), converted there, placed where the device reads them
//   memory    padded_rows(rows); reserve(layout) for its own buffers; input(layout, bytes) for a
//             host input that upload(input, values, count) brings to the device;
//             allocate(layout) -> base of the working memory; arena_bytes(); device_usage()
//   kernels   project, logits, embed (with the config's position encoding), layer_norm,
//             add_bias_residual, bias_activation (the config's activation), attention,
//             self_attention_step (the cache write and the cached attention, fused or not),
//             ssru_step (an SSRU decoder layer's cell, xf/kernels/recurrent.h),
//             top_k, copy_blocks, download (tests), and the beam reorder of the caches: either
//             reorder_in_place (kReorderInPlace: one copy of the caches) or gather_rows into
//             a second copy (the SSRU cell states are reordered the same way); an Ops whose
//             logits are on the host (kLogitsOnHost) also the lexical shortlist's
//             shortlist_rows_bytes, gather_output_rows (once a batch), rows_product (a step; each
//             row over its list's column runs, ShortlistColumnLayout),
//             and top_k_columns with its scratch of threads() rows
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "backend_probe.h"
#include "memory_plan.h"
#include "output_shortlist.h"
#include "xf/error.h"
#include "xf/format/parameters.h"
#include "xf/format/schema.h"
#include "xf/model.h"

namespace xf::runtime {

template <typename Ops>
class TransformerBackend final : public Backend, public BackendProbe {
 public:
  using T = typename Ops::Value;
  using HeadStrides = typename Ops::HeadStrides;
  using AttentionShape = typename Ops::AttentionShape;

  // ops_args: what the device's Ops takes after (model, plan).
  template <typename... OpsArgs>
  TransformerBackend(const Model& model, const MemoryPlan& plan, OpsArgs&&... ops_args)
      : config_(model.config()), plan_(plan), ops_(model, plan, std::forward<OpsArgs>(ops_args)...),
        d_(config_.d_model), heads_(config_.num_heads), head_dim_(config_.head_dim()), d_ff_(config_.d_ff),
        vocab_(config_.target_vocab_size), pre_norm_(config_.norm_position == NormPosition::pre),
        ssru_(config_.decoder_layer_kind == DecoderLayerKind::ssru),
        embedding_scale_(config_.scale_embeddings ? std::sqrt(static_cast<float>(d_)) : 1.0f),
        host_lengths_(plan.max_sentences),
        host_positions_(plan.max_rows),
        host_token_ids_(plan.max_sentences * plan.max_source_len),
        host_token_positions_(plan.max_sentences * plan.max_source_len),
        host_token_rows_(plan.max_sentences * plan.max_source_len),
        host_row_tokens_(plan.max_sentences * plan.max_source_len),
        host_live_rows_(plan.max_rows), host_full_rows_(plan.max_rows), host_live_tokens_(plan.max_rows),
        host_live_offsets_(plan.max_rows), host_live_values_(plan.max_rows * (plan.max_beam + 1)),
        host_live_ids_(plan.max_rows * (plan.max_beam + 1)),
        short_sentences_(plan.output_shortlist ? plan.max_sentences : 0),
        short_columns_(plan.output_shortlist ? plan.max_sentences * vocab_ : 0),
        short_list_sizes_(plan.output_shortlist ? plan.max_sentences : 0),
        host_row_lists_(plan.output_shortlist ? plan.max_rows : 0),
        short_layout_(plan.output_shortlist ? plan.max_sentences : 0, plan.output_shortlist ? vocab_ : 0) {
    bind_weights();
    plan_buffers();
  }

  void encode(const int32_t* source_ids, const int32_t* source_lengths, int64_t sentences,
              int64_t source_len) override;
  void decode_step(const int32_t* tokens, int64_t beam, int64_t step, const int32_t* live) override;
  void top_k(const float* row_offsets, int64_t k, float* values, int32_t* ids) override;
  // The top-k buffers hold max_beam + 1 candidates a row where the Ops' top-k allows that many
  // (on CUDA, beams up to cuda::kMaxTopK - 1).
  bool top_k_has_spare() const override { return plan_.max_beam < Ops::kMaxTopK; }
  float* host_logits() override;
  bool logits_on_host() const override { return Ops::kLogitsOnHost; }
  void restrict_output(const int32_t* ids, int64_t count, const uint8_t* sentence_targets) override;
  void reorder_cache(const int32_t* parents, int64_t step) override;
  bool can_drop_sentences() const override { return true; }
  void keep_sentences(const int32_t* kept, int64_t count) override;
  size_t arena_bytes() const override { return ops_.arena_bytes(); }
  std::optional<DeviceUsage> device_usage() const override { return ops_.device_usage(); }

  void copy_encoder_output(float* out) const override {
    ops_.download(memory_, sentences_ * source_len_ * d_, out);
  }
  void copy_logits(float* out) const override {
    if (output_count_ == 0) return ops_.download(logits_, computed_rows_ * vocab_, out);
    spread_short_logits(out);
  }
  std::vector<const TensorView*> released_weights() const override { return ops_.released_weights(); }

 private:
  using Linear = typename Ops::Linear;  // its .bias: const T*
  using Norm = typename Ops::Norm;

  using EncoderLayer = schema::EncoderLayer<Linear, Norm>;
  using DecoderLayer = schema::DecoderLayer<Linear, Norm>;

  void bind_weights();
  void plan_buffers();
  // A group of whole sentences, [sentences, source_len] padded rows at `memory`, and its real
  // tokens one after another: ids and positions [tokens]; where tokens < padded rows, the maps
  // between the layouts (group-local): token -> its row, row -> the token it reads (a padding
  // row: its sentence's first token); null where the group has no padding.
  struct EncoderGroup {
    int64_t sentences = 0, tokens = 0;
    const int32_t* source_lengths = nullptr;
    const int32_t* ids = nullptr;
    const int32_t* positions = nullptr;
    const int32_t* token_rows = nullptr;
    const int32_t* row_tokens = nullptr;
    T* memory = nullptr;
  };
  void encode_group(const EncoderGroup& group, int64_t source_len);

  // out = LayerNorm(x + bias + residual); bias and residual may be null.
  void layer_norm(const T* x, const T* bias, const T* residual, const Norm& n, int64_t rows, T* out) {
    ops_.layer_norm(x, bias, residual, n, config_.layer_norm_epsilon, rows, d_, out);
  }
  // The sub-layer's input: x itself (post-norm) or LayerNorm(x) into `normed` (pre-norm).
  const T* sublayer_input(const T* x, const Norm& n, int64_t rows, T* normed) {
    if (!pre_norm_) return x;
    layer_norm(x, nullptr, nullptr, n, rows, normed);
    return normed;
  }
  // x = LayerNorm(x + sublayer + bias) (post-norm) or x += sublayer + bias (pre-norm); bias
  // null: none (an SSRU cell's output).
  void residual(T* x, const T* sublayer, const T* bias, const Norm& n, int64_t rows) {
    if (pre_norm_)
      ops_.add_bias_residual(x, bias, sublayer, rows, d_);
    else
      layer_norm(sublayer, bias, x, n, rows, x);
  }
  void residual(T* x, const T* sublayer, const Linear& from, const Norm& n, int64_t rows) {
    residual(x, sublayer, from.bias, n, rows);
  }
  // x = FFN(x) with its residual and norm.
  template <typename Layer>
  void feed_forward(const Layer& layer, T* x, int64_t rows, T* normed, T* hidden, T* sublayer) {
    const T* in = sublayer_input(x, layer.ffn_norm, rows, normed);
    ops_.project(layer.ffn_inner, in, hidden, rows);
    ops_.bias_activation(hidden, layer.ffn_inner.bias, rows, d_ff_);
    ops_.project(layer.ffn_outer, hidden, sublayer, rows);
    residual(x, sublayer, layer.ffn_outer, layer.ffn_norm, rows);
  }
  // The shortlisted logits [computed rows, output_count_] as whole rows [.., vocab] at out, each
  // row's own ids (short_list) set, the others at -inf (host backends).
  void spread_short_logits(float* out) const {
    std::fill(out, out + computed_rows_ * vocab_, -std::numeric_limits<float>::infinity());
    for (int64_t r = 0; r < computed_rows_; ++r) {
      const int32_t list = short_list(r);
      const int32_t* columns = short_columns_.data() + list * vocab_;
      for (int32_t j = 0; j < short_list_sizes_[list]; ++j)
        out[r * vocab_ + output_ids_[columns[j]]] = short_logits_[r * output_count_ + columns[j]];
    }
  }
  // Computed row i's list of shortlisted columns (short_columns_): its sentence's.
  int32_t short_list(int64_t i) const {
    const int64_t row = compacted_ ? host_live_rows_[i] : i;
    return short_sentences_[row / beam_];
  }
  const int32_t* upload_lengths() {
    return ops_.upload(lengths_input_, host_lengths_.data(), sentences_);
  }

  ModelConfig config_;
  const MemoryPlan& plan_;
  Ops ops_;
  int64_t d_, heads_, head_dim_, d_ff_, vocab_;
  bool pre_norm_;
  bool ssru_;  // the decoder layers are SSRU ones: cell states in place of self-attention caches
  float embedding_scale_;  // sqrt(d_model), or 1 for a model that does not scale its embeddings

  std::vector<EncoderLayer> encoder_;
  std::vector<DecoderLayer> decoder_;
  Norm encoder_final_norm_{}, decoder_final_norm_{};
  typename Ops::Table source_table_{}, target_table_{};
  typename Ops::Logits output_projection_{};

  // Persistent across a batch.
  T* memory_ = nullptr;    // encoder output [sentences * source_len (padded), d]
  T* cross_kv_ = nullptr;  // per decoder layer [sentences * source_len (padded), 2d]: K | V
  int64_t cross_kv_layer_stride_ = 0;
  // Self-attention K and V caches, [layers, max_rows, max_target_len, d]: a row's positions are
  // contiguous, so a new position is one copy per row and the beam reorder one copy per row and
  // layer. Ops::kReorderInPlace: one copy of each, reordered in place (self_k_[1] is
  // self_k_[0]); otherwise current and next, the beam gather writing the other one.
  T* self_k_[2] = {nullptr, nullptr};
  T* self_v_[2] = {nullptr, nullptr};
  int current_cache_ = 0;
  int64_t cache_layer_stride_ = 0, cache_row_stride_ = 0;
  // SSRU decoder layers: each layer's cell state [layers, max_rows, d], a row's at row * d; one
  // copy reordered in place or two, as the caches (current_cache_ picks; none in a model of
  // self-attention layers, which has no SSRU states).
  T* ssru_state_[2] = {nullptr, nullptr};
  int64_t ssru_layer_stride_ = 0;
  // Encoder working buffers (live during encode only), rows = encoder group (padded). A group
  // with padding runs its position-wise work on its real tokens alone, in enc_x_ and
  // enc_token_qkv_, and only the attention on the padded rows.
  T *enc_qkv_ = nullptr, *enc_context_ = nullptr, *enc_sublayer_ = nullptr, *enc_hidden_ = nullptr,
    *enc_normed_ = nullptr, *enc_x_ = nullptr, *enc_token_qkv_ = nullptr;
  // Decoder step buffers (live from a step to the next encode), rows = decoder rows (padded).
  T *dec_x_ = nullptr, *dec_normed_ = nullptr, *dec_qkv_ = nullptr, *dec_query_ = nullptr,
    *dec_context_ = nullptr, *dec_sublayer_ = nullptr, *dec_hidden_ = nullptr;
  float* logits_ = nullptr;  // [rows (padded), vocab], f32 on every device
  // A lexical shortlist (restrict_output, host backends): the batch's target ids (0 of them: the
  // whole vocabulary); their output weight rows, gathered once a batch in the layout the Ops'
  // product over them reads (at most shortlist_rows_bytes(vocab)), and their bias ([vocab] at
  // most); the step's logits over them [rows, output_count_]; whether host_logits() has spread
  // them over logits_ this step (top_k() then reads logits_, as the search adjusted it).
  // Each sentence's own ids among them (restrict_output's sentence_targets: [batch's sentences,
  // vocab]; null: all of them), listed once a batch as columns of the step's shortlisted logits
  // (short_columns_ [sentences, vocab], short_list_sizes_ of each; without sentence_targets list 0
  // holds every column and each sentence reads it), found through short_sentences_ (a sentence's
  // list, kept through keep_sentences()); the top-k's gather scratch [threads, vocab].
  const int32_t* output_ids_ = nullptr;
  int64_t output_count_ = 0;
  bool spread_ = false;
  void* short_rows_ = nullptr;
  float *short_bias_ = nullptr, *short_logits_ = nullptr, *short_scratch_ = nullptr;

  // Host inputs and their way to the device.
  typename Ops::Input lengths_input_{}, positions_input_{}, tokens_input_{},
      parents_input_{}, live_rows_input_{}, full_rows_input_{}, token_ids_input_{},
      token_positions_input_{}, token_rows_input_{}, row_tokens_input_{};
  std::vector<int32_t> host_lengths_;    // [max_sentences] the batch's source lengths
  std::vector<int32_t> host_positions_;  // [max_rows] the step's position, each row
  // The batch's real source tokens, group after group (EncoderGroup), and its padded rows' tokens:
  // [max_sentences * max_source_len] each.
  std::vector<int32_t> host_token_ids_, host_token_positions_, host_token_rows_, host_row_tokens_;
  const int32_t* source_lengths_ = nullptr;  // the batch's lengths on the device

  // The batch last encoded (sentences_ shrinks as keep_sentences() drops finished ones).
  int64_t sentences_ = 0, source_len_ = 0, rows_ = 0, beam_ = 1;

  // The last step's computed rows (decode_step's `live`): computed_rows_ of the rows_, in order;
  // the position-wise work (products, norms, logits) runs on these alone, the attention on
  // every row (a row's cache is at its own place), gathered there and back.
  int64_t computed_rows_ = 0;
  bool compacted_ = false;                 // computed_rows_ < rows_
  std::vector<int32_t> host_live_rows_;    // [max_rows] computed row i is row host_live_rows_[i]
  std::vector<int32_t> host_full_rows_;    // [max_rows] row r reads computed row host_full_rows_[r]
  std::vector<int32_t> host_live_tokens_;  // [max_rows] the computed rows' tokens
  std::vector<float> host_live_offsets_;   // [max_rows] their top_k row offsets
  std::vector<float> host_live_values_;    // [max_rows * (max_beam + 1)] their top_k results
  std::vector<int32_t> host_live_ids_;
  std::vector<int32_t> short_sentences_;
  std::vector<int32_t> short_columns_, short_list_sizes_;
  std::vector<int32_t> host_row_lists_;  // [max_rows] the computed rows' lists, for the product and top_k
  // The batch's shortlisted columns as laid out for the product (output_ids_ points into it) and
  // each sentence's runs of columns, where each sentence has its own list (short_by_runs_).
  ShortlistColumnLayout short_layout_;
  bool short_by_runs_ = false;
};

template <typename Ops>
void TransformerBackend<Ops>::bind_weights() {
  const int64_t encoder_rows = plan_.encoder_group_rows;
  const int64_t cross_rows = plan_.max_sentences * plan_.max_source_len;
  const int64_t decoder_rows = plan_.max_rows;
  // The output projection first: the largest matrix, whose stored bytes and a copy made of them
  // (oneDNN's packed f32 copy, released after) are then resident together while little else is,
  // not on top of every other layer's copy (the peak resident memory of loading). Before the
  // tables too: when tied and widened at load, the target table then shares the widened copy.
  output_projection_ = ops_.output_projection(decoder_rows);
  // bias_in_product: the projection adds its bias; otherwise the kernel that follows does.
  for (uint32_t i = 0; i < config_.encoder_layers; ++i) {
    const std::string p = param::encoder_layer(i);
    EncoderLayer layer;
    layer.qkv = ops_.linear(p + schema::kSelfAttentionQkv.name, encoder_rows, true);
    layer.self_output = ops_.linear(p + schema::kSelfAttentionOutput.name, encoder_rows, false);
    layer.self_norm = ops_.norm(p + schema::kSelfAttentionNorm.name);
    layer.ffn_inner = ops_.linear(p + schema::kFfnInner.name, encoder_rows, false);
    layer.ffn_outer = ops_.linear(p + schema::kFfnOuter.name, encoder_rows, false);
    layer.ffn_norm = ops_.norm(p + schema::kFfnNorm.name);
    encoder_.push_back(std::move(layer));
  }
  for (uint32_t i = 0; i < config_.decoder_layers; ++i) {
    const std::string p = param::decoder_layer(i);
    DecoderLayer layer;
    if (ssru_) {
      layer.ssru_input_forget = ops_.linear(p + schema::kSsruInputForget.name, decoder_rows, true);
      layer.ssru_norm = ops_.norm(p + schema::kSsruNorm.name);
    } else {
      layer.qkv = ops_.linear(p + schema::kSelfAttentionQkv.name, decoder_rows, true);
      layer.self_output = ops_.linear(p + schema::kSelfAttentionOutput.name, decoder_rows, false);
      layer.self_norm = ops_.norm(p + schema::kSelfAttentionNorm.name);
    }
    layer.cross_query = ops_.linear(p + schema::kCrossAttentionQuery.name, decoder_rows, true);
    layer.cross_key_value = ops_.linear(p + schema::kCrossAttentionKeyValue.name, cross_rows, true);
    layer.cross_output = ops_.linear(p + schema::kCrossAttentionOutput.name, decoder_rows, false);
    layer.cross_norm = ops_.norm(p + schema::kCrossAttentionNorm.name);
    layer.ffn_inner = ops_.linear(p + schema::kFfnInner.name, decoder_rows, false);
    layer.ffn_outer = ops_.linear(p + schema::kFfnOuter.name, decoder_rows, false);
    layer.ffn_norm = ops_.norm(p + schema::kFfnNorm.name);
    decoder_.push_back(std::move(layer));
  }
  if (pre_norm_) {
    encoder_final_norm_ = ops_.norm(schema::kEncoderFinalNorm.name);
    decoder_final_norm_ = ops_.norm(schema::kDecoderFinalNorm.name);
  }
  source_table_ = ops_.table(param::source_embedding(config_));
  target_table_ = ops_.table(param::target_embedding(config_));
  ops_.weights_bound();
}

template <typename Ops>
void TransformerBackend<Ops>::plan_buffers() {
  const int64_t cross_rows = ops_.padded_rows(plan_.max_sentences * plan_.max_source_len);
  const int64_t enc_rows = ops_.padded_rows(plan_.encoder_group_rows);
  const int64_t dec_rows = ops_.padded_rows(plan_.max_rows);
  const int64_t layers = std::max<int64_t>(config_.decoder_layers, 1);
  const int64_t attention_layers = ssru_ ? 0 : layers, ssru_layers = ssru_ ? layers : 0;

  ArenaLayout layout(Ops::kAlignment);
  // Persistent buffers.
  const size_t memory = layout.reserve_array<T>(cross_rows * d_);
  cross_kv_layer_stride_ = cross_rows * 2 * d_;
  const size_t cross_kv = layout.reserve_array<T>(layers * cross_kv_layer_stride_);
  cache_row_stride_ = plan_.max_target_len * d_;
  cache_layer_stride_ = plan_.max_rows * cache_row_stride_;
  // K and V, and a second copy of each for the beam gather unless the device reorders in place.
  // In place: K then V in one block, [2, layers, ...], reordered together.
  size_t caches[4];
  if (Ops::kReorderInPlace) {
    caches[0] = caches[2] = layout.reserve_array<T>(2 * attention_layers * cache_layer_stride_);
    caches[1] = caches[3] = caches[0] + sizeof(T) * attention_layers * cache_layer_stride_;
  } else {
    for (size_t& c : caches) c = layout.reserve_array<T>(attention_layers * cache_layer_stride_);
  }
  ssru_layer_stride_ = plan_.max_rows * d_;
  size_t ssru_states[2];
  ssru_states[0] = ssru_states[1] = layout.reserve_array<T>(ssru_layers * ssru_layer_stride_);
  if (!Ops::kReorderInPlace) ssru_states[1] = layout.reserve_array<T>(ssru_layers * ssru_layer_stride_);
  ops_.reserve(layout);
  lengths_input_ = ops_.input(layout, sizeof(int32_t) * plan_.max_sentences);
  positions_input_ = ops_.input(layout, sizeof(int32_t) * host_positions_.size());
  tokens_input_ = ops_.input(layout, sizeof(int32_t) * plan_.max_rows);
  parents_input_ = ops_.input(layout, sizeof(int32_t) * plan_.max_rows);
  live_rows_input_ = ops_.input(layout, sizeof(int32_t) * plan_.max_rows);
  full_rows_input_ = ops_.input(layout, sizeof(int32_t) * plan_.max_rows);
  for (auto* input : {&token_ids_input_, &token_positions_input_, &token_rows_input_, &row_tokens_input_})
    *input = ops_.input(layout, sizeof(int32_t) * host_token_ids_.size());

  // Encoder and decoder-step buffers share memory: a batch's encoder is done before its first step.
  const size_t phase_start = layout.mark();
  const size_t enc_qkv = layout.reserve_array<T>(enc_rows * 3 * d_);
  const size_t enc_context = layout.reserve_array<T>(enc_rows * d_);
  const size_t enc_sublayer = layout.reserve_array<T>(enc_rows * d_);
  const size_t enc_hidden = layout.reserve_array<T>(enc_rows * d_ff_);
  const size_t enc_normed = layout.reserve_array<T>(pre_norm_ ? enc_rows * d_ : 0);
  // Only a batch of several sentences has padding.
  const int64_t token_rows = plan_.max_sentences > 1 ? enc_rows : 0;
  const size_t enc_x = layout.reserve_array<T>(token_rows * d_);
  const size_t enc_token_qkv = layout.reserve_array<T>(token_rows * 3 * d_);
  layout.rewind(phase_start);
  const size_t dec_x = layout.reserve_array<T>(dec_rows * d_);
  const size_t dec_normed = layout.reserve_array<T>(pre_norm_ ? dec_rows * d_ : 0);
  const size_t dec_qkv = layout.reserve_array<T>(dec_rows * 3 * d_);
  const size_t dec_query = layout.reserve_array<T>(dec_rows * d_);
  const size_t dec_context = layout.reserve_array<T>(dec_rows * d_);
  const size_t dec_sublayer = layout.reserve_array<T>(dec_rows * d_);
  const size_t dec_hidden = layout.reserve_array<T>(dec_rows * d_ff_);
  const size_t logits = layout.reserve_array<float>(dec_rows * vocab_);
  // The shortlist's buffers after the step's: its weights live from restrict_output() (after
  // encode, so they may share the encoder's memory) to the next encode.
  const bool shortlist = plan_.output_shortlist && Ops::kLogitsOnHost;
  size_t short_rows_bytes = 0;
  if constexpr (Ops::kLogitsOnHost) short_rows_bytes = shortlist ? ops_.shortlist_rows_bytes(output_projection_, vocab_) : 0;
  const size_t short_rows = layout.reserve(short_rows_bytes);
  const size_t short_bias = layout.reserve_array<float>(shortlist ? vocab_ : 0);
  const size_t short_logits = layout.reserve_array<float>(shortlist ? dec_rows * vocab_ : 0);
  size_t short_scratch_floats = 0;
  if constexpr (Ops::kLogitsOnHost) short_scratch_floats = shortlist ? ops_.threads() * vocab_ : 0;
  const size_t short_scratch = layout.reserve_array<float>(short_scratch_floats);

  char* base = static_cast<char*>(ops_.allocate(layout));
  auto at = [base](size_t offset) { return reinterpret_cast<T*>(base + offset); };
  memory_ = at(memory);
  cross_kv_ = at(cross_kv);
  self_k_[0] = at(caches[0]);
  self_v_[0] = at(caches[1]);
  self_k_[1] = at(caches[2]);
  self_v_[1] = at(caches[3]);
  ssru_state_[0] = at(ssru_states[0]);
  ssru_state_[1] = at(ssru_states[1]);
  enc_qkv_ = at(enc_qkv);
  enc_context_ = at(enc_context);
  enc_sublayer_ = at(enc_sublayer);
  enc_hidden_ = at(enc_hidden);
  enc_normed_ = at(enc_normed);
  enc_x_ = at(enc_x);
  enc_token_qkv_ = at(enc_token_qkv);
  dec_x_ = at(dec_x);
  dec_normed_ = at(dec_normed);
  dec_qkv_ = at(dec_qkv);
  dec_query_ = at(dec_query);
  dec_context_ = at(dec_context);
  dec_sublayer_ = at(dec_sublayer);
  dec_hidden_ = at(dec_hidden);
  logits_ = reinterpret_cast<float*>(base + logits);
  if (shortlist) {
    short_rows_ = base + short_rows;
    short_bias_ = reinterpret_cast<float*>(base + short_bias);
    short_logits_ = reinterpret_cast<float*>(base + short_logits);
    short_scratch_ = reinterpret_cast<float*>(base + short_scratch);
  }
}

template <typename Ops>
void TransformerBackend<Ops>::encode(const int32_t* source_ids, const int32_t* source_lengths,
                                     int64_t sentences, int64_t source_len) {
  if (sentences < 1 || sentences > plan_.max_sentences || source_len < 1 || source_len > plan_.max_source_len)
    throw Error("internal: encode() outside the plan");
  for (int64_t s = 0; s < sentences; ++s) {
    if (source_lengths[s] < 1 || source_lengths[s] > source_len)
      throw Error("internal: encode() with a source length outside 1..source_len");
  }
  sentences_ = sentences;
  source_len_ = source_len;
  output_count_ = 0;  // a shortlist is the batch's (restrict_output); its rows may share the encoder's memory
  std::copy(source_lengths, source_lengths + sentences, host_lengths_.begin());
  source_lengths_ = upload_lengths();

  // Groups of whole sentences of at most encoder_group_rows rows. The real tokens of each group
  // one after another: in a batch, the shorter sentences' padding (a fifth of the rows of
  // 32 sentences in input order) is left out of the products, norms and FFN.
  const int64_t group = std::max<int64_t>(1, plan_.encoder_group_rows / source_len);
  int64_t tokens = 0;
  for (int64_t first = 0; first < sentences; first += group) {
    const int64_t group_start = tokens;
    for (int64_t s = first; s < std::min(first + group, sentences); ++s) {
      const int64_t sentence_token = tokens - group_start, sentence_row = (s - first) * source_len;
      for (int64_t t = 0; t < source_len; ++t) {
        const bool real = t < source_lengths[s];
        host_row_tokens_[s * source_len + t] = static_cast<int32_t>(sentence_token + (real ? t : 0));
        if (!real) continue;
        host_token_ids_[tokens] = source_ids[s * source_len + t];
        host_token_positions_[tokens] = static_cast<int32_t>(t);
        host_token_rows_[tokens] = static_cast<int32_t>(sentence_row + t);
        ++tokens;
      }
    }
  }
  const int32_t* ids = ops_.upload(token_ids_input_, host_token_ids_.data(), tokens);
  const int32_t* positions = ops_.upload(token_positions_input_, host_token_positions_.data(), tokens);
  const int32_t* token_rows = ops_.upload(token_rows_input_, host_token_rows_.data(), tokens);
  const int32_t* row_tokens = ops_.upload(row_tokens_input_, host_row_tokens_.data(), sentences * source_len);
  int64_t group_start = 0;
  for (int64_t first = 0; first < sentences; first += group) {
    EncoderGroup g;
    g.sentences = std::min(group, sentences - first);
    for (int64_t s = first; s < first + g.sentences; ++s) g.tokens += source_lengths[s];
    g.source_lengths = source_lengths_ + first;
    g.ids = ids + group_start;
    g.positions = positions + group_start;
    if (g.tokens < g.sentences * source_len && plan_.max_sentences > 1) {  // see plan_buffers
      g.token_rows = token_rows + group_start;
      g.row_tokens = row_tokens + first * source_len;
    }
    g.memory = memory_ + first * source_len * d_;
    encode_group(g, source_len);
    group_start += g.tokens;
  }
  // Every decoder layer's cross-attention K | V, once per batch (bias included).
  const int64_t rows = sentences * source_len;
  for (size_t l = 0; l < decoder_.size(); ++l)
    ops_.project(decoder_[l].cross_key_value, memory_, cross_kv_ + l * cross_kv_layer_stride_, rows);
}

template <typename Ops>
void TransformerBackend<Ops>::encode_group(const EncoderGroup& group, int64_t source_len) {
  const int64_t rows = group.sentences * source_len;  // padded
  const bool packed = group.token_rows != nullptr;
  // x: the tokens' [tokens, d], in the memory itself unless packed.
  const int64_t tokens = group.tokens;
  if (!packed && tokens != rows) throw Error("internal: padding in a plan of one sentence");
  T* x = packed ? enc_x_ : group.memory;
  ops_.embed(source_table_, group.ids, group.positions, tokens, embedding_scale_, x);
  // The fused QKV output [sentences, source_len, 3d] seen as [sentences, heads, source_len, head_dim].
  const HeadStrides qkv_strides{source_len * 3 * d_, head_dim_, 3 * d_};
  const HeadStrides context_strides{source_len * d_, head_dim_, d_};
  const AttentionShape shape{group.sentences, heads_, source_len, source_len, head_dim_};
  for (const EncoderLayer& layer : encoder_) {
    const T* in = sublayer_input(x, layer.self_norm, tokens, enc_normed_);
    T* context = enc_context_;
    if (packed) {  // QKV of the tokens, spread to the padded rows; the context back to the tokens
      ops_.project(layer.qkv, in, enc_token_qkv_, tokens);
      ops_.gather_rows(enc_token_qkv_, 3 * d_, group.row_tokens, rows, 3 * d_, enc_qkv_, 3 * d_);
    } else {
      ops_.project(layer.qkv, in, enc_qkv_, rows);
    }
    ops_.attention(enc_qkv_, qkv_strides, enc_qkv_ + d_, qkv_strides, enc_qkv_ + 2 * d_, qkv_strides,
                   enc_context_, context_strides, shape, group.source_lengths);
    if (packed) {
      context = enc_token_qkv_;  // free again: [tokens, d] of it
      ops_.gather_rows(enc_context_, d_, group.token_rows, tokens, d_, context, d_);
    }
    ops_.project(layer.self_output, context, enc_sublayer_, tokens);
    residual(x, enc_sublayer_, layer.self_output, layer.self_norm, tokens);
    feed_forward(layer, x, tokens, enc_normed_, enc_hidden_, enc_sublayer_);
  }
  if (pre_norm_) layer_norm(x, nullptr, nullptr, encoder_final_norm_, tokens, x);
  // The memory in the padded layout the cross-attention reads (a padding row: a copy of a token).
  if (packed) ops_.gather_rows(x, d_, group.row_tokens, rows, d_, group.memory, d_);
}

template <typename Ops>
void TransformerBackend<Ops>::decode_step(const int32_t* tokens, int64_t beam, int64_t step,
                                          const int32_t* live) {
  if (beam < 1 || beam > plan_.max_beam || step < 0 || step >= plan_.max_target_len || sentences_ < 1)
    throw Error("internal: decode_step() outside the plan");
  beam_ = beam;
  rows_ = sentences_ * beam;
  computed_rows_ = 0;
  for (int64_t s = 0; live != nullptr && s < sentences_; ++s) {
    if (live[s] < 0 || live[s] > beam) throw Error("internal: decode_step() with live rows outside the beam");
    for (int64_t j = 0; j < live[s]; ++j) host_live_rows_[computed_rows_++] = static_cast<int32_t>(s * beam + j);
  }
  if (live != nullptr && computed_rows_ == 0) throw Error("internal: decode_step() with no live row");
  compacted_ = live != nullptr && computed_rows_ < rows_;
  if (!compacted_) computed_rows_ = rows_;
  const int64_t rows = computed_rows_;
  const int32_t* live_rows = nullptr;  // on the device: computed row -> row
  const int32_t* full_rows = nullptr;  // row -> the computed row it reads (a dead row: the first)
  if (compacted_) {
    std::fill(host_full_rows_.begin(), host_full_rows_.begin() + rows_, 0);
    for (int64_t i = 0; i < rows; ++i) {
      host_full_rows_[host_live_rows_[i]] = static_cast<int32_t>(i);
      host_live_tokens_[i] = tokens[host_live_rows_[i]];
    }
    live_rows = ops_.upload(live_rows_input_, host_live_rows_.data(), rows);
    full_rows = ops_.upload(full_rows_input_, host_full_rows_.data(), rows_);
    tokens = host_live_tokens_.data();
  }
  const int32_t* device_tokens = ops_.upload(tokens_input_, tokens, rows);
  std::fill(host_positions_.begin(), host_positions_.begin() + rows, static_cast<int32_t>(step));
  const int32_t* positions = ops_.upload(positions_input_, host_positions_.data(), rows);
  T* x = dec_x_;
  // A model that starts from a zero embedding (Marian) sees only the position at step 0: the
  // start tokens' rows are scaled by 0.
  const bool zero_start = step == 0 && config_.zero_start_embedding;
  ops_.embed(target_table_, device_tokens, positions, rows, zero_start ? 0.0f : embedding_scale_, x);

  // Self-attention over the cache [rows, max_target_len, d] seen as [rows, heads, positions, head_dim].
  const HeadStrides cache_strides{cache_row_stride_, head_dim_, d_};
  // Cross-attention: a sentence's beam hypotheses are its queries, [sentences, heads, beam, head_dim],
  // over the sentence's keys [sentences, source_len, 2d]; no copy of K/V per hypothesis.
  const HeadStrides beam_query_strides{beam * d_, head_dim_, d_};
  const HeadStrides cross_strides{source_len_ * 2 * d_, head_dim_, 2 * d_};
  const AttentionShape cross_shape{sentences_, heads_, beam, source_len_, head_dim_};
  // [computed rows, d] at `from` -> every row's [rows_, d] at `to`, and back.
  auto to_every_row = [&](const T* from, T* to) { ops_.gather_rows(from, d_, full_rows, rows_, d_, to, d_); };
  auto to_computed_rows = [&](const T* from, T* to) { ops_.gather_rows(from, d_, live_rows, rows, d_, to, d_); };

  for (size_t l = 0; l < decoder_.size(); ++l) {
    const DecoderLayer& layer = decoder_[l];
    if (ssru_) {
      // Marian's SSRU: [candidate | forget] = u W^T + b, the cell c = s c + (1 - s) x, the
      // sub-layer's output relu(c), then the residual and norm (Marian's "dan" postprocess).
      // A computed row's state is at its row (live_rows), so a compacted step needs no gather.
      const T* in = sublayer_input(x, layer.ssru_norm, rows, dec_normed_);
      ops_.project(layer.ssru_input_forget, in, dec_qkv_, rows);
      ops_.ssru_step(dec_qkv_, ssru_state_[current_cache_] + l * ssru_layer_stride_, live_rows, step == 0, rows,
                     dec_sublayer_);
      residual(x, dec_sublayer_, static_cast<const T*>(nullptr), layer.ssru_norm, rows);
    } else {
      T* k_cache = self_k_[current_cache_] + l * cache_layer_stride_;
      T* v_cache = self_v_[current_cache_] + l * cache_layer_stride_;
      const T* in = sublayer_input(x, layer.self_norm, rows, dec_normed_);
      if (compacted_) {  // the QKV product too on every row: it is fused with the cache write
        to_every_row(in, dec_sublayer_);
        ops_.self_attention_step(layer.qkv, dec_sublayer_, rows_, step, k_cache, v_cache, cache_strides, dec_qkv_,
                                 dec_query_, dec_context_);
        to_computed_rows(dec_context_, dec_query_);
        ops_.project(layer.self_output, dec_query_, dec_sublayer_, rows);
      } else {
        ops_.self_attention_step(layer.qkv, in, rows, step, k_cache, v_cache, cache_strides, dec_qkv_, dec_query_,
                                 dec_context_);
        ops_.project(layer.self_output, dec_context_, dec_sublayer_, rows);
      }
      residual(x, dec_sublayer_, layer.self_output, layer.self_norm, rows);
    }

    const T* in = sublayer_input(x, layer.cross_norm, rows, dec_normed_);
    ops_.project(layer.cross_query, in, dec_query_, rows);
    const T* cross_kv = cross_kv_ + l * cross_kv_layer_stride_;
    if (compacted_) {
      to_every_row(dec_query_, dec_context_);
      ops_.attention(dec_context_, beam_query_strides, cross_kv, cross_strides, cross_kv + d_, cross_strides,
                     dec_sublayer_, beam_query_strides, cross_shape, source_lengths_);
      to_computed_rows(dec_sublayer_, dec_context_);
    } else {
      ops_.attention(dec_query_, beam_query_strides, cross_kv, cross_strides, cross_kv + d_, cross_strides,
                     dec_context_, beam_query_strides, cross_shape, source_lengths_);
    }
    ops_.project(layer.cross_output, dec_context_, dec_sublayer_, rows);
    residual(x, dec_sublayer_, layer.cross_output, layer.cross_norm, rows);

    feed_forward(layer, x, rows, dec_normed_, dec_hidden_, dec_sublayer_);
  }
  if (pre_norm_) layer_norm(x, nullptr, nullptr, decoder_final_norm_, rows, x);
  spread_ = false;
  if constexpr (Ops::kLogitsOnHost) {
    if (output_count_ > 0) {  // each row over its sentence's runs of columns, or over all
      for (int64_t i = 0; short_by_runs_ && i < rows; ++i) host_row_lists_[i] = short_list(i);
      return ops_.rows_product(output_projection_, x, short_rows_, short_bias_, rows, output_count_, short_logits_,
                               short_by_runs_ ? host_row_lists_.data() : nullptr, short_layout_.run_offsets(),
                               short_layout_.runs());
    }
  }
  ops_.logits(output_projection_, x, logits_, rows);
}

template <typename Ops>
float* TransformerBackend<Ops>::host_logits() {
  if constexpr (!Ops::kLogitsOnHost) {
    return nullptr;
  } else {
    if (output_count_ > 0 && !spread_) {
      spread_short_logits(logits_);
      spread_ = true;
    }
    return logits_;
  }
}

template <typename Ops>
void TransformerBackend<Ops>::restrict_output(const int32_t* ids, int64_t count, const uint8_t* sentence_targets) {
  if (count < 0 || count > vocab_) throw Error("internal: restrict_output() outside the vocabulary");
  if (count > 0 && short_rows_ == nullptr) throw Error("internal: restrict_output() without a planned shortlist");
  output_ids_ = ids;
  output_count_ = count;
  spread_ = false;
  short_by_runs_ = false;
  if (count == 0) return;
  // Host backends lay the columns out so that each sentence's rows compute little beyond its own
  // (ShortlistColumnLayout); the gathered rows and output_ids_ follow that layout.
  if constexpr (Ops::kLogitsOnHost) {
    short_by_runs_ = sentence_targets != nullptr && sentences_ > 1;  // one sentence reads every column
    if (short_by_runs_) {
      short_layout_.arrange(ids, count, sentence_targets, sentences_);
      output_ids_ = short_layout_.ids();
    }
  }
  // Each sentence's own columns in ascending id order, listed once for the batch's steps (or
  // one list of them all).
  const int64_t lists = sentence_targets != nullptr ? sentences_ : 1;
  for (int64_t s = 0; s < lists; ++s) {
    int32_t* columns = short_columns_.data() + s * vocab_;
    int32_t size = 0;
    for (int32_t j = 0; j < count; ++j)
      if (sentence_targets == nullptr || sentence_targets[s * vocab_ + ids[j]])
        columns[size++] = short_by_runs_ ? short_layout_.column_of(j) : j;
    short_list_sizes_[s] = size;
    if (short_by_runs_) short_layout_.add_runs(s, columns, size);
  }
  for (int64_t s = 0; s < sentences_; ++s) short_sentences_[s] = sentence_targets != nullptr ? static_cast<int32_t>(s) : 0;
  if constexpr (Ops::kLogitsOnHost) ops_.gather_output_rows(output_projection_, output_ids_, count, short_rows_, short_bias_);
}

template <typename Ops>
void TransformerBackend<Ops>::top_k(const float* row_offsets, int64_t k, float* values, int32_t* ids) {
  if (k < 1 || k > plan_.max_beam + (top_k_has_spare() ? 1 : 0) || rows_ < 1)
    throw Error("internal: top_k() outside the plan");
  // Over the shortlist's logits unless the search spread them (host_logits) to adjust them: each
  // row over its sentence's own ids (short_list), gathered in ascending order, the same values at
  // the same places as when the sentence is the batch alone, so its softmax and top-k are too;
  // ids mapped back to token ids.
  const bool shortlisted = output_count_ > 0 && !spread_;
  if (!compacted_ && !shortlisted) {
    ops_.top_k(logits_, row_offsets, rows_, vocab_, k, values, ids);
    return;
  }
  const int64_t rows = compacted_ ? computed_rows_ : rows_;
  const float* offsets = row_offsets;
  if (compacted_ && row_offsets != nullptr) {
    for (int64_t i = 0; i < rows; ++i) host_live_offsets_[i] = row_offsets[host_live_rows_[i]];
    offsets = host_live_offsets_.data();
  }
  float* out_values = compacted_ ? host_live_values_.data() : values;
  int32_t* out_ids = compacted_ ? host_live_ids_.data() : ids;
  if (shortlisted) {
    if constexpr (Ops::kLogitsOnHost) {
      for (int64_t i = 0; i < rows; ++i) host_row_lists_[i] = short_list(i);
      ops_.top_k_columns(short_logits_, output_count_, host_row_lists_.data(), short_columns_.data(),
                         short_list_sizes_.data(), vocab_, offsets, rows, k, out_values, out_ids, short_scratch_);
      for (int64_t i = 0; i < rows * k; ++i) out_ids[i] = output_ids_[out_ids[i]];
    }
  } else {
    ops_.top_k(logits_, offsets, rows, vocab_, k, out_values, out_ids);
  }
  if (!compacted_) return;
  for (int64_t i = 0; i < rows; ++i) {
    std::copy_n(host_live_values_.data() + i * k, k, values + host_live_rows_[i] * k);
    std::copy_n(host_live_ids_.data() + i * k, k, ids + host_live_rows_[i] * k);
  }
}

template <typename Ops>
void TransformerBackend<Ops>::reorder_cache(const int32_t* parents, int64_t step) {
  if (step < 0 || step >= plan_.max_target_len || rows_ < 1) throw Error("internal: reorder_cache() outside the plan");
  const int32_t* device_parents = ops_.upload(parents_input_, parents, rows_);
  const int64_t layers = static_cast<int64_t>(decoder_.size());
  if (ssru_) {  // each row's cell state, [layers, max_rows, d]
    if constexpr (Ops::kReorderInPlace) {
      ops_.reorder_in_place(ssru_state_[0], layers, ssru_layer_stride_, d_, device_parents, rows_, beam_, d_);
    } else {
      const int next = 1 - current_cache_;
      for (int64_t l = 0; l < layers; ++l)
        ops_.gather_rows(ssru_state_[current_cache_] + l * ssru_layer_stride_, d_, device_parents, rows_, d_,
                         ssru_state_[next] + l * ssru_layer_stride_, d_);
      current_cache_ = next;
    }
    return;
  }
  const int64_t prefix = (step + 1) * d_;
  if constexpr (Ops::kReorderInPlace) {
    // Rows in groups of beam_ (a sentence's hypotheses), whose parents lie in one group; K and
    // V of every layer at once: one block of 2 x layers slabs.
    ops_.reorder_in_place(self_k_[0], 2 * static_cast<int64_t>(decoder_.size()), cache_layer_stride_,
                          cache_row_stride_, device_parents, rows_, beam_, prefix);
  } else {
    const int next = 1 - current_cache_;
    for (size_t l = 0; l < decoder_.size(); ++l) {
      const int64_t offset = static_cast<int64_t>(l) * cache_layer_stride_;
      ops_.gather_rows(self_k_[current_cache_] + offset, cache_row_stride_, device_parents, rows_, prefix,
                       self_k_[next] + offset, cache_row_stride_);
      ops_.gather_rows(self_v_[current_cache_] + offset, cache_row_stride_, device_parents, rows_, prefix,
                       self_v_[next] + offset, cache_row_stride_);
    }
    current_cache_ = next;
  }
}

template <typename Ops>
void TransformerBackend<Ops>::keep_sentences(const int32_t* kept, int64_t count) {
  if (count < 1 || count > sentences_) throw Error("internal: keep_sentences() outside the batch");
  for (int64_t i = 0; i < count; ++i)
    if (kept[i] < i || kept[i] >= sentences_ || (i > 0 && kept[i] <= kept[i - 1]))
      throw Error("internal: keep_sentences() needs ascending sentences of the batch");
  // kept is ascending, so every sentence moves towards the front: in place, in order, one
  // sentence's cross K | V in every layer at a time.
  const int64_t block = source_len_ * 2 * d_;
  for (int64_t i = 0; i < count; ++i)
    if (kept[i] != i && !decoder_.empty())
      ops_.copy_blocks(cross_kv_ + kept[i] * block, cross_kv_ + i * block, block,
                       static_cast<int64_t>(decoder_.size()), cross_kv_layer_stride_);
  for (int64_t i = 0; i < count; ++i) host_lengths_[i] = host_lengths_[kept[i]];
  if (output_count_ > 0)
    for (int64_t i = 0; i < count; ++i) short_sentences_[i] = short_sentences_[kept[i]];
  sentences_ = count;
  rows_ = sentences_ * beam_;
  source_lengths_ = upload_lengths();
}

}  // namespace xf::runtime
