// The residual family (residual add, bias broadcast, bias gradient) on any device through its
// kernel table, and the CPU loops.
#include "core/kernels/residual.hpp"

#include "core/base/cpu_simd.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

void residual_forward(Device& dev, float* out, const float* a, const float* b, int64_t n) {
  kernel_table(dev).residual->forward(dev, out, a, b, n);
}

void bias_broadcast(Device& dev, float* out, const float* bias, int N, int OC, bool accumulate) {
  kernel_table(dev).residual->bias_broadcast(dev, out, bias, N, OC, accumulate);
}

void bias_backward(Device& dev, float* dbias, const float* dout, int N, int OC) {
  kernel_table(dev).residual->bias_backward(dev, dbias, dout, N, OC);
}

// ---- CPU --------------------------------------------------------------------------------------

namespace cpu {
namespace {
// The loops at the CPU's vector width (cpu_simd.hpp). Every output element is one addition (or a
// column's row sums, added in row order), so every width gives the same bits.

SL_CPU_INLINE void forward_loop_body(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = residual_elem(a[i], b[i]);
}
SL_CPU_SIMD_KERNEL(forward_loop, (float* out, const float* a, const float* b, int64_t n),
                   (out, a, b, n))

SL_CPU_INLINE void broadcast_rows_body(float* out, const float* bias, int N, int OC,
                                       bool accumulate) {
  for (int i = 0; i < N; ++i) {
    float* row = out + static_cast<int64_t>(i) * OC;
    if (accumulate)
      for (int o = 0; o < OC; ++o) row[o] = residual_elem(row[o], bias[o]);
    else
      for (int o = 0; o < OC; ++o) row[o] = bias[o];
  }
}
SL_CPU_SIMD_KERNEL(broadcast_rows, (float* out, const float* bias, int N, int OC, bool accumulate),
                   (out, bias, N, OC, accumulate))

// Row by row rather than bias_grad_col's column walk: the same sums, read contiguously.
SL_CPU_INLINE void bias_grad_rows_body(float* dbias, const float* dout, int N, int OC) {
  for (int i = 0; i < N; ++i) {
    const float* row = dout + static_cast<int64_t>(i) * OC;
    for (int o = 0; o < OC; ++o) dbias[o] += row[o];
  }
}
SL_CPU_SIMD_KERNEL(bias_grad_rows, (float* dbias, const float* dout, int N, int OC),
                   (dbias, dout, N, OC))

void forward(Device&, float* out, const float* a, const float* b, int64_t n) {
  forward_loop(out, a, b, n);
}

void broadcast(Device&, float* out, const float* bias, int N, int OC, bool accumulate) {
  broadcast_rows(out, bias, N, OC, accumulate);
}

void bias_grad(Device&, float* dbias, const float* dout, int N, int OC) {
  bias_grad_rows(dbias, dout, N, OC);
}

}  // namespace
}  // namespace cpu

const ResidualKernels kCpuResidual = {cpu::forward, cpu::broadcast, cpu::bias_grad};
}  // namespace shardlab
