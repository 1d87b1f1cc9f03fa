// CpuDevice: host memory and OpenBLAS, the reference every other device is checked against.
// Declared here so that a host tier with another allocator (a GPU's pinned host memory,
// core/device/cuda/) can reuse its copies and GEMMs and change only where its bytes come from.
#pragma once

#include <memory>

#include "core/device/device.hpp"

namespace shardlab {

class HostPool;  // cpu_device.cpp: freed blocks kept by size class, below the tracker

class CpuDevice : public Device {
 public:
  // `pooled`: take memory from a caching pool (cpu_device.cpp says why); a subclass with its own
  // allocator (pinned host memory) passes false.
  explicit CpuDevice(MemoryTracker& tracker, bool pooled = true);
  ~CpuDevice() override;
  DeviceKind kind() const override { return DeviceKind::cpu; }

  void copy(void* dst, const void* src, int64_t bytes) override;
  void copy_to_host(void* dst, const void* src, int64_t bytes) override { copy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, int64_t bytes) override { copy(dst, src, bytes); }
  void fill_zero(void* dst, int64_t bytes) override;
  void synchronize() override {}

  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) override;
  void gemm_batched(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                    int64_t sa, const float* B, int ldb, int64_t sb, float beta, float* C, int ldc,
                    int64_t sc, int batch) override;
  // 16-bit inputs: cpu_gemm.hpp (widened blocks on OpenBLAS, or oneDNN).
  void gemm_ex(bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int lda,
               const void* B, int ldb, DType ab, float beta, void* C, int ldc, DType c) override;
  std::string gemm_path(DType ab) const override;

 protected:
  void* raw_alloc(int64_t bytes) override;  // 64-byte aligned
  void raw_free(void* p) override;

 private:
  std::unique_ptr<HostPool> pool_;  // null: straight to the C library
};

}  // namespace shardlab
