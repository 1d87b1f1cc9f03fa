// SwiGLU on any device through its kernel table, and the CPU loops.
#include "core/kernels/swiglu.hpp"

#include "core/base/cpu_simd.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

void swiglu_forward(Device& dev, float* out, const float* gate_up, int N, int F) {
  kernel_table(dev).swiglu->forward(dev, out, gate_up, N, F);
}

void swiglu_backward(Device& dev, float* dgate_up, const float* dout, const float* gate_up, int N,
                     int F) {
  kernel_table(dev).swiglu->backward(dev, dgate_up, dout, gate_up, N, F);
}

// ---- CPU --------------------------------------------------------------------------------------
// Element-wise, vectorised at the CPU's width (cpu_simd.hpp): the same bits at every width.

namespace cpu {
namespace {

SL_CPU_INLINE void forward_rows_body(float* out, const float* gate_up, int N, int F) {
  for (int64_t i = 0; i < N; ++i) {
    const float* g = gate_up + i * 2 * F;
    const float* u = g + F;
    float* o = out + i * F;
    for (int f = 0; f < F; ++f) o[f] = swiglu_forward_elem(g[f], u[f]);
  }
}
SL_CPU_SIMD_KERNEL(forward_rows, (float* out, const float* gate_up, int N, int F),
                   (out, gate_up, N, F))

SL_CPU_INLINE void backward_rows_body(float* dgate_up, const float* dout, const float* gate_up,
                                      int N, int F) {
  for (int64_t i = 0; i < N; ++i) {
    const float* g = gate_up + i * 2 * F;
    const float* u = g + F;
    const float* d = dout + i * F;
    float* dg = dgate_up + i * 2 * F;
    float* du = dg + F;
    for (int f = 0; f < F; ++f) swiglu_backward_elem(dg + f, du + f, g[f], u[f], d[f]);
  }
}
SL_CPU_SIMD_KERNEL(backward_rows,
                   (float* dgate_up, const float* dout, const float* gate_up, int N, int F),
                   (dgate_up, dout, gate_up, N, F))

void forward(Device&, float* out, const float* gate_up, int N, int F) {
  forward_rows(out, gate_up, N, F);
}

void backward(Device&, float* dgate_up, const float* dout, const float* gate_up, int N, int F) {
  backward_rows(dgate_up, dout, gate_up, N, F);
}

}  // namespace
}  // namespace cpu

const SwiGluKernels kCpuSwiGlu = {cpu::forward, cpu::backward};
}  // namespace shardlab
