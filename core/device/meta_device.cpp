// MetaDevice: tracked allocations without memory, work charged to a virtual clock.
#include "core/device/meta_device.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/base/virtual_clock.hpp"

#include "core/device/device_model.hpp"

namespace shardlab {

namespace {

// Fake addresses start high and only grow (never reused), 256-byte aligned as cudaMalloc's are:
// pointer arithmetic and comparisons (in-place collectives) behave as with real buffers, and a
// stray dereference faults at once instead of reading someone's data. They lie above any user
// address of the 48- and 57-bit virtual address spaces (x86-64, AArch64), so is_meta_address can
// tell them from real host memory; the host tier's range is apart from the device's.
constexpr uint64_t kMetaAddressBase = uint64_t{1} << 60;
constexpr uint64_t kFirstAddress[2] = {kMetaAddressBase, kMetaAddressBase + (uint64_t{1} << 59)};
constexpr uint64_t kAlign = 256;

}  // namespace

bool is_meta_address(const void* p) { return reinterpret_cast<uintptr_t>(p) >= kMetaAddressBase; }

MetaDevice::MetaDevice(MemoryTracker& tracker, const ClusterSpec& spec, VirtualClock& clock,
                       GemmMath math, MetaTier tier, int ranks)
    : Device(tracker),
      spec_(spec),
      clock_(clock),
      math_(math),
      tier_(tier),
      ranks_(ranks),
      compute_rate_((ranks > 1 ? spec.cost.lockstep_compute_efficiency : 1.0) *
                    spec.compute_share(ranks)),
      next_address_(kFirstAddress[static_cast<int>(tier)]) {}

std::unique_ptr<Device> MetaDevice::make_host_tier(MemoryTracker& host_tracker) const {
  return std::make_unique<MetaDevice>(host_tracker, spec_, clock_, math_, MetaTier::host, ranks_);
}

void* MetaDevice::raw_alloc(int64_t bytes) {
  const uint64_t p = next_address_;
  next_address_ += (static_cast<uint64_t>(bytes) + kAlign - 1) / kAlign * kAlign + kAlign;
  return reinterpret_cast<void*>(p);
}

void MetaDevice::charge_kernel(int64_t bytes, const char* kernel) {
  ++kernels_;
  advance_compute(tier_ == MetaTier::host ? host_memory_ns(spec_, bytes)
                                          : memory_ns(spec_, bytes, kernel));
}

void MetaDevice::advance_compute(int64_t ns) {
  clock_.advance(compute_rate_ == 1.0
                     ? ns
                     : virtual_ns(static_cast<double>(ns) * 1e-9 / compute_rate_, "meta device"));
}

void MetaDevice::copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) charge_kernel(2 * bytes, "copy");
}

void MetaDevice::copy_to_host(void* host_dst, const void*, int64_t bytes) {
  if (bytes <= 0) return;
  if (!is_meta_address(host_dst)) std::memset(host_dst, 0, static_cast<size_t>(bytes));
  clock_.advance(cross_ns(bytes));
}

void MetaDevice::copy_from_host(void*, const void*, int64_t bytes) {
  if (bytes > 0) clock_.advance(cross_ns(bytes));
}

int64_t MetaDevice::cross_ns(int64_t bytes) const {
  // The device's copies cross the host link; the host tier's stay in host memory (read + write).
  return tier_ == MetaTier::host ? host_memory_ns(spec_, 2 * bytes) : host_copy_ns(spec_, bytes);
}

void MetaDevice::fill_zero(void*, int64_t bytes) {
  if (bytes > 0) charge_kernel(bytes, "fill");
}

void MetaDevice::gemm(bool, bool, int M, int N, int K, float, const float*, int, const float*, int,
                      float, float*, int) {
  gemm_batched(false, false, M, N, K, 1.0f, nullptr, 0, 0, nullptr, 0, 0, 0.0f, nullptr, 0, 0, 1);
}

void MetaDevice::gemm_batched(bool, bool, int M, int N, int K, float, const float*, int, int64_t,
                              const float*, int, int64_t, float, float*, int, int64_t, int batch) {
  const int es = math_ == GemmMath::bf16 ? 2 : 4;
  charge_gemm(math_, M, N, K, batch, es, es);
}

void MetaDevice::charge_gemm(GemmMath m, int M, int N, int K, int batch, int ab_bytes,
                             int c_bytes) {
  if (M <= 0 || N <= 0 || K <= 0 || batch <= 0) return;
  ++kernels_;
  gemm_flops_ += 2.0 * M * N * static_cast<double>(K) * batch;
  advance_compute(gemm_ns(spec_, m, M, N, K, batch, ab_bytes, c_bytes));
}

void MetaDevice::gemm_ex(bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int lda,
                         const void* B, int ldb, DType ab, float beta, void* C, int ldc, DType c) {
  gemm_ex_batched(ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, ab, beta, C, ldc, 0, c, 1);
}

void MetaDevice::gemm_ex_batched(bool, bool, int M, int N, int K, float, const void*, int, int64_t,
                                 const void*, int, int64_t, DType ab, float, void*, int, int64_t,
                                 DType c, int batch) {
  check_gemm_ex_dtypes(ab, c);
  if (ab == DType::f32) {
    const int es = math_ == GemmMath::bf16 ? 2 : 4;  // as gemm: the what-if math's operands
    charge_gemm(math_, M, N, K, batch, es, es);
    return;
  }
  charge_gemm(GemmMath::bf16, M, N, K, batch, 2, static_cast<int>(dtype_size(c)));
}

std::string MetaDevice::gemm_path(DType ab) const {
  return std::string("meta: charged at the ") +
         gemm_math_name(ab == DType::f32 ? math_ : GemmMath::bf16) + " peak of " + spec_.name;
}

void MetaDevice::charge_fused(double flops, GemmMath math, double efficiency, int64_t bytes) {
  ++kernels_;
  if (tier_ == MetaTier::host) {
    advance_compute(host_memory_ns(spec_, bytes));
    return;
  }
  gemm_flops_ += flops;
  advance_compute(fused_ns(spec_, math, flops, efficiency, bytes));
}

std::unique_ptr<Device> make_meta_device(MemoryTracker& tracker, const ClusterSpec& spec,
                                         VirtualClock& clock, GemmMath math, int ranks) {
  return std::make_unique<MetaDevice>(tracker, spec, clock, math, MetaTier::device, ranks);
}

}  // namespace shardlab
