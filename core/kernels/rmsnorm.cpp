// RMSNorm on any device through its kernel table, and the CPU loops: one row at a time, the sums
// in lanes as LayerNorm's.
#include "core/kernels/rmsnorm.hpp"

#include "core/base/cpu_simd.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

void rmsnorm_forward(Device& dev, float* out, float* rstd, const float* x, const float* weight,
                     int N, int C, float eps) {
  kernel_table(dev).rmsnorm->forward(dev, out, rstd, x, weight, N, C, eps);
}

void rmsnorm_backward(Device& dev, float* dx, float* dweight, const float* dout, const float* x,
                      const float* weight, const float* rstd, int N, int C) {
  kernel_table(dev).rmsnorm->backward(dev, dx, dweight, dout, x, weight, rstd, N, C);
}

// ---- CPU --------------------------------------------------------------------------------------
// The row math of rmsnorm.hpp with its sums in kCpuLanes lanes (cpu_simd.hpp), at the CPU's vector
// width: the same bits at every width, run to run. (A GPU thread runs the sequential sums of
// rmsnorm.hpp's row functions.)

namespace cpu {
namespace {

SL_CPU_INLINE void forward_rows_body(float* out, float* rstd, const float* x, const float* weight,
                                     int N, int C, float eps) {
  for (int i = 0; i < N; ++i) {
    const int64_t r = static_cast<int64_t>(i) * C;
    const float* xr = x + r;
    float* o = out + r;
    const float ss = lanes_sum(C, [xr](int c) { return xr[c] * xr[c]; });
    const float s = 1.0f / sqrtf(ss / C + eps);
    for (int c = 0; c < C; ++c) o[c] = weight[c] * (xr[c] * s);
    rstd[i] = s;
  }
}
SL_CPU_SIMD_KERNEL(forward_rows,
                   (float* out, float* rstd, const float* x, const float* weight, int N, int C,
                    float eps),
                   (out, rstd, x, weight, N, C, eps))

SL_CPU_INLINE void backward_rows_body(float* dx, float* dweight, const float* dout, const float* x,
                                      const float* weight, const float* rstd, int N, int C) {
  for (int i = 0; i < N; ++i) {
    const int64_t r = static_cast<int64_t>(i) * C;
    const float* xr = x + r;
    const float* d = dout + r;
    float* g_out = dx + r;
    const float s = rstd[i];
    const float gn_mean =
        lanes_sum(C, [d, weight, xr, s](int c) { return d[c] * weight[c] * (xr[c] * s); }) / C;
    for (int c = 0; c < C; ++c) {
      const float n = xr[c] * s;
      g_out[c] += s * (d[c] * weight[c] - n * gn_mean);
    }
    // dweight: rows add in order, as rmsnorm_weight_grad_col.
    for (int c = 0; c < C; ++c) dweight[c] += d[c] * (xr[c] * s);
  }
}
SL_CPU_SIMD_KERNEL(backward_rows,
                   (float* dx, float* dweight, const float* dout, const float* x,
                    const float* weight, const float* rstd, int N, int C),
                   (dx, dweight, dout, x, weight, rstd, N, C))

void forward(Device&, float* out, float* rstd, const float* x, const float* weight, int N, int C,
             float eps) {
  forward_rows(out, rstd, x, weight, N, C, eps);
}

void backward(Device&, float* dx, float* dweight, const float* dout, const float* x,
              const float* weight, const float* rstd, int N, int C) {
  backward_rows(dx, dweight, dout, x, weight, rstd, N, C);
}

}  // namespace
}  // namespace cpu

const RmsNormKernels kCpuRmsNorm = {cpu::forward, cpu::backward};
}  // namespace shardlab
