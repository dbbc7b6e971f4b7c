// The CPU side of the matrix-product contract (xf/kernels/matmul.h): StaticMatmul plans a product
// of a fixed shape once and picks what runs it: one of xf's kernels for the CPU's instruction set
// and the row count (matmul_avx2_cpu.cc, matmul_avx512_cpu.cc, matmul_neon_cpu.cc), or oneDNN's
// matmul primitive where none serves (matmul_onednn_cpu.cc holds the engine and its weight
// copies). The choice, by cpu_isa() (xf/kernels_cpu/isa.h):
//   avx512_vnni  int8: few-row kernel up to 16 rows, VNNI panels above; f32: oneDNN
//   avx512       int8: AVX2 few-row kernel (7-bit copy) up to 16 rows, BW panels above; f32: oneDNN
//   avx2_vnni    int8: AVX-VNNI few-row kernel, every row count; f32: xf's panels
//   avx2         int8: AVX2 panels (7-bit), every row count; f32: xf's panels
//   neon(_dotprod) int8: NEON kernel, every row count; f32: oneDNN
//   sse and below: oneDNN
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "matmul_kernels_cpu.h"
#include "matmul_plans_cpu.h"
#include "parallel_cpu.h"
#include "simd_cpu.h"
#include "xf/dtype.h"
#include "xf/error.h"
#include "xf/kernels/convert.h"  // the int8 product quantizes its input and scales its rows
#include "xf/kernels/matmul.h"
#include "xf/kernels_cpu/isa.h"
#include "xf/kernels_cpu/worker_pool.h"

