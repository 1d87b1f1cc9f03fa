// Linear layer (HF Conv1D layout, weight (IC, OC)): out = inp @ weight + bias. Built from
// Device::gemm and the residual-family bias kernels, so it runs on any device as is.
// linear_oi_*: the same with weight (OC, IC), torch.nn.Linear's layout (Llama's projections):
// out = inp @ weight^T + bias, the GEMMs transposing instead of the data.
#pragma once

#include "core/device/device.hpp"

namespace shardlab {

// accumulate false: out = inp @ weight + bias;  true: out += inp @ weight + bias (a fused
// residual). bias may be null.
void linear_forward(Device& dev, float* out /* (N, OC) */, const float* inp /* (N, IC) */,
                    const float* weight /* (IC, OC) */, const float* bias /* (OC) */, int N, int IC,
                    int OC, bool accumulate = false);

// dinp = dout @ weight^T (overwritten; skipped when null), dweight += inp^T @ dout,
// dbias += column sums of dout (skipped when null). accumulate false: dweight and dbias are
// written instead (beta 0), with the bits of += into zeros.
void linear_backward(Device& dev, float* dinp /* (N, IC) */, float* dweight /* (IC, OC) */,
                     float* dbias /* (OC) */, const float* dout /* (N, OC) */,
                     const float* inp /* (N, IC) */, const float* weight /* (IC, OC) */, int N,
                     int IC, int OC, bool accumulate = true);

// weight (OC, IC). As linear_forward otherwise.
void linear_oi_forward(Device& dev, float* out /* (N, OC) */, const float* inp /* (N, IC) */,
                       const float* weight /* (OC, IC) */, const float* bias /* (OC) */, int N,
                       int IC, int OC, bool accumulate = false);
// dinp = dout @ weight (skipped when null), dweight (OC, IC) += dout^T @ inp, dbias as
// linear_backward's.
void linear_oi_backward(Device& dev, float* dinp /* (N, IC) */, float* dweight /* (OC, IC) */,
                        float* dbias /* (OC) */, const float* dout /* (N, OC) */,
                        const float* inp /* (N, IC) */, const float* weight /* (OC, IC) */, int N,
                        int IC, int OC, bool accumulate = true);

}  // namespace shardlab
