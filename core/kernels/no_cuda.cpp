// Built when SHARDLAB_CUDA is OFF: there is no CUDA kernel table (nor any CUDA device to use one).
#include "core/base/error.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

const KernelTable& cuda_kernel_table() {
  SL_THROW(Error,
           "this build has no CUDA kernels: configure with -DSHARDLAB_CUDA=ON "
           "(the `cuda` preset) on a machine with the CUDA toolkit");
}

}  // namespace shardlab
