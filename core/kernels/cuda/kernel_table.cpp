// The CUDA kernel table: the launchers of kernels/cuda/<family>.cu.
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

namespace {

const KernelTable kCudaKernels = {
    "cuda",          &cuda::kAttention, &cuda::kCrossEntropy, &cuda::kElementwise, &cuda::kEncoder,
    &cuda::kGelu,    &cuda::kLayerNorm, &cuda::kOptim,        &cuda::kResidual,
};

}  // namespace

const KernelTable& cuda_kernel_table() { return kCudaKernels; }

}  // namespace shardlab
