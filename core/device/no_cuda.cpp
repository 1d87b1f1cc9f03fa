// Built when SHARDLAB_CUDA is OFF: the CUDA entry points say clearly that this build lacks CUDA.
#include "core/device/device.hpp"

namespace shardlab {

std::unique_ptr<Device> make_cuda_device(MemoryTracker&, int) {
  SL_THROW(Error,
           "this build has no CUDA device: configure with -DSHARDLAB_CUDA=ON "
           "(the `cuda` preset) on a machine with the CUDA toolkit");
}

int cuda_device_count() { return 0; }

}  // namespace shardlab