namespace xf::cpu {

namespace {

std::mutex g_implementations_mutex;
std::map<std::string, int64_t>& implementations_made() {
  static std::map<std::string, int64_t> made;
  return made;
}

}  // namespace

void record_implementation(const std::string& name, bool by_onednn) {
  std::lock_guard<std::mutex> lock(g_implementations_mutex);
  ++implementations_made()[by_onednn ? "onednn:" + name + " @" + onednn_isa_name() : name];
}

std::vector<std::pair<std::string, int64_t>> matmul_implementations() {
  std::lock_guard<std::mutex> lock(g_implementations_mutex);
  return {implementations_made().begin(), implementations_made().end()};
}

const char* int8_row_kernel_name() {
#if defined(XF_INT8_ROW_KERNEL)
  switch (cpu_isa()) {
    case CpuIsa::avx512_vnni: return "xf:int8_row_avx512_vnni";
    case CpuIsa::avx512: return "xf:int8_row_avx2";  // AVX-512 without VNNI (Skylake-X)
    case CpuIsa::avx2: return "xf:int8_panels_avx2";
    case CpuIsa::avx2_vnni: return "xf:int8_row_avx2_vnni";
    case CpuIsa::neon: return "xf:int8_row_neon";
    case CpuIsa::neon_dotprod: return "xf:int8_row_neon_dotprod";
#if defined(__x86_64__)
    case CpuIsa::baseline: return cpu_has_sse41() ? "xf:int8_panels_sse41" : nullptr;
#endif
    default: return nullptr;
  }
#else
  return nullptr;
#endif
}

bool int8_row_kernel_available() { return int8_row_kernel_name() != nullptr; }

// The most x rows the kernel is used for. With AVX-512, 16: above, with VNNI the panel kernel
// (int8_panel_products_for), without it oneDNN, whose 512-bit kernels beat the 256-bit one there
// (at every row count, batch 32 beam 4 took 1.9 times CTranslate2's time, docs/BENCHMARKS.md). At
// AVX2 and AVX-VNNI every row count: there oneDNN 2.6's s8 x s8 product also adds up each weight
// column in a scalar byte loop on every call (15% of a batch-32 translation's time at AVX2), and
// at 32 and 128 rows of the bundled model's shapes the kernel took 0.55-0.7 and 0.9-1.1 (AVX2),
// 0.5-0.55 and 0.8-0.95 (AVX-VNNI) of oneDNN's CPU time (docs/KERNELS_CPU.md). On aarch64 every
// row count (oneDNN 2.6 has no fast int8 product there).
int64_t int8_row_kernel_max_rows() {
  const CpuIsa isa = cpu_isa();
  return isa == CpuIsa::avx512_vnni || isa == CpuIsa::avx512 ? 16
                                                              : std::numeric_limits<int64_t>::max();
}

namespace {

// x + shift in place, as u8 (x in [-shift + 1, shift - 1]): the u8 x of xf's int8 kernels, which
// subtract each weight row's shift * sum(w). A loop of its own, so that it vectorizes (inline
// in StaticMatmul::run, byte stores that might alias the plan kept it one byte at a time: 5% of
// a translation's time).
XF_VECTORIZED_BODY uint8_t* shift_to_unsigned_body(int8_t* x, int64_t count, uint8_t shift) {
  auto* shifted = reinterpret_cast<uint8_t*>(x);
  for (int64_t c = 0; c < count; ++c) shifted[c] = static_cast<uint8_t>(shifted[c] + shift);
  return shifted;
}
XF_DISPATCH_BY_ISA(shift_to_unsigned)

// The shift that makes x quantized to int8_x_max_level() a u8 of xf's int8 kernels.
uint8_t int8_x_shift() { return static_cast<uint8_t>(int8_x_max_level() + 1); }

// Whether the kernel at cpu_isa() reads the 7-bit weights in panels (int8_panel_products_avx2,
// or _sse41 below AVX2 where the CPU has SSE4.1): plain AVX2 and below, where it serves every
// row count, so no row-major copy is needed.
bool int8_kernel_reads_panels() {
#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
  static const bool sse41 = cpu_has_sse41();
  return cpu_isa() == CpuIsa::avx2 || (cpu_isa() == CpuIsa::baseline && sse41);
#else
  return false;
#endif
}

}  // namespace

int int8_x_max_level() {
#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
  return cpu_isa() == CpuIsa::avx2 ? 63 : 127;
#else
  return 127;
#endif
}

namespace {

// Whether f32 products run xf's panel kernel (f32_panel_products_avx2) instead of oneDNN: at
// AVX2 and AVX-VNNI, where oneDNN 2.6 runs gemm:jit.
bool f32_kernel_reads_panels() {
#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
  return cpu_isa() == CpuIsa::avx2 || cpu_isa() == CpuIsa::avx2_vnni;
#else
  return false;
#endif
}

// The panel kernel for m rows of length k at cpu_isa(), or null where there is none: at plain
// AVX2 and below (SSE4.1) every row count (7-bit weights), at AVX-512 above int8_row_kernel_max_rows() (the row
// kernel reads the stored weights, or without VNNI their 7-bit copy, below).
Int8PanelProducts int8_panel_products_for(int64_t m, int64_t k) {
#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
  if (int8_kernel_reads_panels())
    return cpu_isa() == CpuIsa::avx2 ? avx2_int8_panel_kernel(k) : sse41_int8_panel_kernel(k);
  if (cpu_isa() == CpuIsa::avx512_vnni && m > int8_row_kernel_max_rows()) {
    return avx512_vnni_int8_panel_kernel(k);
  }
  if (cpu_isa() == CpuIsa::avx512 && m > int8_row_kernel_max_rows()) {
    return avx512_bw_int8_panel_kernel(k);
  }
#endif
  (void)m;
  (void)k;
  return nullptr;
}

// The few-row kernel for row length k at cpu_isa(), or null where there is none (or where it
// reads panels: int8_panel_products_for).
Int8RowProducts int8_row_products_for(int64_t k) {
#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
  switch (cpu_isa()) {
    case CpuIsa::avx512_vnni: return avx512_vnni_int8_row_kernel(k);
    case CpuIsa::avx512: return avx2_int8_row_kernel(k);
    case CpuIsa::avx2_vnni: return avx_vnni_int8_row_kernel(k);
    default: return nullptr;
  }
#elif defined(XF_INT8_ROW_KERNEL) && defined(__aarch64__)
  (void)k;
  return cpu_isa() == CpuIsa::neon_dotprod ? int8_row_products_neon_dotprod
                                           : int8_row_products_neon_plain;
#else
  (void)k;
  return nullptr;
#endif
}

}  // namespace

bool reads_layout_in_place(DType dtype, WeightLayout layout) {
  switch (layout) {
    case WeightLayout::rows: return true;
    case WeightLayout::seven_bit_rows: return dtype == DType::int8;
    case WeightLayout::panels:
      return dtype == DType::int8 ? int8_panel_products_for(std::numeric_limits<int64_t>::max(), 1) != nullptr &&
                                        !int8_kernel_reads_panels() && !int8_products_saturate()
                                  : dtype == DType::f32 && f32_kernel_reads_panels();
    case WeightLayout::seven_bit_panels:
      return dtype == DType::int8 && int8_panel_products_for(std::numeric_limits<int64_t>::max(), 1) != nullptr;
  }
  return false;
}

WeightLayout kernel_weight_layout(DType dtype) {
  if (dtype == DType::f32) return f32_kernel_reads_panels() ? WeightLayout::panels : WeightLayout::rows;
  if (dtype != DType::int8) return WeightLayout::rows;
  if (reads_layout_in_place(dtype, WeightLayout::panels)) return WeightLayout::panels;  // AVX-512 VNNI
  if (reads_layout_in_place(dtype, WeightLayout::seven_bit_panels)) return WeightLayout::seven_bit_panels;
  if (int8_row_products_for(1) == nullptr && int8_products_saturate()) return WeightLayout::seven_bit_rows;  // oneDNN
  return WeightLayout::rows;
}

// oneDNN's products are cut into this many slices of weight rows (fewer where n is small; one
// at one thread); four cost 8% more CPU time at one thread than two (every slice is a call).
constexpr int64_t kOnednnSlices = 2, kOnednnMinSliceRows = 64;

// One thread's share of a oneDNN product: weight rows [first, first + rows), y's columns of the
// same numbers (written densely, then copied there, where there are several slices).
struct OnednnSlice {
  int64_t first = 0, rows = 0;
  dnnl::matmul primitive;
  std::shared_ptr<PackedWeights> packed;  // null when it reads the stored rows
  dnnl::memory source, destination, bias, scratchpad;
  std::unordered_map<int, dnnl::memory> args;
  size_t scratchpad_offset = 0, scratchpad_bytes = 0;
  size_t output_offset = 0;  // its dense [m, rows] result in the workspace (two slices or more)
};

struct StaticMatmul::Impl {
  CpuEngine* engine = nullptr;
  int64_t m = 0, n = 0, k = 0;
  bool int8 = false;
  bool with_bias = false;
  std::string implementation;
  std::shared_ptr<PackedWeights> packed;  // null when oneDNN reads the stored weights
  // Int8 products of at most int8_row_kernel_max_rows() rows by xf's kernel instead of oneDNN:
  // the weights it reads (stored, or their 7-bit copy), their row scales and each row's
  // 128 * sum of weights (plan time).
  Int8RowProducts int8_row_products = nullptr;
  Int8PanelProducts int8_panel_products = nullptr;  // instead: panels (AVX2; VNNI above 16 rows)
  const int8_t* int8_weights = nullptr;
  int64_t int8_weight_row_bytes = 0;  // k, or in panels panel_bytes(k) / 16
  const float* int8_row_scales = nullptr;
  std::shared_ptr<PackedWeights> shift_sums_copy;  // the engine's, shared across row counts
  bool f32_panels = false;  // f32 by xf's kernel, reading panels (f32_panel_products_avx2)
  const float* f32_panel_data = nullptr;  // those panels: packed's, or the stored ones in place
  std::shared_ptr<PackedWeights> panel_sums;  // int8 panels read in place: shift sums, row scales
  const int32_t* shift_sums = nullptr;
  // oneDNN's product as one primitive a thread, each over a slice of the weight rows (the output
  // columns) on one OpenMP thread (xf/kernels_cpu/worker_pool.h: no OpenMP team of oneDNN's own).
  // Memory objects made once; run() only re-points their data handles (no allocation).
  std::vector<OnednnSlice> slices;
  bool packed_slices = false;  // the slices read packed copies, not the stored weights
  // Workspace layout: int8 only: [m*k int8 quantized x][m f32 row scales of x]; then scratchpad.
  size_t scales_offset = 0;
  size_t workspace_bytes = 0;
};

StaticMatmul::StaticMatmul(CpuEngine& engine, int64_t m, const WeightMatrix& weights,
                           bool with_bias)
    : impl_(new Impl) {
  if (weights.dtype == DType::f16 || weights.dtype == DType::bf16) {
    throw Error(std::string("StaticMatmul: ") + dtype_name(weights.dtype) +
                " weights are not supported on the CPU; widen them to f32 when loading");
  }
  if (m <= 0 || weights.rows <= 0 || weights.cols <= 0 || weights.data == nullptr) {
    throw Error("StaticMatmul: empty shape (m " + std::to_string(m) + ", weights " +
                std::to_string(weights.rows) + " x " + std::to_string(weights.cols) + ")");
  }
  if (weights.dtype == DType::int8 && weights.row_scales == nullptr) {
    throw Error("StaticMatmul: int8 weights without row scales");
  }
  if (!reads_layout_in_place(weights.dtype, weights.layout)) {
    throw Error(std::string("StaticMatmul: ") + dtype_name(weights.dtype) + " weights in " +
                weight_layout_name(weights.layout) + " are not read at this instruction set; give them in rows");
  }
  Impl& s = *impl_;
  s.engine = &engine;
  s.m = m;
  s.n = weights.rows;
  s.k = weights.cols;
  s.int8 = weights.dtype == DType::int8;
  s.with_bias = with_bias;
  // oneDNN fixes a primitive's thread partition when it is made, from the calling thread's
  // OpenMP count: one, as each slice runs on one thread of the worker pool (run()).
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);

