// The CPU kernel table and the dispatch on the device kind.
#include "core/kernels/kernel_table.hpp"

#include "core/base/error.hpp"

namespace shardlab {

namespace {

// Addresses only: constant-initialised, so usable before main like any kernel.
const KernelTable kCpuKernels = {
    "cpu",        &kCpuAttention,      &kCpuCrossEntropy, &kCpuElementwise,
    &kCpuEncoder, &kCpuFlashAttention, &kCpuGelu,         &kCpuLayerNorm,
    &kCpuOptim,   &kCpuResidual,       &kCpuRmsNorm,      &kCpuRope,
    &kCpuSwiGlu};

}  // namespace

const KernelTable& cpu_kernel_table() { return kCpuKernels; }

const KernelTable& kernel_table(const Device& dev) {
  switch (dev.kind()) {
    case DeviceKind::cpu: return kCpuKernels;
    case DeviceKind::cuda: return cuda_kernel_table();
    case DeviceKind::meta: return meta_kernel_table();
  }
  SL_THROW(Error, "no kernel table for device kind ", static_cast<int>(dev.kind()));
}

}  // namespace shardlab
