// GEMMs with 16-bit inputs on the CPU: CpuDevice::gemm_ex (device.hpp), as cublasGemmEx does them
// with CUBLAS_COMPUTE_32F: bf16 or f16 A and B, products and sums in fp32, C in fp32 or rounded
// once to the inputs' dtype.
//
// How: blocks of A and B widened to fp32 (exact: every bf16 and f16 value is an fp32 value) into a
// bounded scratch, then OpenBLAS sgemm on the blocks. The product of two 16-bit values is exact in
// fp32, so this is "16-bit inputs, fp32 accumulation" on any x86-64 CPU, at the fp32 FMA rate.
// What else was measured on this project's host, an AMD EPYC VM exposing AVX2 and F16C but no
// AVX-512 (docs/model.md, "Mixed precision on the CPU"): Debian 12's OpenBLAS 0.3.21 has no
// sbgemm, and oneDNN 2.6's bf16 matmul refuses a CPU without AVX-512 ("could not create a
// primitive descriptor"), so neither can run a bf16 GEMM here. A vdpbf16ps kernel (AVX512_BF16)
// would be the faster path where the CPU has it; it is not built, since no machine of the project
// can run it, and cpu_gemm_path_name says so on a CPU that has the instructions.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/dtype.hpp"

namespace shardlab {

// What runs a GEMM with `ab` inputs on this CPU, in words with the reason: "bf16 widened to fp32,
// OpenBLAS sgemm (this CPU has no AVX512_BF16)".
std::string cpu_gemm_path_name(DType ab);
// Whether this CPU has AVX512_BF16 (vdpbf16ps) with AVX512F.
bool cpu_has_avx512_bf16();

// Row-major C(M,N) = alpha op(A) op(B) + beta C, A/B in `ab`, C in `c` (f32 or ab); lda/ldb/ldc
// are row strides as stored. CpuDevice::gemm_ex calls it.
void cpu_gemm_ex(bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int lda,
                 const void* B, int ldb, DType ab, float beta, void* C, int ldc, DType c);

// n 16-bit values of type t (bf16 or f16) widened to fp32, exactly; F16C where the CPU has it.
void widen_to_f32(float* dst, const void* src, DType t, int64_t n);

}  // namespace shardlab