  // xf's kernel where one serves (see the top of this file), else oneDNN's primitives. Weights
  // stored in panels are read where they lie by the panel kernel at every row count.
  const bool stored_panels = in_panels(weights.layout);
  const bool stored_seven_bits = in_seven_bits(weights.layout);
  // Rows whose panel copy a product of more rows made already (the runtime plans its largest
  // row count first): the panel kernel at this count too (the same results bit for bit), so that
  // the weights are kept once, as that copy, not also as the rows the row kernel reads.
  std::shared_ptr<PackedWeights> made_panels;
  if (s.int8) {
    s.int8_panel_products = int8_panel_products_for(stored_panels ? std::numeric_limits<int64_t>::max() : m, s.k);
    if (s.int8_panel_products == nullptr && !stored_panels &&
        (made_panels = engine.impl_->existing_int8_panels(weights)) != nullptr) {
      s.int8_panel_products = int8_panel_products_for(std::numeric_limits<int64_t>::max(), s.k);
    }
    if (s.int8_panel_products == nullptr && m <= int8_row_kernel_max_rows()) {
      s.int8_row_products = int8_row_products_for(s.k);
    }
  } else {
    s.f32_panels = engine.weight_packing() && f32_kernel_reads_panels();
  }
  const bool int8_by_xf = s.int8_row_products != nullptr || s.int8_panel_products != nullptr;
  if (int8_by_xf) {
    // The weights oneDNN would read (the 7-bit copy where its products saturate, as the AVX2
    // kernel's vpmaddubsw does too), so that a row's result is the same on either path.
    s.implementation = s.int8_panel_products == nullptr || int8_kernel_reads_panels()
                           ? int8_row_kernel_name()
                       : cpu_isa() == CpuIsa::avx512_vnni ? "xf:int8_panels_avx512_vnni"
                                                          : "xf:int8_panels_avx512";
    if (stored_panels) {  // the file's panels: only the row sums and padded scales made here
      s.panel_sums = engine.impl_->int8_panel_sums(weights);
      s.int8_weights = static_cast<const int8_t*>(weights.data);
      s.int8_weight_row_bytes = panel_bytes(s.k) / kPanelColumns;
      s.int8_row_scales = s.panel_sums->row_scales.data();
      s.shift_sums = static_cast<const int32_t*>(s.panel_sums->memory.get_data_handle());
    } else if (s.int8_panel_products != nullptr) {
      s.packed = made_panels != nullptr ? made_panels
                                        : engine.impl_->int8_panels(weights, /*halve=*/(int8_kernel_reads_panels() ||
                                                                                        int8_products_saturate()) &&
                                                                                           !stored_seven_bits);
      s.int8_weights = static_cast<const int8_t*>(s.packed->memory.get_data_handle());
      s.int8_weight_row_bytes = panel_bytes(s.k) / kPanelColumns;
      s.int8_row_scales = s.packed->row_scales.data();
      s.shift_sums = reinterpret_cast<const int32_t*>(
          s.int8_weights + padded_to_panels(s.n) / kPanelColumns * panel_bytes(s.k));
    } else {
      WeightMatrix read = weights;
      if (int8_products_saturate() && !stored_seven_bits) {
        s.packed = engine.impl_->seven_bit_copy(weights);
        read.data = s.packed->memory.get_data_handle();
        read.row_scales = s.packed->row_scales.data();
      }
      s.int8_weights = static_cast<const int8_t*>(read.data);
      s.int8_weight_row_bytes = s.k;
      s.int8_row_scales = read.row_scales;
      s.shift_sums_copy = engine.impl_->row_shift_sums(read);
      s.shift_sums = static_cast<const int32_t*>(s.shift_sums_copy->memory.get_data_handle());
    }
  } else if (stored_panels) {  // f32 panels read in place, whether or not packing is on
    s.f32_panels = true;
    s.f32_panel_data = static_cast<const float*>(weights.data);
    s.implementation = "xf:f32_panels_avx2";
  } else if (s.f32_panels) {
    s.packed = engine.impl_->f32_panels(weights);
    s.f32_panel_data = static_cast<const float*>(s.packed->memory.get_data_handle());
    s.implementation = "xf:f32_panels_avx2";
  } else {
    make_onednn_slices(weights);
  }
  record_implementation(s.implementation, !int8_by_xf && !s.f32_panels);

