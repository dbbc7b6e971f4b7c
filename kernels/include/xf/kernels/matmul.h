#pragma once
// Matrix products: y = x W^T for the runtime, and the trainer's general products with their
// backward. The CPU multiplies through oneDNN, CUDA through cuBLAS; all matrices are row-major,
// W as stored in the model file (one row per output feature).
//
// CPU: the runtime uses StaticMatmul: one oneDNN primitive per static shape, made at plan time,
// executed with a user scratchpad (DESIGN.md: runtime-dim primitives and dnnl_sgemm allocate on
// every call). Every execute goes through run_primitive() so a test can count oneDNN's own
// bookkeeping allocations apart from ours.
// The trainer, whose shapes change with every batch, uses gemm().
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "xf/kernels/types.h"

namespace dnnl {
struct engine;
struct stream;
struct primitive;
struct memory;
}  // namespace dnnl

namespace xf::cpu {

// One CPU engine and stream for a Translator or trainer. `threads`: the OpenMP thread count for
// StaticMatmul::run (the kernels take theirs as an argument; pass the same).
class CpuEngine {
 public:
  explicit CpuEngine(int threads);
  ~CpuEngine();
  int threads() const { return threads_; }
  dnnl::engine& engine();
  dnnl::stream& stream();

  // f32 weights are reordered once into oneDNN's packed layout (3-4x faster at M = 1..4 than
  // the stored row-major layout, docs/KERNELS_CPU.md) and the copy is shared by every
  // StaticMatmul of this engine over the same weights (keyed by address and shape: the weights
  // must not change while the engine lives, as with an mmapped model). The copy costs memory
  // as large as the f32 weights (the runtime releases the stored pages it replaces). Off: oneDNN reads the stored matrix in place (no copy, slower).
  // Affects StaticMatmuls made afterwards.
  void set_weight_packing(bool enabled);
  bool weight_packing() const;
  // Bytes held beside the weights (for memory reports): packed copies, 7-bit copies and the
  // int8 few-row kernel's row sums, each shared by every StaticMatmul of the same weights.
  size_t packed_weight_bytes() const;

 private:
  friend class StaticMatmul;  // shares packed weight copies through Impl
  int threads_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// y[M, N] = x[M, K] W[N, K]^T (+ bias[N]), for one fixed M. The constructor and run() set the
// calling thread's OpenMP thread count to the engine's (see run()). f32 weights use an f32 primitive;
// int8 weights quantize x per row (dynamic absmax, one scale per token) into a workspace, run
// an s8 x s8 primitive whose output scales are the row scales of W, and apply x's row scales
// and the bias in an epilogue (scale_rows_add_bias): row i of y depends on row i of x only.
// f16 / bf16 weights are not supported here (the converter widens them for the CPU, or the
// Translator does once at load).
class StaticMatmul {
 public:
  StaticMatmul(CpuEngine& engine, int64_t m, const WeightMatrix& weights, bool with_bias);
  ~StaticMatmul();
  StaticMatmul(StaticMatmul&&) noexcept;
  StaticMatmul& operator=(StaticMatmul&&) noexcept;

