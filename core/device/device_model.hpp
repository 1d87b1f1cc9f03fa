// The device model: how long a GPU of a ClusterSpec takes for a GEMM, a memory-bound kernel and a
// host copy (docs/simulate.md, "The cost model"). Pure arithmetic on the spec; the MetaDevice
// charges these to its virtual clock.
#pragma once

#include <cstdint>

#include "core/device/cluster_spec.hpp"

namespace shardlab {

// The fraction of peak a GEMM of this shape reaches: gemm_efficiency x s(M) s(N) s(K) with
// s(d) = d / (d + gemm_half_dim): small dimensions leave the tensor cores idle.
double gemm_efficiency(const CostModel& c, int64_t M, int64_t N, int64_t K);
// `batch` GEMMs (M,N,K) in one launch: the launch cost, plus the larger of the arithmetic time at
// the shape's efficiency and the time to stream A, B and C (read and write) at the memory's
// bandwidth (at the spec's "copy" efficiency where it has one, else memory_efficiency). Operands
// are 4 bytes for fp32 and tf32, 2 for bf16.
int64_t gemm_ns(const ClusterSpec& s, GemmMath m, int64_t M, int64_t N, int64_t K,
                int64_t batch = 1);
// The same with the operands' element sizes given: A and B of `ab_bytes`, C of `c_bytes` (a
// GEMM with bf16 inputs and an fp32 C streams 2 + 2 + 2 x 4 bytes per element triple).
int64_t gemm_ns(const ClusterSpec& s, GemmMath m, int64_t M, int64_t N, int64_t K, int64_t batch,
                int ab_bytes, int c_bytes);
// A fused kernel that does `flops` of GEMM-like arithmetic at `m` and moves `bytes` (flash
// attention): launch + the larger of the arithmetic at the peak times `efficiency` and the bytes
// at the memory bandwidth (memory_efficiency).
int64_t fused_ns(const ClusterSpec& s, GemmMath m, double flops, double efficiency, int64_t bytes);
// An element-wise or row kernel moving `bytes` (reads plus writes): launch + bytes over the
// memory bandwidth at the kernel's efficiency (cost.kernel_efficiency[kernel] when the spec has
// one, else memory_efficiency).
int64_t memory_ns(const ClusterSpec& s, int64_t bytes, const char* kernel = nullptr);
// A copy between host and device: latency + bytes over the host link.
int64_t host_copy_ns(const ClusterSpec& s, int64_t bytes);
// A kernel of the host tier (--offload: the optimizer step on the host, casts, host-to-host
// copies) moving `bytes`: bytes over the host's memory bandwidth at memory_efficiency, no launch
// cost. Host loops are memory-bound (AdamW moves 28 bytes per 10 FLOPs), so no FLOP term.
int64_t host_memory_ns(const ClusterSpec& s, int64_t bytes);

}  // namespace shardlab
