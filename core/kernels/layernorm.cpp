// LayerNorm on any device through its kernel table, and the CPU loops: one row at a time through
// the shared row math.
#include "core/kernels/layernorm.hpp"

#include "core/kernels/kernel_table.hpp"

namespace shardlab {

void layernorm_forward(Device& dev, float* out, float* mean, float* rstd, const float* x,
                       const float* weight, const float* bias, int N, int C) {
  kernel_table(dev).layernorm->forward(dev, out, mean, rstd, x, weight, bias, N, C);
}

void layernorm_backward(Device& dev, float* dx, float* dweight, float* dbias, const float* dout,
                        const float* x, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  kernel_table(dev).layernorm->backward(dev, dx, dweight, dbias, dout, x, weight, mean, rstd, N, C);
}

// ---- CPU --------------------------------------------------------------------------------------

namespace cpu {
namespace {

void forward(Device&, float* out, float* mean, float* rstd, const float* x, const float* weight,
             const float* bias, int N, int C) {
  for (int i = 0; i < N; ++i) {
    int64_t r = static_cast<int64_t>(i) * C;
    layernorm_forward_row(out + r, mean + i, rstd + i, x + r, weight, bias, C);
  }
}

void backward(Device&, float* dx, float* dweight, float* dbias, const float* dout, const float* x,
              const float* weight, const float* mean, const float* rstd, int N, int C) {
  for (int i = 0; i < N; ++i) {
    int64_t r = static_cast<int64_t>(i) * C;
    layernorm_backward_row(dx + r, dout + r, x + r, weight, mean[i], rstd[i], C);
    layernorm_param_grad_row(dweight, dbias, dout + r, x + r, mean[i], rstd[i], C);
  }
}

}  // namespace
}  // namespace cpu

const LayerNormKernels kCpuLayerNorm = {cpu::forward, cpu::backward};
}  // namespace shardlab
