// What the CPU product plans share between the dispatcher (matmul_cpu.cc, StaticMatmul) and the
// oneDNN side (matmul_onednn_cpu.cc, CpuEngine): the engine's copies of weight matrices, made
// once at plan time and shared by the StaticMatmuls of every row count, and oneDNN's memory
// descriptions of the stored layouts.
#pragma once

#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "xf/kernels/matmul.h"

namespace xf::cpu {

using DataType = dnnl::memory::data_type;

constexpr size_t kWorkspaceAlignment = 64;
inline size_t align_up(size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// A stored weight matrix [N, K] row-major seen as the matmul's B = [K, N] (strides {1, K}).
inline dnnl::memory::desc stored_weights_desc(int64_t n, int64_t k, DataType type) {
  return dnnl::memory::desc({k, n}, type, {1, k});
}

inline dnnl::memory::desc row_major_desc(int64_t rows, int64_t cols, DataType type) {
  return dnnl::memory::desc({rows, cols}, type, {cols, 1});
}

// Where element (kk, j) of a [k, n] matrix lies in memory of a oneDNN blocked layout, in elements
// (oneDNN's own memory_desc_wrapper::off_v: the inner blocks, innermost last, then the outer
// strides). A sum of one part for kk and one for j: blocked_offset(d, kk, 0) +
// blocked_offset(d, 0, j) - offset0.
inline int64_t blocked_offset(const dnnl_memory_desc_t& d, int64_t kk, int64_t j) {
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  int64_t pos[2] = {kk, j};
  int64_t offset = d.offset0, block_stride = 1;
  for (int i = b.inner_nblks - 1; i >= 0; --i) {
    const int dim = static_cast<int>(b.inner_idxs[i]);
    offset += pos[dim] % b.inner_blks[i] * block_stride;
    pos[dim] /= b.inner_blks[i];
    block_stride *= b.inner_blks[i];
  }
  return offset + pos[0] * b.strides[0] + pos[1] * b.strides[1];
}

// A copy of one weight matrix made at plan time, shared by the StaticMatmuls of every row count
// that asks for it: f32 weights in a oneDNN blocked layout, or int8 weights requantized to 7 bits
// (each value halved, its row's scale doubled) where int8 products saturate.
struct PackedWeights {
  const void* source = nullptr;
  int64_t n = 0;
  int64_t k = 0;
  dnnl::memory::desc desc;
  dnnl::memory memory;            // owns the packed bytes
  std::vector<float> row_scales;  // 7-bit int8 copies: [n]
  // f32 blocked copies: each input's part of an element's offset, blocked_offset(desc, kk, 0) -
  // offset0 for kk in [0, k), so that StaticMatmul::copy_weight_row reads a row without dividing.
  std::vector<int64_t> input_offsets;
};

struct CpuEngine::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<dnnl::stream> worker_streams;  // one for each thread of the pool after the first
  bool pack_weights = true;

  // The stream a product's slice runs on from thread `thread` of the worker pool.
  dnnl::stream& stream_for(int thread) { return thread == 0 ? stream : worker_streams[thread - 1]; }
  std::mutex mutex;  // guards packed
  std::vector<std::weak_ptr<PackedWeights>> packed;

  // The shared copy of `weights` in `desc`, made by `fill` when no StaticMatmul holds one yet.
  template <typename Fill>
  std::shared_ptr<PackedWeights> shared_copy(const WeightMatrix& weights,
                                             const dnnl::memory::desc& desc, Fill fill);

  std::shared_ptr<PackedWeights> packed_copy(const WeightMatrix& weights,
                                             const dnnl::memory::desc& desc);

  // The int8 panels int8_panels() made of `weights` while a StaticMatmul still holds them, or null.
  std::shared_ptr<PackedWeights> existing_int8_panels(const WeightMatrix& weights);

  // 128 * the sum of each int8 weight row (s32 [n]): what the few-row kernel subtracts for its
  // u8 x. Made once per weight matrix, shared by the 16 row counts planned for it.
  std::shared_ptr<PackedWeights> row_shift_sums(const WeightMatrix& weights);

  // f32 weights in panels of 16 rows (f32_panel_products_avx2): for each k, the 16 rows' values;
  // the last panel padded with zero rows.
  std::shared_ptr<PackedWeights> f32_panels(const WeightMatrix& weights);

  // The weights in the panel layout (panel_bytes), followed by each padded row's 128 * sum(w)
  // (s32); row_scales padded with zeros. The panel kernels read it: int8_panel_products_avx2
  // and int8_panel_products_512 without VNNI the 7-bit copy (seven_bits), with VNNI the stored
  // values. (One process makes one kind, fixed by cpu_isa(), so the two never meet in `packed`.)
  // halve: to_seven_bits() each value on the way and double the row scales.
  std::shared_ptr<PackedWeights> int8_panels(const WeightMatrix& weights, bool halve);

  // For int8 weights stored in panels (read in place): each padded row's 128 * sum(w) (s32, the
  // memory) and its row scale (row_scales, zeros past n): what int8_panels() puts beside its copy.
  std::shared_ptr<PackedWeights> int8_panel_sums(const WeightMatrix& weights);

  std::shared_ptr<PackedWeights> seven_bit_copy(const WeightMatrix& weights);
};

}  // namespace xf::cpu
