// Linear layer from Device::gemm plus the bias kernels (device-agnostic).
#include "core/kernels/linear.hpp"

#include "core/kernels/residual.hpp"

namespace shardlab {

void linear_forward(Device& dev, float* out, const float* inp, const float* weight,
                    const float* bias, int N, int IC, int OC, bool accumulate) {
  // Bias first, then the product added on top (beta 1): no temporary for the fused residual.
  float beta = 1.0f;
  if (bias)
    bias_broadcast(dev, out, bias, N, OC, accumulate);
  else if (!accumulate)
    beta = 0.0f;
  dev.gemm(false, false, N, OC, IC, 1.0f, inp, IC, weight, OC, beta, out, OC);
}

void linear_backward(Device& dev, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int IC, int OC,
                     bool accumulate) {
  if (dinp)  // (N, IC) = (N, OC) @ (IC, OC)^T
    dev.gemm(false, true, N, IC, OC, 1.0f, dout, OC, weight, OC, 0.0f, dinp, IC);
  // (IC, OC) += (N, IC)^T @ (N, OC)
  dev.gemm(true, false, IC, OC, N, 1.0f, inp, IC, dout, OC, accumulate ? 1.0f : 0.0f, dweight, OC);
  if (!dbias) return;
  // OC values: zeroed, then the same row sums as +=.
  if (!accumulate) dev.fill_zero(dbias, static_cast<int64_t>(OC) * 4);
  bias_backward(dev, dbias, dout, N, OC);
}

void linear_oi_forward(Device& dev, float* out, const float* inp, const float* weight,
                       const float* bias, int N, int IC, int OC, bool accumulate) {
  float beta = 1.0f;
  if (bias)
    bias_broadcast(dev, out, bias, N, OC, accumulate);
  else if (!accumulate)
    beta = 0.0f;
  // (N, OC) = (N, IC) @ (OC, IC)^T
  dev.gemm(false, true, N, OC, IC, 1.0f, inp, IC, weight, IC, beta, out, OC);
}

void linear_oi_backward(Device& dev, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, int N, int IC, int OC,
                        bool accumulate) {
  if (dinp)  // (N, IC) = (N, OC) @ (OC, IC)
    dev.gemm(false, false, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
  // (OC, IC) += (N, OC)^T @ (N, IC)
  dev.gemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, accumulate ? 1.0f : 0.0f, dweight, IC);
  if (!dbias) return;
  if (!accumulate) dev.fill_zero(dbias, static_cast<int64_t>(OC) * 4);
  bias_backward(dev, dbias, dout, N, OC);
}

}  // namespace shardlab
