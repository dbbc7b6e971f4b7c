// oneDNN's side of the CPU products: the engine (CpuEngine) and the weight copies it shares among
// plans, the one execute() wrapper (run_primitive) that lets tests count oneDNN's own calls, the
// trainer's products (dnnl_sgemm, Bf16Gemm's bf16 primitives, linear_forward/backward), and what
// oneDNN reports of the CPU (its ISA, whether its int8 products saturate, bf16 in hardware).
// StaticMatmul's primitive is planned in matmul_cpu.cc, where no xf kernel serves a product.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "matmul_kernels_cpu.h"
#include "matmul_plans_cpu.h"
#include "onednn_isa.h"
#include "simd_cpu.h"
#include "xf/error.h"
#include "xf/kernels/layer_norm.h"  // bias_backward, in linear_backward
#include "xf/kernels/matmul.h"
#include "xf/library_call.h"

namespace xf::cpu {
namespace {

// One row of f32 into bf16: an AVX-512 build of this loop where the CPU has it.
XF_VECTORIZED_BODY void round_row_to_bf16_body(const float* from, int64_t count, uint16_t* to) {
  for (int64_t i = 0; i < count; ++i) to[i] = float_to_bfloat16(from[i]);
}
XF_DISPATCH_BY_ISA(round_row_to_bf16)

// rows x cols of a row-major f32 matrix (leading dimension ld) into a compact bf16 copy.
void round_rows_to_bf16(const float* from, int64_t rows, int64_t cols, int64_t ld, uint16_t* to,
                        int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) round_row_to_bf16(from + r * ld, cols, to + r * cols);
}

}  // namespace

// oneDNN's int8 products on CPUs without VNNI (AVX2, AVX-512 before Cascade Lake) add pairs of
// u8 x s8 products in int16 with saturation (vpmaddubsw): 2 * 255 * 127 overflows, and a row of
// aligned large values came out 32640 instead of 4129024 (oneDNN 2.6.3, AMD EPYC with AVX2).
// Weights of 7 bits (|w| <= 63) keep every pair inside int16 (2 * 255 * 63 = 32130).
bool int8_products_saturate() {
#if defined(__aarch64__)
  return false;  // every int8 product runs xf's NEON kernel, which is exact on full-range weights
#else
  return !onednn_allows(dnnl_cpu_isa_avx512_core_vnni) && !onednn_allows(dnnl_cpu_isa_avx2_vnni);
#endif
}

bool bf16_products_in_hardware() { return onednn_allows(dnnl_cpu_isa_avx512_core_bf16); }

const char* onednn_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

int8_t to_seven_bits(int8_t value) { return xf::to_seven_bits(value); }  // xf/weight_layout.h

// The shared copy of `weights` in `desc`, made by `fill` when no StaticMatmul holds one yet.
template <typename Fill>
std::shared_ptr<PackedWeights> CpuEngine::Impl::shared_copy(const WeightMatrix& weights,
                                                            const dnnl::memory::desc& desc, Fill fill) {
  std::lock_guard<std::mutex> lock(mutex);
  packed.erase(std::remove_if(packed.begin(), packed.end(),
                              [](const std::weak_ptr<PackedWeights>& p) { return p.expired(); }),
               packed.end());
  for (const auto& entry : packed) {
    std::shared_ptr<PackedWeights> existing = entry.lock();
    if (existing->source == weights.data && existing->n == weights.rows &&
        existing->k == weights.cols && existing->desc == desc) {
      return existing;
    }
  }
  auto made = std::make_shared<PackedWeights>();
  made->source = weights.data;
  made->n = weights.rows;
  made->k = weights.cols;
  made->desc = desc;
  made->memory = dnnl::memory(desc, engine);  // oneDNN allocates; plan time only
  fill(*made);
  packed.push_back(made);
  return made;
}