  int64_t m() const;
  int64_t n() const;
  int64_t k() const;
  // Bytes of caller-provided memory run() needs (oneDNN scratchpad plus int8 staging).
  size_t workspace_bytes() const;
  // x: [m, k], y: [m, n], bias: [n] (ignored unless made with_bias; then required).
  // workspace: workspace_bytes() bytes, 64-byte aligned. No allocation by xf inside.
  // rows (1..m; 0, the default: m): the rows of x that matter. xf's kernels compute those alone (the
  // rest of y is left as it is); oneDNN's primitives, made for m, compute all m.
  // Not reentrant: one run() at a time per StaticMatmul (it points its prepared oneDNN memory
  // objects at the caller's buffers). Sets the calling thread's OpenMP thread count to the
  // engine's (omp_set_num_threads), which oneDNN follows: pass the same count as `threads` to
  // the kernels, or libgomp reallocates its thread team whenever the size changes.
  void run(const float* x, const float* bias, float* y, void* workspace, int64_t rows = 0) const;
  // True when run() reads the WeightMatrix it was made with (int8, or f32 in the stored layout);
  // false when it reads a packed copy, so the caller may release the stored bytes.
  bool reads_weights_in_place() const;
  // True when run() reads an f32 copy of the weights: xf's panels (xf:f32_panels_avx2; or the
  // model file's panels, read in place), or oneDNN's packed copy in a blocked layout (AVX-512's
  // brgemm). A table tied to the output layer then reads its rows from that copy
  // (copy_weight_row; embed() over a StaticMatmul) and its stored bytes need not stay resident
  // beside it.
  bool holds_f32_weight_rows() const;
  // Columns [first, first + count) of weight row `row`, from that copy, into out (the values of
  // the WeightMatrix it was made with). An Error where holds_f32_weight_rows() is false.
  void copy_weight_row(int64_t row, int64_t first, int64_t count, float* out) const;
  // oneDNN's implementation name (e.g. "brg:avx512_core"), for benchmarks and logs.
  const char* implementation() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  void make_onednn_slices(const WeightMatrix& weights);
};

// y[rows, N] = x[rows, K] W^T for an x that is mostly exact zeros, a ReLU's output (the FFN's
// second product: 91.6% of the bundled model's hidden values are 0). A row with at most K/4
// nonzeros adds W's columns for those alone; the others run together in register tiles (6 rows
// at AVX-512, 3 at AVX2) over all of W, as a dense product. Either way each output is the sum of its terms in the order of k, one fused
// multiply-add each from 0, and a zero term leaves it as it is: a row's result depends on that
// row alone, not on its batch, its neighbours' density or the thread count. (Its last bits differ
// from StaticMatmul's, whose f32 products add in other orders.) Holds a transposed copy of W
// [K, N] (as many bytes as W; W's own bytes are not read after the constructor). At AVX2 and
// AVX-512 on x86-64 only: available() says whether it can take these weights here.
class SparseInputMatmul {
 public:
  // f32 weights in rows, N a multiple of 64 and K of 16, at AVX2 or AVX-512 (cpu_isa()).
  static bool available(const WeightMatrix& weights);
  SparseInputMatmul(const WeightMatrix& weights, int threads);
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  // Bytes of caller-provided memory run() needs (each thread's list of a row's nonzeros).
  size_t workspace_bytes() const;
  // x: [rows, K], y: [rows, N]; workspace: workspace_bytes() bytes. No allocation.
  void run(const float* x, float* y, int64_t rows, void* workspace) const;

