// LayerNorm on any device through its kernel table, and the CPU loops: one row at a time through
// the shared row math.
#include "core/kernels/layernorm.hpp"

#include "core/base/cpu_simd.hpp"
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
// The row math of layernorm.hpp with its sums in kCpuLanes lanes (cpu_simd.hpp), at the CPU's
// vector width: the same bits at every width, run to run. (A GPU thread runs the sequential sums
// of layernorm.hpp's row functions.)

namespace cpu {
namespace {

SL_CPU_INLINE void forward_rows_body(float* out, float* mean, float* rstd, const float* x,
                                     const float* weight, const float* bias, int N, int C) {
  for (int i = 0; i < N; ++i) {
    const int64_t r = static_cast<int64_t>(i) * C;
    const float* xr = x + r;
    float* o = out + r;
    const float m = lanes_sum(C, [xr](int c) { return xr[c]; }) / C;
    const float var = lanes_sum(C,
                                [xr, m](int c) {
                                  const float d = xr[c] - m;  // two passes: no cancellation
                                  return d * d;
                                }) /
                      C;
    const float s = 1.0f / sqrtf(var + kLayerNormEps);
    for (int c = 0; c < C; ++c) o[c] = (xr[c] - m) * s * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = s;
  }
}
SL_CPU_SIMD_KERNEL(forward_rows,
                   (float* out, float* mean, float* rstd, const float* x, const float* weight,
                    const float* bias, int N, int C),
                   (out, mean, rstd, x, weight, bias, N, C))

SL_CPU_INLINE void backward_rows_body(float* dx, float* dweight, float* dbias, const float* dout,
                                      const float* x, const float* weight, const float* mean,
                                      const float* rstd, int N, int C) {
  for (int i = 0; i < N; ++i) {
    const int64_t r = static_cast<int64_t>(i) * C;
    const float* xr = x + r;
    const float* d = dout + r;
    float* g_out = dx + r;
    const float mu = mean[i], s = rstd[i];
    const float g_mean = lanes_sum(C, [d, weight](int c) { return d[c] * weight[c]; }) / C;
    const float gn_mean =
        lanes_sum(C,
                  [d, weight, xr, mu, s](int c) { return d[c] * weight[c] * ((xr[c] - mu) * s); }) /
        C;
    for (int c = 0; c < C; ++c) {
      const float n = (xr[c] - mu) * s;
      const float g = d[c] * weight[c];
      g_out[c] += s * (g - g_mean - n * gn_mean);
    }
    // dweight, dbias: rows add in order, as layernorm_param_grad_row.
    for (int c = 0; c < C; ++c) {
      dweight[c] += d[c] * (xr[c] - mu) * s;
      dbias[c] += d[c];
    }
  }
}
SL_CPU_SIMD_KERNEL(backward_rows,
                   (float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                    const float* weight, const float* mean, const float* rstd, int N, int C),
                   (dx, dweight, dbias, dout, x, weight, mean, rstd, N, C))

void forward(Device&, float* out, float* mean, float* rstd, const float* x, const float* weight,
             const float* bias, int N, int C) {
  forward_rows(out, mean, rstd, x, weight, bias, N, C);
}

void backward(Device&, float* dx, float* dweight, float* dbias, const float* dout, const float* x,
              const float* weight, const float* mean, const float* rstd, int N, int C) {
  backward_rows(dx, dweight, dbias, dout, x, weight, mean, rstd, N, C);
}

}  // namespace
}  // namespace cpu

const LayerNormKernels kCpuLayerNorm = {cpu::forward, cpu::backward};
}  // namespace shardlab
