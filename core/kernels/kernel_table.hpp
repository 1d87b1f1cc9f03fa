// Which code runs a kernel on which device: one KernelTable per device kind, as ggml gives each
// backend one table of functions. A table has one entry per op family, a struct of function
// pointers declared beside the family's SL_HD math (kernels/<family>.hpp). The public kernels
// (layernorm_forward, ...) check what holds on every device and call through kernel_table(dev),
// the one place kernels look at the device kind.
//
// Adding a device: its kernels beside each family (kernels/<device>/<family>.*, each ending with
// the family's entry), their names added to the declarations below, its table (as
// kernels/cuda/kernel_table.cpp) and a case in kernel_table(). No kernel function changes.
#pragma once

#include "core/device/device.hpp"

namespace shardlab {

struct AttentionKernels;
struct CrossEntropyKernels;
struct ElementwiseKernels;
struct EncoderKernels;
struct FlashAttentionKernels;
struct GeluKernels;
struct LayerNormKernels;
struct OptimKernels;
struct ResidualKernels;
struct RmsNormKernels;
struct RopeKernels;
struct SwiGluKernels;

struct KernelTable {
  const char* device;  // device_kind_name of the kind it serves
  const AttentionKernels* attention;
  const CrossEntropyKernels* crossentropy;
  const ElementwiseKernels* elementwise;
  const EncoderKernels* encoder;
  const FlashAttentionKernels* flash_attention;
  const GeluKernels* gelu;
  const LayerNormKernels* layernorm;
  const OptimKernels* optim;
  const ResidualKernels* residual;
  const RmsNormKernels* rmsnorm;
  const RopeKernels* rope;
  const SwiGluKernels* swiglu;
};

// The table of dev's kind.
const KernelTable& kernel_table(const Device& dev);
// The CPU table: the loops of kernels/<family>.cpp, the reference every other table is tested
// against.
const KernelTable& cpu_kernel_table();
// The CUDA table: the launchers of kernels/cuda/<family>.cu. Throws Error in a build without CUDA
// (where no CUDA device can exist either).
const KernelTable& cuda_kernel_table();
// The meta table (kernels/meta_kernels.cpp): no arithmetic; each kernel charges the bytes it moves
// to the MetaDevice's virtual clock.
const KernelTable& meta_kernel_table();

// Each family's entry on each device: kCpu<Family> at the end of kernels/<family>.cpp,
// kCuda<Family> at the end of kernels/cuda/<family>.cu (built with SHARDLAB_CUDA only),
// kMeta<Family> in kernels/meta_kernels.cpp.
extern const AttentionKernels kCpuAttention, kCudaAttention, kMetaAttention;
extern const CrossEntropyKernels kCpuCrossEntropy, kCudaCrossEntropy, kMetaCrossEntropy;
extern const ElementwiseKernels kCpuElementwise, kCudaElementwise, kMetaElementwise;
extern const EncoderKernels kCpuEncoder, kCudaEncoder, kMetaEncoder;
extern const FlashAttentionKernels kCpuFlashAttention, kCudaFlashAttention, kMetaFlashAttention;
extern const GeluKernels kCpuGelu, kCudaGelu, kMetaGelu;
extern const LayerNormKernels kCpuLayerNorm, kCudaLayerNorm, kMetaLayerNorm;
extern const OptimKernels kCpuOptim, kCudaOptim, kMetaOptim;
extern const ResidualKernels kCpuResidual, kCudaResidual, kMetaResidual;
extern const RmsNormKernels kCpuRmsNorm, kCudaRmsNorm, kMetaRmsNorm;
extern const RopeKernels kCpuRope, kCudaRope, kMetaRope;
extern const SwiGluKernels kCpuSwiGlu, kCudaSwiGlu, kMetaSwiGlu;

}  // namespace shardlab
