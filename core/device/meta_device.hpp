// MetaDevice: the device of a simulated rank (docs/simulate.md). Every allocation goes through the
// tracker exactly as on a real device, by category, but holds no memory: it returns a distinct
// address that is never dereferenced. GEMMs and kernels do no arithmetic; they advance the
// rank's virtual clock by what the device model says they take on the cluster's GPU. Reads of
// device data on the host (losses, norms, flags) see zeros, so nothing the engine schedules may
// depend on data values.
#pragma once

#include <cstdint>
#include <memory>

#include "core/base/virtual_clock.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/device/device.hpp"

namespace shardlab {

class MetaDevice final : public Device {
 public:
  // `spec` and `clock` must outlive the device. GEMMs are charged at spec's peak for `math`.
  MetaDevice(MemoryTracker& tracker, const ClusterSpec& spec, VirtualClock& clock, GemmMath math);

  DeviceKind kind() const override { return DeviceKind::meta; }
  bool holds_data() const override { return false; }

  void copy(void* dst, const void* src, int64_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, int64_t bytes) override;  // writes zeros
  void copy_from_host(void* dst, const void* host_src, int64_t bytes) override;
  void fill_zero(void* dst, int64_t bytes) override;
  void synchronize() override {}
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) override;
  void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                    int lda, int64_t stride_a, const float* B, int ldb, int64_t stride_b,
                    float beta, float* C, int ldc, int64_t stride_c, int batch) override;

  // An element-wise or row kernel that reads and writes `bytes` in all (the meta kernel table);
  // `kernel` names it for the spec's per-kernel efficiency (device_model.hpp, memory_ns).
  void charge_kernel(int64_t bytes, const char* kernel = nullptr);

  const ClusterSpec& spec() const { return spec_; }
  GemmMath math() const { return math_; }
  VirtualClock& clock() const { return clock_; }
  // What ran so far: GEMM FLOPs (for the hardware FLOPs utilisation) and launches.
  double gemm_flops() const { return gemm_flops_; }
  int64_t kernels() const { return kernels_; }

 protected:
  void* raw_alloc(int64_t bytes) override;
  void raw_free(void*) override {}

 private:
  const ClusterSpec& spec_;
  VirtualClock& clock_;
  GemmMath math_;
  uint64_t next_address_;
  double gemm_flops_ = 0;
  int64_t kernels_ = 0;
};

// A MetaDevice over `tracker` (see above).
std::unique_ptr<Device> make_meta_device(MemoryTracker& tracker, const ClusterSpec& spec,
                                         VirtualClock& clock, GemmMath math);

}  // namespace shardlab
