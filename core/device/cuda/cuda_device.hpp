// CudaDevice: one GPU as a shardlab Device. Memory comes from a caching, stream-ordered pool and is
// charged to the rank's tracker by category; math runs on a compute stream (cuBLAS and the CUDA
// kernels), collectives on a separate communication stream, joined by events.
//
// Stream design (docs/gpu.md has the picture):
// - compute stream: every Device call (copies, fills, GEMMs) and every kernel launcher.
// - comm stream: NCCL collectives. Before a collective, the comm stream waits on an event recorded
//   on the compute stream (inputs are ready, and memory the pool handed out again is no longer
//   read by earlier kernels); Work::wait makes the compute stream wait on the collective's event.
// - memory: a buffer freed on the host is reusable at once by later compute work (stream order);
//   if the comm stream touched it, only after an event recorded on the comm stream at free time.
// - host copies (copy_to_host) synchronize the compute stream; nothing else blocks the host.
// - copy stream (--offload): copies to and from the host tier, pinned host memory from
//   make_host_tier. A copy first waits for the compute work queued before it (its source or its
//   destination may still be in use there); a copy up then makes only its reader's stream wait
//   (compute, or comm for a shard about to be all-gathered); a copy down blocks the host until
//   its bytes have arrived, since the host reads them next.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "core/device/cuda/cuda_check.hpp"
#include "core/device/cuda/cuda_pool.hpp"
#include "core/device/device.hpp"

namespace shardlab {

class CudaDevice final : public Device {
 public:
  // Throws Error when `ordinal` is not a usable GPU. Uses the calling thread's current device
  // only inside its own calls (each call selects `ordinal` and restores the previous one).
  CudaDevice(MemoryTracker& tracker, int ordinal);
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::cuda; }
  int ordinal() const { return ordinal_; }
  const std::string& name() const { return name_; }

  void copy(void* dst, const void* src, int64_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, int64_t bytes) override;
  void copy_from_host(void* dst, const void* host_src, int64_t bytes) override;
  void fill_zero(void* dst, int64_t bytes) override;
  void synchronize() override;

  // The host tier: pinned host memory (cudaHostAlloc) charged to `host_tracker`, CPU copies,
  // GEMMs and kernels; its buffers are freed only after this GPU's copies have finished.
  std::unique_ptr<Device> make_host_tier(MemoryTracker& host_tracker) const override;
  void copy_to_host_tier(void* host_dst, const void* src, int64_t bytes) override;
  void copy_from_host_tier(void* dst, const void* host_src, int64_t bytes, ReadBy read_by) override;
  cudaStream_t copy_stream() const { return copy_; }
  // Blocks the host until every copy queued on the copy stream has finished.
  void wait_copies() const;

  // Row-major SGEMM through cuBLAS (column-major) by computing C^T = op(B)^T op(A)^T.
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) override;
  void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                    int lda, int64_t stride_a, const float* B, int ldb, int64_t stride_b,
                    float beta, float* C, int ldc, int64_t stride_c, int batch) override;

  // Mixed-precision GEMMs (cublasGemmEx, cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F): A
  // and B in `ab` (bf16, f16 or f32), C in `c` (f32 or the same as `ab`), accumulation in f32.
  // Same row-major conventions as gemm.
  void gemm_ex(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A, int lda,
               const void* B, int ldb, DType ab, float beta, void* C, int ldc, DType c) override;
  void gemm_ex_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A,
                       int lda, int64_t stride_a, const void* B, int ldb, int64_t stride_b,
                       DType ab, float beta, void* C, int ldc, int64_t stride_c, DType c,
                       int batch) override;
  std::string gemm_path(DType ab) const override;

  // ---- streams and events
  cudaStream_t compute_stream() const { return compute_; }
  cudaStream_t comm_stream() const { return comm_; }
  // The comm stream waits for everything queued on the compute stream so far.
  void comm_waits_for_compute();
  // The compute stream waits for `e` (recorded on any stream of this GPU).
  void compute_waits_for(cudaEvent_t e);
  // Memory at `p` is used by work queued on `stream`: the pool will not hand it out again before
  // that work has finished (see CudaPool::record_stream).
  void record_stream(const void* p, cudaStream_t stream) { pool_->record_stream(p, stream); }

  // ---- pool figures (the tracker holds the requested bytes by category)
  int64_t reserved_bytes() const { return pool_->reserved_bytes(); }
  int64_t peak_reserved_bytes() const { return pool_->peak_reserved_bytes(); }
  std::optional<PoolReport> pool_report() const override;
  int64_t cached_bytes() const { return pool_->cached_bytes(); }
  void empty_cache();

 protected:
  void* raw_alloc(int64_t bytes) override { return pool_->allocate(bytes); }
  void raw_free(void* p) override { pool_->free(p); }

 private:
  void release_resources();  // cuBLAS, pool, events, streams: the destructor's work

  int ordinal_;
  std::string name_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t comm_ = nullptr;
  cudaEvent_t join_ = nullptr;        // reused for comm_waits_for_compute
  cudaStream_t copy_ = nullptr;       // copies to and from the host tier
  cudaEvent_t copy_ready_ = nullptr;  // compute -> copy stream
  cudaEvent_t copy_done_ = nullptr;   // copy stream -> the copy's reader
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<CudaPool> pool_;
  Buffer cublas_workspace_;  // cuBLAS scratch, charged to `workspace`, so nothing is untracked
};

// The CudaDevice behind `dev`; throws InvalidArgument when it is another kind.
CudaDevice& as_cuda(Device& dev);
// Why cuda_device_count() is 0 ("" when it is not), e.g. "cudaGetDeviceCount: CUDA driver
// version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver, 35)".
std::string cuda_unavailable_reason();

}  // namespace shardlab