  size_t offset = 0;
  if (s.int8) {
    offset = align_up(static_cast<size_t>(m * s.k));  // quantized x
    s.scales_offset = offset;
    offset += align_up(static_cast<size_t>(m) * sizeof(float));  // its row scales
  }
  for (OnednnSlice& slice : s.slices) {  // xf's kernels need no scratchpad
    slice.scratchpad_offset = offset;
    offset += align_up(slice.scratchpad_bytes);
    if (s.slices.size() > 1) {
      slice.output_offset = offset;
      offset += align_up(static_cast<size_t>(m * slice.rows) * sizeof(float));
    }
  }
  s.workspace_bytes = offset;
}

// oneDNN's product: one primitive per slice of the weight rows, kOnednnSlices slices of a
// multiple of 16 rows (fewer for small n: at least kOnednnMinSliceRows rows each; one at one
// thread); the worker pool's threads take them in turn, so at most kOnednnSlices threads share
// one product. Each
// slice writes a dense [m, rows] block (in the workspace where there are several, copied into
// y's columns after): oneDNN 2.6's brgemm product takes no output row stride, and with y's
// stride n every slice fell back to gemm:jit, whose one-row product (a gemv) adds k 1024 up in
// another order than its products of more rows, so a sentence decoded alone and in a batch of
// two scored other last bits (StaticMatmul.F32RowAloneEqualsItsRowInAProduct: n 256, k 1024,
// 1 row vs 2). brgemm's rows depend neither on m nor on the slice (measured: m 1 to 80, 128, 600
// and 2048, the bundled and the base-size model's shapes, bit for bit as one slice).
// int8: y[m, n] = x_scale[m] * (row_scale[n] * (q(x) . W^T)[m, n]) + bias[n]: oneDNN applies W's
// scales as output scales, one per column (runtime scales, pointed at the file's row scales
// once); the per-row input scales and the bias are our epilogue in run() (oneDNN 2.6 has
// per-column output scales only, and a per-row binary post-op falls back to its reference
// kernel, 1000x slower, measured). The stored int8 layout is read in place (measured: as fast
// as a packed copy, docs/KERNELS_CPU.md), or its 7-bit copy where oneDNN's int8 products
// saturate. f32: oneDNN's packed layout of each slice (a copy, shared by every row count)
// unless packing is off.
void StaticMatmul::make_onednn_slices(const WeightMatrix& weights) {
  Impl& s = *impl_;
  dnnl::engine& eng = s.engine->engine();
  WeightMatrix read = weights;
  if (s.int8 && int8_products_saturate() && !in_seven_bits(weights.layout)) {
    s.packed = s.engine->impl_->seven_bit_copy(weights);
    read.data = s.packed->memory.get_data_handle();
    read.row_scales = s.packed->row_scales.data();
  }
  const DataType weight_type = s.int8 ? DataType::s8 : DataType::f32;
  const size_t element_bytes = s.int8 ? 1 : sizeof(float);
  const dnnl::memory::desc source_desc = row_major_desc(s.m, s.k, s.int8 ? DataType::s8 : DataType::f32);
  // One slice at one thread (two cost it 6% more CPU time: two calls and the copy), else
  // kOnednnSlices: each column's sum over k is the same either way, as each slice is dense
  // (slices cut per thread that wrote into y in place ran gemm:jit, whose sums depend on the
  // shape, and made results differ between 1 and 2 threads:
  // StaticMatmul.ResultsDoNotDependOnTheThreadCount).
  const int64_t slices = s.engine->threads() == 1 ? 1 : kOnednnSlices;
  const int64_t slice_rows =
      std::max<int64_t>(kOnednnMinSliceRows, (s.n + slices * 16 - 1) / (slices * 16) * 16);
  for (int64_t first = 0; first < s.n; first += slice_rows) {
    OnednnSlice slice;
    slice.first = first;
    slice.rows = std::min(slice_rows, s.n - first);
    WeightMatrix part = read;
    part.data = static_cast<const char*>(read.data) + first * s.k * element_bytes;
    part.row_scales = read.row_scales != nullptr ? read.row_scales + first : nullptr;
    part.rows = slice.rows;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (s.int8) attr.set_output_scales(1 << 1, {DNNL_RUNTIME_F32_VAL});
    const dnnl::memory::desc stored = stored_weights_desc(slice.rows, s.k, weight_type);
    const dnnl::memory::desc wanted =
        !s.int8 && s.engine->weight_packing()
            ? dnnl::memory::desc({s.k, slice.rows}, DataType::f32, dnnl::memory::format_tag::any)
            : stored;
    // Dense: y itself where this is the only slice, else the slice's block of the workspace.
    const dnnl::memory::desc destination_desc = row_major_desc(s.m, slice.rows, DataType::f32);
    const dnnl::memory::desc bias_desc = row_major_desc(1, slice.rows, DataType::f32);
    const bool with_bias = s.with_bias && !s.int8;
    const dnnl::matmul::primitive_desc pd =
        with_bias ? dnnl::matmul::primitive_desc(
                        dnnl::matmul::desc(source_desc, wanted, bias_desc, destination_desc), attr, eng)
                  : dnnl::matmul::primitive_desc(
                        dnnl::matmul::desc(source_desc, wanted, destination_desc), attr, eng);
    dnnl::memory weights_memory;
    if (pd.weights_desc() == stored) {
      weights_memory = dnnl::memory(stored, eng, const_cast<void*>(part.data));
    } else {
      slice.packed = s.engine->impl_->packed_copy(part, pd.weights_desc());
      weights_memory = slice.packed->memory;
      s.packed_slices = true;
    }
    slice.primitive = dnnl::matmul(pd);
    if (first == 0) s.implementation = pd.impl_info_str();
    // DNNL_MEMORY_NONE handles: run() points them at the caller's buffers.
    slice.source = dnnl::memory(source_desc, eng, DNNL_MEMORY_NONE);
    slice.destination = dnnl::memory(destination_desc, eng, DNNL_MEMORY_NONE);
    slice.args = {{DNNL_ARG_SRC, slice.source},
                  {DNNL_ARG_WEIGHTS, weights_memory},
                  {DNNL_ARG_DST, slice.destination}};
    if (with_bias) {
      slice.bias = dnnl::memory(bias_desc, eng, DNNL_MEMORY_NONE);
      slice.args[DNNL_ARG_BIAS] = slice.bias;
    }
    if (s.int8) {
      slice.args[DNNL_ARG_ATTR_OUTPUT_SCALES] = dnnl::memory(
          {{slice.rows}, DataType::f32, {1}}, eng, const_cast<float*>(part.row_scales));
    }
    slice.scratchpad_bytes = pd.scratchpad_desc().get_size();
    if (slice.scratchpad_bytes > 0) {
      slice.scratchpad = dnnl::memory(pd.scratchpad_desc(), eng, DNNL_MEMORY_NONE);
      slice.args[DNNL_ARG_SCRATCHPAD] = slice.scratchpad;
    }
    s.slices.push_back(std::move(slice));
  }
}