std::shared_ptr<PackedWeights> CpuEngine::Impl::packed_copy(const WeightMatrix& weights,
                                                            const dnnl::memory::desc& desc) {
  return shared_copy(weights, desc, [&](PackedWeights& made) {
    dnnl::memory stored(stored_weights_desc(weights.rows, weights.cols, DataType::f32), engine,
                        const_cast<void*>(weights.data));
    dnnl::reorder reorder(stored, made.memory);
    run_primitive(reorder, stream, {{DNNL_ARG_FROM, stored}, {DNNL_ARG_TO, made.memory}});
    const dnnl_memory_desc_t& d = made.desc.data;
    if (d.format_kind == dnnl_blocked && d.ndims == 2) {
      made.input_offsets.resize(static_cast<size_t>(weights.cols));
      for (int64_t kk = 0; kk < weights.cols; ++kk) made.input_offsets[kk] = blocked_offset(d, kk, 0) - d.offset0;
    }
  });
}

// 128 * the sum of each int8 weight row (s32 [n]): what the few-row kernel subtracts for its
// u8 x. Made once per weight matrix, shared by the 16 row counts planned for it.
std::shared_ptr<PackedWeights> CpuEngine::Impl::row_shift_sums(const WeightMatrix& weights) {
  const dnnl::memory::desc desc({weights.rows}, DataType::s32, dnnl::memory::format_tag::a);
  return shared_copy(weights, desc, [&](PackedWeights& made) {
    const auto* w = static_cast<const int8_t*>(weights.data);
    auto* sums = static_cast<int32_t*>(made.memory.get_data_handle());
    for (int64_t r = 0; r < weights.rows; ++r) {
      int32_t sum = 0;
      for (int64_t c = 0; c < weights.cols; ++c) sum += w[r * weights.cols + c];
      sums[r] = 128 * sum;
    }
  });
}

// f32 weights in panels of 16 rows (f32_panel_products_avx2): for each k, the 16 rows' values;
// the last panel padded with zero rows.
std::shared_ptr<PackedWeights> CpuEngine::Impl::f32_panels(const WeightMatrix& weights) {
  const int64_t n = weights.rows, k = weights.cols, padded_n = padded_to_panels(n);
  const dnnl::memory::desc desc({padded_n * k}, DataType::f32, dnnl::memory::format_tag::a);
  return shared_copy(weights, desc, [&](PackedWeights& made) {
    const auto* from = static_cast<const float*>(weights.data);
    auto* to = static_cast<float*>(made.memory.get_data_handle());
    std::fill(to, to + padded_n * k, 0.0f);
    for (int64_t r = 0; r < n; ++r) {
      float* panel = to + r / kPanelColumns * kPanelColumns * k;
      for (int64_t c = 0; c < k; ++c) panel[c * kPanelColumns + r % kPanelColumns] = from[r * k + c];
    }
  });
}

// int8_panels()'s description of its copy of `weights`.
namespace {
dnnl::memory::desc int8_panels_desc(const WeightMatrix& weights) {
  const int64_t padded_n = padded_to_panels(weights.rows);
  return dnnl::memory::desc({padded_n / kPanelColumns * panel_bytes(weights.cols) + padded_n * 4}, DataType::s8,
                            dnnl::memory::format_tag::a);
}
}  // namespace

// The weights in the panel layout (panel_bytes), followed by each padded row's 128 * sum(w)
// (s32); row_scales padded with zeros. The panel kernels read it: int8_panel_products_avx2
// and int8_panel_products_512 without VNNI the 7-bit copy (seven_bits), with VNNI the stored
// values. (One process makes one kind, fixed by cpu_isa(), so the two never meet in `packed`.)
std::shared_ptr<PackedWeights> CpuEngine::Impl::int8_panels(const WeightMatrix& weights, bool seven_bits) {
  if (weights.layout != WeightLayout::rows && weights.layout != WeightLayout::seven_bit_rows)
    throw Error("int8_panels: the weights are not in rows");
  const int64_t n = weights.rows, k = weights.cols, padded_n = padded_to_panels(n);
  const int64_t panels_size = padded_n / kPanelColumns * panel_bytes(k);
  return shared_copy(weights, int8_panels_desc(weights), [&](PackedWeights& made) {
    auto* to = static_cast<int8_t*>(made.memory.get_data_handle());
    pack_int8_panels(static_cast<const int8_t*>(weights.data), k, nullptr, n, seven_bits, to,
                     reinterpret_cast<int32_t*>(to + panels_size), 1);
    made.row_scales.assign(padded_n, 0.0f);
    const float scale_factor = seven_bits ? 2.0f : 1.0f;  // a 7-bit value is half the stored
    for (int64_t r = 0; r < n; ++r) made.row_scales[r] = scale_factor * weights.row_scales[r];
  });
}

