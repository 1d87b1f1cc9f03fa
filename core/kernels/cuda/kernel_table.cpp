// The CUDA kernel table: the launchers of kernels/cuda/<family>.cu.
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

namespace {

const KernelTable kCudaKernels = {
    "cuda",        &kCudaAttention,      &kCudaCrossEntropy, &kCudaElementwise,
    &kCudaEncoder, &kCudaFlashAttention, &kCudaGelu,         &kCudaLayerNorm,
    &kCudaOptim,   &kCudaResidual,       &kCudaRmsNorm,      &kCudaRope,
    &kCudaSwiGlu};

}  // namespace

const KernelTable& cuda_kernel_table() { return kCudaKernels; }

}  // namespace shardlab