StaticMatmul::~StaticMatmul() = default;
StaticMatmul::StaticMatmul(StaticMatmul&&) noexcept = default;
StaticMatmul& StaticMatmul::operator=(StaticMatmul&&) noexcept = default;

int64_t StaticMatmul::m() const { return impl_->m; }
int64_t StaticMatmul::n() const { return impl_->n; }
int64_t StaticMatmul::k() const { return impl_->k; }
size_t StaticMatmul::workspace_bytes() const { return impl_->workspace_bytes; }
const char* StaticMatmul::implementation() const { return impl_->implementation.c_str(); }
bool StaticMatmul::reads_weights_in_place() const {
  return impl_->packed == nullptr && !impl_->packed_slices;
}

namespace {
// Whether every slice's weights are a oneDNN packed copy in a blocked layout of two dimensions:
// copy_weight_row can then read a row's values from it.
bool slices_hold_blocked_copies(const std::vector<OnednnSlice>& slices) {
  if (slices.empty()) return false;
  for (const OnednnSlice& slice : slices) {
    if (slice.packed == nullptr) return false;
    const dnnl_memory_desc_t& d = slice.packed->desc.data;
    if (d.format_kind != dnnl_blocked || d.ndims != 2 || d.data_type != dnnl_f32) return false;
  }
  return true;
}
}  // namespace

bool StaticMatmul::holds_f32_weight_rows() const {
  return impl_->f32_panels || (!impl_->int8 && impl_->packed_slices && slices_hold_blocked_copies(impl_->slices));
}

void StaticMatmul::copy_weight_row(int64_t row, int64_t first, int64_t count, float* out) const {
  const Impl& s = *impl_;
  if (!holds_f32_weight_rows()) throw Error("StaticMatmul::copy_weight_row: no f32 copy of its own");
  if (row < 0 || row >= s.n || first < 0 || count < 0 || first + count > s.k)
    throw Error("StaticMatmul::copy_weight_row: outside the weights");
  if (!s.f32_panels) {  // oneDNN's packed copy of the slice holding the row: B = [k, rows]
    for (const OnednnSlice& slice : s.slices) {
      if (row >= slice.first + slice.rows) continue;
      // The row's own part of each offset, then each input's (the offsets add up by dimension).
      const auto* values = static_cast<const float*>(slice.packed->memory.get_data_handle()) +
                           blocked_offset(slice.packed->desc.data, 0, row - slice.first);
      const int64_t* input_offsets = slice.packed->input_offsets.data();
      for (int64_t c = 0; c < count; ++c) out[c] = values[input_offsets[first + c]];
      return;
    }
  }
  // The panel layout (f32_panel_products_avx2): a row's k values are kPanelColumns apart.
  const float* panels = s.f32_panel_data;
  const float* values = panels + row / kPanelColumns * kPanelColumns * s.k + row % kPanelColumns;
  for (int64_t c = 0; c < count; ++c) out[c] = values[(first + c) * kPanelColumns];
}