std::shared_ptr<PackedWeights> CpuEngine::Impl::existing_int8_panels(const WeightMatrix& weights) {
  const dnnl::memory::desc desc = int8_panels_desc(weights);
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& entry : packed) {
    std::shared_ptr<PackedWeights> existing = entry.lock();
    if (existing && existing->source == weights.data && existing->n == weights.rows && existing->k == weights.cols &&
        existing->desc == desc)
      return existing;
  }
  return nullptr;
}

std::shared_ptr<PackedWeights> CpuEngine::Impl::int8_panel_sums(const WeightMatrix& weights) {
  const int64_t n = weights.rows, k = weights.cols, padded_n = padded_to_panels(n);
  const dnnl::memory::desc desc({padded_n, 1}, DataType::s32, dnnl::memory::format_tag::ab);
  return shared_copy(weights, desc, [&](PackedWeights& made) {
    const auto* panels = static_cast<const int8_t*>(weights.data);
    auto* sums = static_cast<int32_t*>(made.memory.get_data_handle());
    std::fill(sums, sums + padded_n, 0);
    for (int64_t r = 0; r < n; ++r) {
      int32_t sum = 0;
      for (int64_t c = 0; c < k; ++c) sum += panels[panel_index(DType::int8, r, c, k)];
      sums[r] = 128 * sum;
    }
    made.row_scales.assign(padded_n, 0.0f);
    std::copy(weights.row_scales, weights.row_scales + n, made.row_scales.begin());
  });
}

std::shared_ptr<PackedWeights> CpuEngine::Impl::seven_bit_copy(const WeightMatrix& weights) {
  const auto desc = stored_weights_desc(weights.rows, weights.cols, DataType::s8);
  return shared_copy(weights, desc, [&](PackedWeights& made) {
    const auto* from = static_cast<const int8_t*>(weights.data);
    auto* to = static_cast<int8_t*>(made.memory.get_data_handle());
    const int64_t count = weights.rows * weights.cols;
    for (int64_t i = 0; i < count; ++i) to[i] = to_seven_bits(from[i]);
    made.row_scales.assign(weights.row_scales, weights.row_scales + weights.rows);
    for (float& scale : made.row_scales) scale *= 2.0f;
  });
}

CpuEngine::CpuEngine(int threads) : threads_(std::max(1, threads)), impl_(new Impl) {
  for (int t = 1; t < threads_; ++t) impl_->worker_streams.emplace_back(impl_->engine);
}
CpuEngine::~CpuEngine() = default;
dnnl::engine& CpuEngine::engine() { return impl_->engine; }
dnnl::stream& CpuEngine::stream() { return impl_->stream; }
void CpuEngine::set_weight_packing(bool enabled) { impl_->pack_weights = enabled; }
bool CpuEngine::weight_packing() const { return impl_->pack_weights; }

size_t CpuEngine::packed_weight_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  size_t bytes = 0;
  for (const auto& entry : impl_->packed) {
    if (auto alive = entry.lock()) bytes += alive->desc.get_size();
  }
  return bytes;
}


void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  dnnl_status_t status;
  {
    const ProcessLibraryCallScope scope;  // oneDNN's OpenMP workers allocate too
    status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, alpha, a, lda, b,
                        ldb, beta, c, ldc);
  }
  if (status != dnnl_success) {
    throw Error("gemm: dnnl_sgemm failed (status " + std::to_string(static_cast<int>(status)) +
                ") for m " + std::to_string(m) + ", n " + std::to_string(n) + ", k " +
                std::to_string(k));
  }
}

