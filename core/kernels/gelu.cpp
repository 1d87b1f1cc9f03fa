// GELU (tanh approximation) on any device through its kernel table, and the CPU loops.
#include "core/kernels/gelu.hpp"

#include "core/kernels/kernel_table.hpp"

namespace shardlab {

void gelu_forward(Device& dev, float* out, const float* x, int64_t n) {
  kernel_table(dev).gelu->forward(dev, out, x, n);
}

void gelu_backward(Device& dev, float* dx, const float* x, const float* dout, int64_t n) {
  kernel_table(dev).gelu->backward(dev, dx, x, dout, n);
}

// ---- CPU --------------------------------------------------------------------------------------

namespace cpu {
namespace {

void forward(Device&, float* out, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_forward_elem(x[i]);
}

void backward(Device&, float* dx, const float* x, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = gelu_backward_elem(x[i], dout[i]);
}

}  // namespace
}  // namespace cpu

const GeluKernels kCpuGelu = {cpu::forward, cpu::backward};
}  // namespace shardlab