void StaticMatmul::run(const float* x, const float* bias, float* y, void* workspace,
                       int64_t rows) const {
  Impl& s = *impl_;
  if (s.with_bias && bias == nullptr)
    throw Error("StaticMatmul::run: made with a bias, given none");
  if (rows < 0 || rows > s.m) throw Error("StaticMatmul::run: rows outside 0..m (0: all m)");
  // xf's kernels take any row count: only the rows that matter (the rest are the runtime's
  // padding to a planned count).
  const bool by_xf = s.int8_row_products != nullptr || s.int8_panel_products != nullptr || s.f32_panels;
  const int64_t m = by_xf && rows > 0 ? rows : s.m;
  char* bytes = static_cast<char*>(workspace);
  float* x_scales = reinterpret_cast<float*>(bytes + s.scales_offset);  // int8: [m]
  if (s.int8) {
    int8_t* quantized = reinterpret_cast<int8_t*>(bytes);
    quantize_int8_per_row(x, m, s.k, quantized, x_scales, s.engine->threads(), int8_x_max_level());
    if (s.int8_row_products != nullptr || s.int8_panel_products != nullptr) {
      const uint8_t* shifted = shift_to_unsigned(quantized, m * s.k, int8_x_shift());
      // One slice of weight rows a thread, a multiple of the kernel's 16 (slices of 256 rows
      // left a 256-row product on one thread of two, and split 768 rows 512 : 256).
      const int threads = s.engine->threads();
      const int64_t slice = (s.n + threads * 16 - 1) / (threads * 16) * 16;
      detail::parallel_for((s.n + slice - 1) / slice, threads,
                           m * s.n * s.k >= (1 << 18), [&](int64_t b) {
        const int64_t first = b * slice, slice_rows = std::min(slice, s.n - first);
        const int8_t* weights = s.int8_weights + first * s.int8_weight_row_bytes;
        if (s.int8_panel_products != nullptr) {  // scales x and adds the bias itself
          s.int8_panel_products(shifted, m, weights, s.k, slice_rows, s.shift_sums + first,
                                s.int8_row_scales + first, x_scales,
                                s.with_bias ? bias + first : nullptr, y + first, s.n);
        } else {
          s.int8_row_products(shifted, m, weights, s.k, slice_rows, s.shift_sums + first,
                              s.int8_row_scales + first, y + first, s.n);
        }
      });
      if (s.int8_panel_products == nullptr) {
        scale_rows_add_bias(y, m, s.n, x_scales, s.with_bias ? bias : nullptr, s.engine->threads());
      }
      return;
    }
  }
#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
  if (s.f32_panels) {  // one slice of panels a thread
    const int threads = s.engine->threads();
    const int64_t slice =
        (s.n + threads * kPanelColumns - 1) / (threads * kPanelColumns) * kPanelColumns;
    const float* panels = s.f32_panel_data;
    detail::parallel_for((s.n + slice - 1) / slice, threads, m * s.n * s.k >= (1 << 18),
                         [&](int64_t b) {
      const int64_t first = b * slice, slice_rows = std::min(slice, s.n - first);
      f32_panel_products_avx2(x, m, panels + first * s.k, s.k, slice_rows,
                              s.with_bias ? bias + first : nullptr, y + first, s.n);
    });
    return;
  }
#endif
  void* source = s.int8 ? static_cast<void*>(bytes) : const_cast<float*>(x);
  const bool one_slice = s.slices.size() == 1;
  for (OnednnSlice& slice : s.slices) {
    slice.source.set_data_handle(source);
    slice.destination.set_data_handle(one_slice ? static_cast<void*>(y) : bytes + slice.output_offset);
    if (slice.bias) slice.bias.set_data_handle(const_cast<float*>(bias) + slice.first);
    if (slice.scratchpad_bytes > 0) slice.scratchpad.set_data_handle(bytes + slice.scratchpad_offset);
  }
  // The primitives were made for one OpenMP thread (the constructor): the calling thread runs
  // slice 0 and must not start a team either.
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  const int slices = static_cast<int>(s.slices.size());
  run_on_threads(std::min(slices, s.engine->threads()), [&](int thread, int team) {  // team: 1 inline
    for (int i = thread; i < slices; i += team) {
      const OnednnSlice& slice = s.slices[i];
      run_primitive(slice.primitive, s.engine->impl_->stream_for(thread), slice.args);
      if (one_slice) continue;
      const auto* block = reinterpret_cast<const float*>(bytes + slice.output_offset);
      for (int64_t r = 0; r < s.m; ++r) {
        std::memcpy(y + r * s.n + slice.first, block + r * slice.rows, sizeof(float) * slice.rows);
      }
    }
  });
  if (s.int8) {
    scale_rows_add_bias(y, s.m, s.n, x_scales, s.with_bias ? bias : nullptr, s.engine->threads());
  }
}

// ---- the output layer over a shortlist's rows ---------------------------------------------------

