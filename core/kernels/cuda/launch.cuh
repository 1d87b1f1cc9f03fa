// What every CUDA kernel file shares: the launch context of a rank's device (its GPU made current,
// its compute stream) and grid sizes. Kernels call the SL_HD math of core/kernels/<family>.hpp, so
// the CPU tests of those functions check the GPU arithmetic too.
#pragma once

#include <cstdint>

#include "core/device/cuda/cuda_device.hpp"

namespace shardlab::cuda {

inline constexpr int kThreads = 256;
// Grid-stride loops cover the rest: enough blocks to fill any current GPU several times over.
inline constexpr int64_t kMaxBlocks = 65535;

inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

// The rank's GPU made current for the launch, and the stream to queue on.
struct Launch {
  explicit Launch(Device& dev)
      : device(as_cuda(dev)), guard(device.ordinal()), stream(device.compute_stream()) {}
  CudaDevice& device;
  CudaDeviceGuard guard;
  cudaStream_t stream;
};

// i = 0 .. n-1 across the whole grid.
#define SL_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

}  // namespace shardlab::cuda
