// GELU (tanh approximation) on any device through its kernel table, and the CPU loops.
#include "core/kernels/gelu.hpp"

#include "core/base/cpu_simd.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

void gelu_forward(Device& dev, float* out, const float* x, int64_t n) {
  kernel_table(dev).gelu->forward(dev, out, x, n);
}

void gelu_backward(Device& dev, float* dx, const float* x, const float* dout, int64_t n) {
  kernel_table(dev).gelu->backward(dev, dx, x, dout, n);
}

// ---- CPU --------------------------------------------------------------------------------------
// The loops at the CPU's vector width (cpu_simd.hpp): the same bits at every width.

namespace cpu {
namespace {

SL_CPU_INLINE void forward_loop_body(float* out, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_forward_elem(x[i]);
}
SL_CPU_SIMD_KERNEL(forward_loop, (float* out, const float* x, int64_t n), (out, x, n))

SL_CPU_INLINE void backward_loop_body(float* dx, const float* x, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = gelu_backward_elem(x[i], dout[i]);
}
SL_CPU_SIMD_KERNEL(backward_loop, (float* dx, const float* x, const float* dout, int64_t n),
                   (dx, x, dout, n))

void forward(Device&, float* out, const float* x, int64_t n) { forward_loop(out, x, n); }

void backward(Device&, float* dx, const float* x, const float* dout, int64_t n) {
  backward_loop(dx, x, dout, n);
}

}  // namespace
}  // namespace cpu

const GeluKernels kCpuGelu = {cpu::forward, cpu::backward};
}  // namespace shardlab
