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

// Which memory a MetaDevice stands for: the GPU's, or the host tier beside it (--offload), whose
// kernels are charged at the host's memory bandwidth (device_model.hpp, host_memory_ns).
enum class MetaTier : uint8_t { device, host };

class MetaDevice final : public Device {
 public:
  // `spec` and `clock` must outlive the device. GEMMs are charged at spec's peak for `math`.
  // `ranks`: the job's; with more than one, every GEMM and kernel runs at the spec's
  // lockstep_compute_efficiency of its speed (each collective waits for the slowest rank), and at
  // its compute_share where the node has fewer devices than ranks (they time-share them).
  MetaDevice(MemoryTracker& tracker, const ClusterSpec& spec, VirtualClock& clock, GemmMath math,
             MetaTier tier = MetaTier::device, int ranks = 1);

  DeviceKind kind() const override { return DeviceKind::meta; }
  bool holds_data() const override { return false; }
  // The host tier of a simulated rank: a MetaDevice over `host_tracker` on the same clock (the
  // host waits for its own loops as for the device's work), its kernels charged at the host's
  // memory bandwidth. Copies between the tiers are the device's copy_to_host / copy_from_host.
  std::unique_ptr<Device> make_host_tier(MemoryTracker& host_tracker) const override;
  MetaTier tier() const { return tier_; }

  void copy(void* dst, const void* src, int64_t bytes) override;
  // Writes zeros to a real host destination; nothing to one of a meta host tier's buffers.
  void copy_to_host(void* host_dst, const void* src, int64_t bytes) override;
  void copy_from_host(void* dst, const void* host_src, int64_t bytes) override;
  void fill_zero(void* dst, int64_t bytes) override;
  void synchronize() override {}
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) override;
  void gemm_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                    int lda, int64_t stride_a, const float* B, int ldb, int64_t stride_b,
                    float beta, float* C, int ldc, int64_t stride_c, int batch) override;
  // 16-bit inputs are charged at the spec's bf16 peak (an f16 GEMM's peak equals bf16's on the
  // GPUs the presets describe), their operands at 2 bytes and C at its own size; f32 inputs as
  // gemm, at the device's `math`.
  void gemm_ex(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A, int lda,
               const void* B, int ldb, DType ab, float beta, void* C, int ldc, DType c) override;
  void gemm_ex_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A,
                       int lda, int64_t stride_a, const void* B, int ldb, int64_t stride_b,
                       DType ab, float beta, void* C, int ldc, int64_t stride_c, DType c,
                       int batch) override;
  std::string gemm_path(DType ab) const override;

  // An element-wise or row kernel that reads and writes `bytes` in all (the meta kernel table):
  // charged at the GPU's memory bandwidth with `kernel`'s own efficiency from the spec
  // (device_model.hpp, memory_ns), or at the host's memory bandwidth on the host tier.
  void charge_kernel(int64_t bytes, const char* kernel = nullptr);
  // A fused kernel with GEMM-like arithmetic (flash attention): `flops` at `math`'s peak times
  // `efficiency`, or `bytes` at the memory bandwidth, whichever takes longer (device_model.hpp,
  // fused_ns); on the host tier the bytes only. Its FLOPs count into gemm_flops.
  void charge_fused(double flops, GemmMath math, double efficiency, int64_t bytes);

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
  int64_t cross_ns(int64_t bytes) const;  // a copy to or from the host
  void charge_gemm(GemmMath m, int M, int N, int K, int batch, int ab_bytes, int c_bytes);
  void advance_compute(int64_t ns);  // a GEMM or kernel: at the lockstep rate

  const ClusterSpec& spec_;
  VirtualClock& clock_;
  GemmMath math_;
  MetaTier tier_;
  int ranks_;
  double compute_rate_;  // lockstep_compute_efficiency with ranks_ > 1, times compute_share
  uint64_t next_address_;
  double gemm_flops_ = 0;
  int64_t kernels_ = 0;
};

// Whether `p` is an address a MetaDevice handed out (no bytes behind it, never dereferenced).
bool is_meta_address(const void* p);

// A MetaDevice over `tracker` (see above).
std::unique_ptr<Device> make_meta_device(MemoryTracker& tracker, const ClusterSpec& spec,
                                         VirtualClock& clock, GemmMath math, int ranks = 1);

}  // namespace shardlab