struct Bf16Gemm::Impl {
  struct Shape {
    bool transpose_a, transpose_b;
    int64_t m, n, k, ldc;
    float alpha, beta;
    bool operator==(const Shape& o) const {
      return transpose_a == o.transpose_a && transpose_b == o.transpose_b && m == o.m &&
             n == o.n && k == o.k && ldc == o.ldc && alpha == o.alpha && beta == o.beta;
    }
  };
  struct ShapeHash {
    size_t operator()(const Shape& s) const {
      size_t h = std::hash<int64_t>()(s.m);
      for (int64_t v : {s.n, s.k, s.ldc}) h = h * 1000003u ^ std::hash<int64_t>()(v);
      for (float v : {s.alpha, s.beta}) h = h * 1000003u ^ std::hash<float>()(v);
      return h * 4 + (s.transpose_a ? 2 : 0) + (s.transpose_b ? 1 : 0);
    }
  };
  // Enough for every batch shape of a training run; past it the cache starts over.
  static constexpr size_t kMaxPrimitives = 4096;

  int threads = 1;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<uint16_t> a, b;  // bf16 copies of this product's A and B, compact
  struct Product {
    dnnl::matmul primitive;
    dnnl::memory::desc a, b, c;
  };
  std::unordered_map<Shape, Product, ShapeHash> products;
  std::string implementation;

  const Product& product(const Shape& s) {
    auto found = products.find(s);
    if (found != products.end()) return found->second;
    if (products.size() >= kMaxPrimitives) products.clear();
    // A [m, k] and B [k, n] as the compact copies lay them out: a transposed operand is a
    // column-major view of its stored rows.
    using Desc = dnnl::memory::desc;
    const Desc a_desc = s.transpose_a ? Desc({s.m, s.k}, DataType::bf16, {1, s.m})
                                      : Desc({s.m, s.k}, DataType::bf16, {s.k, 1});
    const Desc b_desc = s.transpose_b ? Desc({s.k, s.n}, DataType::bf16, {1, s.k})
                                      : Desc({s.k, s.n}, DataType::bf16, {s.n, 1});
    const Desc c_desc({s.m, s.n}, DataType::f32, {s.ldc, 1});
    dnnl::primitive_attr attr;
    if (s.alpha != 1.0f) attr.set_output_scales(0, {s.alpha});
    if (s.beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(s.beta);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), attr, engine);
    implementation = pd.impl_info_str();
    return products.emplace(s, Product{dnnl::matmul(pd), a_desc, b_desc, c_desc}).first->second;
  }
};

Bf16Gemm::Bf16Gemm(int threads) : impl_(new Impl) {
  if (!bf16_products_in_hardware()) {
    throw Error("bf16 matrix products need a CPU with AVX512-BF16 or AMX (oneDNN found neither)");
  }
  impl_->threads = std::max(1, threads);
}

Bf16Gemm::~Bf16Gemm() = default;

const char* Bf16Gemm::implementation() const { return impl_->implementation.c_str(); }