namespace {
// Columns [first, last) of y for every row of x (their weight rows stay in cache meanwhile).
XF_VECTORIZED_BODY void rows_product_block_body(const float* x, const float* w, const float* bias, int64_t rows,
                                                int64_t n, int64_t k, int64_t first, int64_t last, float* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = first; i < last; ++i)
      y[r * n + i] = detail::dot(x + r * k, w + i * k, k) + (bias != nullptr ? bias[i] : 0.0f);
}
XF_DISPATCH_BY_ISA(rows_product_block)

// The int8 kernel that multiplies gathered int8 rows: the one StaticMatmul's int8 product runs
// at cpu_isa() (a panel kernel where one serves many rows: AVX2, AVX-512 with and without VNNI;
// else the row kernel on row-major rows: AVX-VNNI, NEON), on the values it reads (the 7-bit copy
// where it reads one). Every one of them computes each column alone, with the same int32 sum
// and f32 operations at any row count, so a gathered column equals the whole product's. None
// (both null): no xf int8 kernel, f32 rows then.
struct GatheredInt8Kernel {
  Int8PanelProducts panels = nullptr;
  Int8RowProducts rows = nullptr;
  bool seven_bits = false;
  explicit operator bool() const { return panels != nullptr || rows != nullptr; }
};
GatheredInt8Kernel gathered_int8_kernel(const WeightMatrix& w) {
  GatheredInt8Kernel kernel;
  if (w.layout != WeightLayout::rows && w.layout != WeightLayout::seven_bit_rows)
    throw Error("gather_weight_rows: the weights are not in rows");
  if (w.dtype != DType::int8) return kernel;
  kernel.panels = int8_panel_products_for(std::numeric_limits<int64_t>::max(), w.cols);
  if (kernel.panels == nullptr) kernel.rows = int8_row_products_for(w.cols);
  // To be halved (values already in 7 bits are read as they are, with their row scales).
  kernel.seven_bits = (int8_kernel_reads_panels() || int8_products_saturate()) && !in_seven_bits(w.layout);
  return kernel;
}

// Gathered int8 rows: their values (panels of 16 rows, or row-major), then each (padded) row's
// 128 * sum of values (s32) and row scale (f32), the kernel's shift_sums and row_scales.
struct GatheredInt8Layout {
  int64_t padded_rows = 0;  // count, or whole panels
  size_t sums_offset = 0, scales_offset = 0, bytes = 0;
  GatheredInt8Layout(const GatheredInt8Kernel& kernel, int64_t count, int64_t k) {
    padded_rows = kernel.panels != nullptr ? padded_to_panels(count) : count;
    const size_t values = kernel.panels != nullptr ? static_cast<size_t>(padded_rows / kPanelColumns * panel_bytes(k))
                                                   : static_cast<size_t>(count * k);
    sums_offset = align_up(values);
    scales_offset = sums_offset + align_up(sizeof(int32_t) * padded_rows);
    bytes = scales_offset + align_up(sizeof(float) * padded_rows);
  }
};
}  // namespace

size_t gathered_rows_bytes(const WeightMatrix& w, int64_t count) {
  const GatheredInt8Kernel kernel = gathered_int8_kernel(w);
  if (!kernel) return sizeof(float) * count * w.cols;
  return GatheredInt8Layout(kernel, count, w.cols).bytes;
}

size_t gathered_product_workspace_bytes(const WeightMatrix& w, int64_t rows) {
  if (!gathered_int8_kernel(w)) return 0;
  return align_up(rows * w.cols) + align_up(sizeof(float) * rows);  // quantized x, its row scales
}

void gather_weight_rows(const WeightMatrix& w, const int32_t* ids, int64_t count, void* gathered, int threads) {
  if (w.dtype != DType::f32 && w.dtype != DType::int8)
    throw Error(std::string("gather_weight_rows: ") + dtype_name(w.dtype) + " weights are not read on the CPU");
  const int64_t cols = w.cols;
  const GatheredInt8Kernel kernel = gathered_int8_kernel(w);
  if (!kernel) {
    auto* out = static_cast<float*>(gathered);
    detail::parallel_for(count, threads, count * cols > detail::kMinSharedWork, [&](int64_t i) {
      const int64_t row = ids[i];
      float* to = out + i * cols;
      if (w.dtype == DType::f32) {
        std::memcpy(to, static_cast<const float*>(w.data) + row * cols, sizeof(float) * cols);
      } else {
        const int8_t* q = static_cast<const int8_t*>(w.data) + row * cols;
        const float scale = w.row_scales[row];
        for (int64_t c = 0; c < cols; ++c) to[c] = static_cast<float>(q[c]) * scale;
      }
    });
    return;
  }
  const GatheredInt8Layout layout(kernel, count, cols);
  char* bytes = static_cast<char*>(gathered);
  auto* values = reinterpret_cast<int8_t*>(bytes);
  auto* sums = reinterpret_cast<int32_t*>(bytes + layout.sums_offset);
  auto* scales = reinterpret_cast<float*>(bytes + layout.scales_offset);
  const auto* stored = static_cast<const int8_t*>(w.data);
  if (kernel.panels != nullptr) {
    pack_int8_panels(stored, cols, ids, count, kernel.seven_bits, values, sums, threads);
  } else {  // row-major
    detail::parallel_for(count, threads, count * cols > detail::kMinSharedWork, [&](int64_t i) {
      const int8_t* q = stored + static_cast<int64_t>(ids[i]) * cols;
      int8_t* to = values + i * cols;
      int32_t sum = 0;
      for (int64_t c = 0; c < cols; ++c) {
        to[c] = kernel.seven_bits ? xf::to_seven_bits(q[c]) : q[c];
        sum += to[c];
      }
      sums[i] = 128 * sum;
    });
  }
  const float scale_factor = kernel.seven_bits ? 2.0f : 1.0f;  // a 7-bit value is half the stored
  for (int64_t i = 0; i < count; ++i) scales[i] = scale_factor * w.row_scales[ids[i]];
  for (int64_t i = count; i < layout.padded_rows; ++i) scales[i] = 0.0f;
}

