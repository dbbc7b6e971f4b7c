#pragma once
// Math written once for host and device code (the dropout hash, the SSRU cell): functions marked
// XF_HOST_DEVICE compile for both under nvcc, and as plain inline functions under g++.
#if defined(__CUDACC__)
#define XF_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define XF_HOST_DEVICE inline
#endif
