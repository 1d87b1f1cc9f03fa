// A GPU's host tier (--offload): pinned host memory, so that the copy stream's cudaMemcpyAsync
// runs as DMA without staging and overlaps the GPU's compute. The math is the CPU device's
// (OpenBLAS, the CPU kernel table: kind() is cpu), so the host AdamW is the CPU AdamW.
#include "core/device/cpu_device.hpp"
#include "core/device/cuda/cuda_device.hpp"

namespace shardlab {

namespace {

class PinnedHostDevice final : public CpuDevice {
 public:
  PinnedHostDevice(MemoryTracker& tracker, const CudaDevice& gpu)
      : CpuDevice(tracker, /*pooled=*/false), gpu_(gpu) {}

  // Host code about to write host-tier memory that a queued copy up may still be reading calls
  // this first.
  void synchronize() override { gpu_.wait_copies(); }

 protected:
  void* raw_alloc(int64_t bytes) override {
    CudaDeviceGuard guard(gpu_.ordinal());
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, static_cast<size_t>(bytes), cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      SL_THROW(OutOfMemory, "pinned host allocation of ", format_bytes(bytes),
               " failed (cudaHostAlloc: out of memory): the machine's page-locked "
               "memory is exhausted; offload less, or raise the limit (ulimit -l)");
    }
    CUDA_CHECK(e);
    return p;
  }
  void raw_free(void* p) override {
    gpu_.wait_copies();  // a copy still queued may read or write these bytes
    CudaDeviceGuard guard(gpu_.ordinal());
    CUDA_CHECK(cudaFreeHost(p));
  }

 private:
  const CudaDevice& gpu_;
};

}  // namespace

std::unique_ptr<Device> CudaDevice::make_host_tier(MemoryTracker& host_tracker) const {
  return std::make_unique<PinnedHostDevice>(host_tracker, *this);
}

}  // namespace shardlab