void Bf16Gemm::run(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  Impl& s = *impl_;
  if (k == 0) {  // no products: C = beta C
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  // Stored shapes: A is [m, k] or, transposed, [k, m]; B is [k, n] or, transposed, [n, k].
  const int64_t a_rows = transpose_a ? k : m, a_cols = transpose_a ? m : k;
  const int64_t b_rows = transpose_b ? n : k, b_cols = transpose_b ? k : n;
  if (s.a.size() < static_cast<size_t>(m * k)) s.a.resize(m * k);
  if (s.b.size() < static_cast<size_t>(k * n)) s.b.resize(k * n);
  round_rows_to_bf16(a, a_rows, a_cols, lda, s.a.data(), s.threads);
  round_rows_to_bf16(b, b_rows, b_cols, ldb, s.b.data(), s.threads);
  // As StaticMatmul: oneDNN sizes its parallel regions by the calling thread's OpenMP count.
  if (omp_get_max_threads() != s.threads) omp_set_num_threads(s.threads);
  try {
    const Impl::Product& product =
        s.product({transpose_a, transpose_b, m, n, k, ldc, alpha, beta});
    dnnl::memory a_memory(product.a, s.engine, s.a.data());
    dnnl::memory b_memory(product.b, s.engine, s.b.data());
    dnnl::memory c_memory(product.c, s.engine, c);
    run_primitive(product.primitive, s.stream,
                  {{DNNL_ARG_SRC, a_memory},
                   {DNNL_ARG_WEIGHTS, b_memory},
                   {DNNL_ARG_DST, c_memory}});
  } catch (const dnnl::error& e) {
    throw Error("bf16 gemm: oneDNN failed (" + std::string(e.what()) + ") for m " +
                std::to_string(m) + ", n " + std::to_string(n) + ", k " + std::to_string(k));
  }
}

void run_primitive(const dnnl::primitive& primitive, dnnl::stream& stream,
                   const std::unordered_map<int, dnnl::memory>& args) {
  const ProcessLibraryCallScope scope;
  primitive.execute(stream, args);
  stream.wait();
}


}  // namespace xf::cpu

// ---- The trainer's products (float: gemm() or Bf16Gemm; double: plain loops) ----
namespace xf::cpu {
namespace {

// C[M, N] = alpha * op(A) op(B) + beta * C, row-major.
template <typename T>
void general_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, T alpha,
                  const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc,
                  int threads, Bf16Gemm* bf16) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    // oneDNN runs on the OpenMP pool the caller sized (Bf16Gemm: at its own thread count).
    if (bf16) bf16->run(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else xf::cpu::gemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    if (bf16) throw Error("gemm: bf16 products are for float");
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        T sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          const T av = transpose_a ? a[p * lda + i] : a[i * lda + p];
          const T bv = transpose_b ? b[j * ldb + p] : b[p * ldb + j];
          sum += av * bv;
        }
        c[i * ldc + j] = alpha * sum + (beta == T(0) ? T(0) : beta * c[i * ldc + j]);
      }
    }
  }
}

}  // namespace

template <typename T>
void linear_forward(const T* x, const T* weight, const T* bias, int64_t rows, int64_t in,
                    int64_t out, T* y, int threads, Bf16Gemm* bf16) {
  // The bias is written first and the product added onto it (beta = 1): one pass over y.
  T beta = 0;
  if (bias) {
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
    for (int64_t r = 0; r < rows; ++r) std::copy(bias, bias + out, y + r * out);
    beta = 1;
  }
  general_gemm<T>(false, true, rows, out, in, T(1), x, in, weight, in, beta, y, out, threads, bf16);
}

template <typename T>
void linear_backward(const T* dy, const T* x, const T* weight, int64_t rows, int64_t in,
                     int64_t out, T* dx, bool accumulate_dx, T* dweight, T* dbias, int threads,
                     Bf16Gemm* bf16) {
  if (dx)  // dx[rows, in] = dy[rows, out] W[out, in]
    general_gemm<T>(false, false, rows, in, out, T(1), dy, out, weight, in, accumulate_dx ? T(1) : T(0),
            dx, in, threads, bf16);
  // dW[out, in] += dy^T[out, rows] x[rows, in]
  general_gemm<T>(true, false, out, in, rows, T(1), dy, out, x, in, T(1), dweight, in, threads, bf16);
  if (dbias) bias_backward(dy, rows, out, dbias, threads);
}

#define XF_INSTANTIATE(T) \
  template void linear_forward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*, \
                                  int, Bf16Gemm*); \
  template void linear_backward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*, \
                                   bool, T*, T*, int, Bf16Gemm*);
XF_INSTANTIATE(float)
XF_INSTANTIATE(double)

}  // namespace xf::cpu
