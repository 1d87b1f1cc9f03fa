// MetaDevice: tracked allocations without memory, work charged to a virtual clock.
#include "core/device/meta_device.hpp"

#include <cstring>

#include "core/device/device_model.hpp"

namespace shardlab {

namespace {

// Fake addresses start high and only grow (never reused), 256-byte aligned as cudaMalloc's are:
// pointer arithmetic and comparisons (in-place collectives) behave as with real buffers, and a
// stray dereference faults at once instead of reading someone's data.
constexpr uint64_t kFirstAddress = uint64_t{1} << 46;
constexpr uint64_t kAlign = 256;

}  // namespace

MetaDevice::MetaDevice(MemoryTracker& tracker, const ClusterSpec& spec, VirtualClock& clock,
                       GemmMath math)
    : Device(tracker), spec_(spec), clock_(clock), math_(math), next_address_(kFirstAddress) {}

void* MetaDevice::raw_alloc(int64_t bytes) {
  const uint64_t p = next_address_;
  next_address_ += (static_cast<uint64_t>(bytes) + kAlign - 1) / kAlign * kAlign + kAlign;
  return reinterpret_cast<void*>(p);
}

void MetaDevice::charge_kernel(int64_t bytes, const char* kernel) {
  ++kernels_;
  clock_.advance(memory_ns(spec_, bytes, kernel));
}

void MetaDevice::copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) charge_kernel(2 * bytes, "copy");
}

void MetaDevice::copy_to_host(void* host_dst, const void*, int64_t bytes) {
  if (bytes <= 0) return;
  std::memset(host_dst, 0, static_cast<size_t>(bytes));
  clock_.advance(host_copy_ns(spec_, bytes));
}

void MetaDevice::copy_from_host(void*, const void*, int64_t bytes) {
  if (bytes > 0) clock_.advance(host_copy_ns(spec_, bytes));
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
  if (M <= 0 || N <= 0 || K <= 0 || batch <= 0) return;
  ++kernels_;
  gemm_flops_ += 2.0 * M * N * static_cast<double>(K) * batch;
  clock_.advance(gemm_ns(spec_, math_, M, N, K, batch));
}

std::unique_ptr<Device> make_meta_device(MemoryTracker& tracker, const ClusterSpec& spec,
                                         VirtualClock& clock, GemmMath math) {
  return std::make_unique<MetaDevice>(tracker, spec, clock, math);
}

}  // namespace shardlab