namespace {
// The rows that read the same column runs (GatheredColumnRuns): runs of rows with one list.
struct RowGroups {
  const GatheredColumnRuns& c;
  int64_t rows;
  int64_t count() const {
    int64_t groups = 0;
    for (int64_t r = 0; r < rows; ++r) groups += r == 0 || c.row_lists[r] != c.row_lists[r - 1];
    return groups;
  }
  // Group g's first row and row count (a scan: a step has at most a few hundred rows).
  std::pair<int64_t, int64_t> group(int64_t g) const {
    int64_t first = 0;
    for (int64_t r = 1, seen = 0; r < rows && seen < g; ++r)
      if (c.row_lists[r] != c.row_lists[r - 1] && ++seen == g) first = r;
    int64_t last = first + 1;
    while (last < rows && c.row_lists[last] == c.row_lists[first]) ++last;
    return {first, last - first};
  }
  // Group g's column runs: [begin, end) pairs.
  std::pair<const int32_t*, int64_t> runs(int64_t first_row) const {
    const int32_t list = c.row_lists[first_row];
    return {c.runs + 2 * c.run_offsets[list], c.run_offsets[list + 1] - c.run_offsets[list]};
  }
};
}  // namespace

void gathered_rows_product(const WeightMatrix& w, const float* x, const void* gathered, const float* bias,
                           int64_t rows, int64_t count, float* y, void* workspace, int threads,
                           const GatheredColumnRuns* column_runs) {
  const int64_t k = w.cols;
  const GatheredInt8Kernel kernel = gathered_int8_kernel(w);
  const bool by_runs = column_runs != nullptr && (!kernel || kernel.panels != nullptr);
  const bool worth_sharing = rows * count * k > detail::kMinSharedWork;
  if (!kernel) {
    const auto* f32_rows = static_cast<const float*>(gathered);
    if (by_runs) {
      const RowGroups groups{*column_runs, rows};
      detail::parallel_for(groups.count(), threads, worth_sharing, [&](int64_t g) {
        const auto [first, m] = groups.group(g);
        const auto [runs, run_count] = groups.runs(first);
        for (int64_t i = 0; i < run_count; ++i)
          rows_product_block(x + first * k, f32_rows, bias, m, count, k, runs[2 * i], runs[2 * i + 1], y + first * count);
      });
      return;
    }
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (count + kBlock - 1) / kBlock;
    detail::parallel_for(blocks, threads, worth_sharing, [&](int64_t b) {
      rows_product_block(x, f32_rows, bias, rows, count, k, b * kBlock, std::min(count, b * kBlock + kBlock), y);
    });
    return;
  }
  // As StaticMatmul::run: x quantized per row and shifted to u8, one slice of whole panels a thread.
  const GatheredInt8Layout layout(kernel, count, k);
  const char* bytes = static_cast<const char*>(gathered);
  const auto* values = reinterpret_cast<const int8_t*>(bytes);
  const auto* sums = reinterpret_cast<const int32_t*>(bytes + layout.sums_offset);
  const auto* scales = reinterpret_cast<const float*>(bytes + layout.scales_offset);
  auto* quantized = static_cast<int8_t*>(workspace);
  auto* x_scales = reinterpret_cast<float*>(static_cast<char*>(workspace) + align_up(rows * k));
  quantize_int8_per_row(x, rows, k, quantized, x_scales, threads, int8_x_max_level());
  const uint8_t* shifted = shift_to_unsigned(quantized, rows * k, int8_x_shift());
  if (by_runs) {  // each group of rows over its runs of whole panels
    const RowGroups groups{*column_runs, rows};
    detail::parallel_for(groups.count(), threads, worth_sharing, [&](int64_t g) {
      const auto [first, m] = groups.group(g);
      const auto [runs, run_count] = groups.runs(first);
      for (int64_t i = 0; i < run_count; ++i) {
        const int64_t begin = runs[2 * i], end = runs[2 * i + 1];
        kernel.panels(shifted + first * k, m, values + begin / kPanelColumns * panel_bytes(k), k, end - begin,
                      sums + begin, scales + begin, x_scales + first, bias != nullptr ? bias + begin : nullptr,
                      y + first * count + begin, count);
      }
    });
    return;
  }
  threads = std::max(threads, 1);
  const int64_t slice = (count + threads * kPanelColumns - 1) / (threads * kPanelColumns) * kPanelColumns;
  if (slice == 0) return;
  detail::parallel_for((count + slice - 1) / slice, threads, rows * count * k >= (1 << 18), [&](int64_t b) {
    const int64_t first = b * slice, slice_rows = std::min(slice, count - first);
    if (kernel.panels != nullptr) {
      kernel.panels(shifted, rows, values + first / kPanelColumns * panel_bytes(k), k, slice_rows, sums + first,
                    scales + first, x_scales, bias != nullptr ? bias + first : nullptr, y + first, count);
    } else {
      kernel.rows(shifted, rows, values + first * k, k, slice_rows, sums + first, scales + first, y + first, count);
    }
  });
  if (kernel.panels == nullptr) scale_rows_add_bias(y, rows, count, x_scales, bias, threads);
}

}  // namespace xf::cpu
