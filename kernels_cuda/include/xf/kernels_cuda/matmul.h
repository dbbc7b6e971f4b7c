#pragma once
// Matrix products y[M, N] = x[M, K] W[N, K]^T through cuBLAS, row-major
// as everywhere in xf (W as stored in the model file: one row per output feature).
// f32: f32 inputs, f32 accumulation (no TF32). f16: f16 inputs, f32 accumulation, f16 or f32
// output. The caller owns the handle, the stream and a fixed workspace (DESIGN.md: cuBLAS gets a
// fixed workspace, so nothing allocates while translating).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace xf::cuda {

// What cuBLAS recommends per GPU for its workspace: 32 MiB on Hopper (sm 90) and newer, 4 MiB
// below. Used to size the caller's workspace when a Translator is built.
size_t recommended_cublas_workspace_bytes(int device);

// Puts `handle` on `stream` with the caller's workspace. Call once when the Translator is built
// (cublasSetStream resets the workspace to cuBLAS's own pool, so this sets the stream first).
// workspace: device memory of workspace_bytes, 256-byte aligned, alive as long as the handle.
void bind_cublas_handle(cublasHandle_t handle, cudaStream_t stream, void* workspace,
                        size_t workspace_bytes);

// y = x W^T with cublasGemmEx on the handle's stream and workspace.
// x: [m, k], w: [n, k], y: [m, n]; all device pointers.
void matmul(cublasHandle_t handle, const float* x, const float* w, float* y, int64_t m,
            int64_t n, int64_t k);
void matmul(cublasHandle_t handle, const __half* x, const __half* w, __half* y, int64_t m,
            int64_t n, int64_t k);
// f16 inputs, f32 output: the output projection, whose logits feed log_softmax_top_k in f32.
void matmul(cublasHandle_t handle, const __half* x, const __half* w, float* y, int64_t m,
            int64_t n, int64_t k);

}  // namespace xf::cuda