 private:
  int64_t n_ = 0, k_ = 0;
  int threads_ = 1;
  std::unique_ptr<float, void (*)(void*)> transposed_{nullptr, std::free};  // W^T [K, N], 64-byte aligned
};

// The output layer over a lexical shortlist's rows (the runtime, per batch then per step; any
// count, without allocating: the shortlist changes with every batch, which static oneDNN
// primitives cannot follow). gather_weight_rows copies rows ids[0..count) of W into `gathered`
// (gathered_rows_bytes(W, count) bytes), and gathered_rows_product computes y[rows, count] =
// x[rows, k] . those rows^T (+ bias[count], may be null); workspace: gathered_product_workspace_
// bytes(W, rows). Int8 W where xf has an int8 kernel (x86-64 and aarch64 with GCC or Clang): the
// rows as StaticMatmul's int8 product reads them (panels or rows, the 7-bit copy where it reads
// one) and its kernel, x quantized per row as it quantizes it, so that each logit is the whole
// product's, bit for bit, at a fraction of its cost. Else (f32, or no int8 kernel) f32 rows (int8
// times its row scales) and f32 dot products.
size_t gathered_rows_bytes(const WeightMatrix& w, int64_t count);
void gather_weight_rows(const WeightMatrix& w, const int32_t* ids, int64_t count, void* gathered, int threads);
size_t gathered_product_workspace_bytes(const WeightMatrix& w, int64_t rows);
// Where each row reads only some of the columns (a batch's sentences, each over its own
// selection): row r computes the column runs of its list, the [begin, end) pairs
// runs[2 * run_offsets[row_lists[r]] .. 2 * run_offsets[row_lists[r] + 1]), each begin a multiple of
// kPanelRows (xf/weight_layout.h); the other columns are left as they were, except where the
// int8 row kernel runs (no panel kernel: AVX-VNNI, NEON), which computes them all. A column
// computed is the same either way, bit for bit.
struct GatheredColumnRuns {
  const int32_t* row_lists = nullptr;
  const int32_t* run_offsets = nullptr;
  const int32_t* runs = nullptr;
};
void gathered_rows_product(const WeightMatrix& w, const float* x, const void* gathered, const float* bias,
                           int64_t rows, int64_t count, float* y, void* workspace, int threads,
                           const GatheredColumnRuns* column_runs = nullptr);

// Marian's intgemm8 arithmetic, for an imported Marian int8 model whose outputs must be
// Marian's own (the model's int8.arithmetic metadata, xf/model.h): y[rows, N] = x W^T (+ bias)
// as marian-nmt's intgemm8 path computes it with one of intgemm's Int8 kernels, which Marian
// picks by the CPU it runs on. x is quantized with ONE multiplier for all `rows` rows,
// q = 127 / max|x| (Marian's per-product scale: a row's result depends on the others),
// nearbyint(x q) clipped to +-127; the pair products (vpmaddubsw of |x| and W signed by x) are
// summed as `kernel` sums them: avx2 in 16 int16 lanes over each 32-value chunk of the inner
// dimension with saturation (vpaddsw), avx512bw likewise in 32 lanes over 64-value chunks,
// avx512vnni exactly in int32; then sum x (1 / (q x q_w)) + bias, q_w = 1 / the weight row's
// scale. W: int8 rows. intgemm's instructions at AVX2 and above, the same sums written out in
// C++ below: the same results at every ISA level and thread count; workspace:
// marian_int8_workspace_bytes(rows, K), 64-byte aligned. No allocation.
enum class IntgemmKernel { avx2, avx512bw, avx512vnni };
size_t marian_int8_workspace_bytes(int64_t rows, int64_t k);
void marian_int8_product(const WeightMatrix& w, const float* x, int64_t rows, const float* bias, float* y,
                         void* workspace, int threads, IntgemmKernel kernel);

// C[M, N] = alpha * op(A) op(B) + beta * C, row-major, op = transpose when the flag is set.
// For the trainer (dnnl_sgemm; allocates inside oneDNN, so never on the runtime's hot path).
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc);

// True where oneDNN multiplies bf16 matrices in hardware (AVX512-BF16 or AMX): there Bf16Gemm is
// faster than gemm(); elsewhere oneDNN emulates bf16 (slower than f32) or refuses it (AVX2).
bool bf16_products_in_hardware();

// The trainer's bf16 matrix products (xf-train --bf16): gemm()'s C = alpha op(A) op(B) + beta C
// with A and B rounded to bf16 (float_to_bfloat16, xf/dtype.h) and their
// products summed in f32 into an f32 C.
// Keeps the bf16 copies of A and B and one oneDNN primitive per shape (a trainer's shapes repeat
// from batch to batch), so it allocates while those grow: never on the runtime's path.
// Throws unless bf16_products_in_hardware().
class Bf16Gemm {
 public:
  explicit Bf16Gemm(int threads);
  ~Bf16Gemm();
  void run(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc);
  // oneDNN's implementation of the last product (e.g. "brg:avx512_core_amx_bf16"), for logs.
  const char* implementation() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True where oneDNN's int8 products add pairs in saturating int16 (CPUs without VNNI). There
// StaticMatmul reads int8 weights from a 7-bit copy: each value to_seven_bits(), its row's
// scale doubled (made once per weight matrix, shared like packed f32 copies).
bool int8_products_saturate();
int8_t to_seven_bits(int8_t value);
// The largest |q| of x's quantization in StaticMatmul's int8 products at cpu_isa() (the
// max_level of quantize_int8_per_row): 63 at plain AVX2, whose kernel adds two groups' pair
// products in int16 before widening them (7-bit x by 7-bit weights cannot overflow there: a
// quarter fewer multiply instructions), 127 elsewhere.
int int8_x_max_level();

// Weight layouts (xf/weight_layout.h; the model file's, version 4). reads_layout_in_place: whether
// StaticMatmul at cpu_isa() reads a `dtype` matrix in `layout` where it lies, for every row
// count, with the results of the row layout at this level bit for bit (rows and 7-bit rows
// always; int8 panels with AVX-512 VNNI; int8 7-bit panels at AVX2 and AVX-512 with or without
// VNNI; f32 panels at AVX2 and AVX-VNNI). Elsewhere the caller gives rows (unpack_panels).
// kernel_weight_layout: the layout that StaticMatmul at cpu_isa() reads without a copy of its
// own, what `xf-convert --layout panels` writes: int8 panels (AVX-512 VNNI), 7-bit panels
// (AVX-512 without VNNI, AVX2), 7-bit rows (oneDNN where its int8 products saturate: SSE4.1,
// AVX), rows (AVX-VNNI, aarch64); f32 panels (AVX2, AVX-VNNI), rows (oneDNN's packed copy).
bool reads_layout_in_place(DType dtype, WeightLayout layout);
WeightLayout kernel_weight_layout(DType dtype);

// True where an int8 StaticMatmul of few rows (translating one sentence: the decoder's
// step, the encoder) runs xf's own kernel instead of oneDNN: oneDNN 2.6 repacks the weights on
// every such call. Its results are bit for bit oneDNN's. int8_row_kernel_name() is its
// implementation() at cpu_isa() (xf/kernels_cpu/isa.h): "xf:int8_row_avx512_vnni",
// "xf:int8_row_avx2_vnni" (AVX-VNNI), "xf:int8_row_avx2" (AVX-512 without VNNI) or
// "xf:int8_panels_avx2" (AVX2: the 7-bit weights in panels made at plan time), null where there
// is none. (f32 products at AVX2 and AVX-VNNI are xf's too: "xf:f32_panels_avx2".)
bool int8_row_kernel_available();
const char* int8_row_kernel_name();
// The most rows of an int8 product it serves: 16 with AVX-512, every count at AVX2, AVX-VNNI and
// on aarch64 (there oneDNN 2.6 is slower at every count the runtime plans, docs/KERNELS_CPU.md).
int64_t int8_row_kernel_max_rows();

// The ISA oneDNN runs at ("avx2", "avx512_core_vnni", ...): the CPU's, capped by
// ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA.
const char* onednn_isa_name();

// How many StaticMatmuls (and SparseInputMatmuls) this process made, by implementation: xf's
// kernels by their names ("xf:int8_panels_avx2", "xf:sparse_input_avx512"), oneDNN's as
// "onednn:NAME @ISA" ("onednn:gemm:jit @avx512_core_vnni").
// For benchmarks and logs: shows what the ISA cap chose for every product.
std::vector<std::pair<std::string, int64_t>> matmul_implementations();

// Executes a oneDNN primitive and waits for it. The single place xf calls execute() from, marked
// as a library call (xf/library_call.h) so that an allocation counter attributes what happens
// inside it to oneDNN. args: prepared at plan time (memory objects made once, their data
// handles re-pointed before each call).
void run_primitive(const dnnl::primitive& primitive, dnnl::stream& stream,
                   const std::unordered_map<int, dnnl::memory>& args);

// ---- The trainer's products, templated on the scalar type like its other kernels ----

// y = x W^T (+ bias).                          x: [rows, in]; weight: [out, in]; y: [rows, out]
// float: oneDNN sgemm, or bf16 products through `bf16` when given (xf-train --bf16); double:
// plain loops, `bf16` must be null.
template <typename T>
void linear_forward(const T* x, const T* weight, const T* bias, int64_t rows, int64_t in,
                    int64_t out, T* y, int threads, Bf16Gemm* bf16 = nullptr);

// Backward of y = x W^T + b: dweight += dy^T x; dbias += column sums of dy (dbias may be null);
// dx = dy W (or dx += dy W when accumulate_dx; dx may be null).
template <typename T>
void linear_backward(const T* dy, const T* x, const T* weight, int64_t rows, int64_t in,
                     int64_t out, T* dx, bool accumulate_dx, T* dweight, T* dbias, int threads,
                     Bf16Gemm* bf16 = nullptr);

}  // namespace xf::cpu

// CUDA: f32 products take f32 inputs with f32 accumulation (no TF32); f16 products take f16
// inputs with f32 accumulation and an f16 or f32 output. The caller owns the handle, the stream
// and a fixed workspace (DESIGN.md: cuBLAS gets a fixed workspace, so nothing allocates while
// translating). All pointers on the device.
namespace xf::cuda {

// What cuBLAS recommends per GPU for its workspace: 32 MiB on Hopper (sm 90) and newer, 4 MiB
// below. Used to size the caller's workspace when a Translator is built.
size_t recommended_cublas_workspace_bytes(int device);

// Puts `handle` on `stream` with the caller's workspace. Call once when the Translator is built
// (cublasSetStream resets the workspace to cuBLAS's own pool, so this sets the stream first).
// workspace: device memory of workspace_bytes, 256-byte aligned, alive as long as the handle.
void bind_cublas_handle(cublasHandle_t handle, cudaStream_t stream, void* workspace,
                        size_t workspace_bytes);

// y = x W^T with cublasGemmEx on the handle's stream and workspace.  x: [m, k], w: [n, k], y: [m, n]
void matmul(cublasHandle_t handle, const float* x, const float* w, float* y, int64_t m,
            int64_t n, int64_t k);
void matmul(cublasHandle_t handle, const half* x, const half* w, half* y, int64_t m,
            int64_t n, int64_t k);
// f16 inputs, f32 output: the output projection, whose logits feed log_softmax_top_k in f32.
void matmul(cublasHandle_t handle, const half* x, const half* w, float* y, int64_t m,
            int64_t n, int64_t k);

// The trainer's products: C[m, n] = alpha * op(A) op(B) + beta * C, C f32, on the handle's stream
// and workspace. op(A) is [m, k] (A stored [k, m] when transpose_a), op(B) is [k, n] (B stored
// [n, k] when transpose_b); lda, ldb, ldc are row strides in elements. f16 inputs: the
// mixed-precision trainer's low-precision copies. Their backward is products of the same kind.
void gemm(cublasHandle_t handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
          int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc);
void gemm(cublasHandle_t handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
          int64_t k, float alpha, const half* a, int64_t lda, const half* b, int64_t ldb,
          float beta, float* c, int64_t ldc);

}  // namespace xf::cuda
