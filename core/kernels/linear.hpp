// Linear layer (HF Conv1D layout, weight (IC, OC)): out = inp @ weight + bias. Built from
// Device::gemm and the residual-family bias kernels, so it runs on any device as is.
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

}  // namespace shardlab
