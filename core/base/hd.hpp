// Marks functions shared by the CPU loops and the CUDA kernels: written once, compiled for both.
#pragma once

#if defined(__CUDACC__)
#define SL_HD __host__ __device__ __forceinline__
#else
#define SL_HD inline
#endif
