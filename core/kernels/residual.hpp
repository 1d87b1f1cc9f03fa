// Residual add, bias broadcast over rows, and the bias gradient (a column sum).
#pragma once

#include <cstdint>

#include "core/base/hd.hpp"
#include "core/device/device.hpp"

namespace shardlab {

SL_HD float residual_elem(float a, float b) { return a + b; }

// dbias[o] += the sum over N rows of column o: one thread per column on a GPU.
SL_HD void bias_grad_col(float* dbias, const float* dout, int N, int OC, int o) {
  float s = 0.0f;
  for (int i = 0; i < N; ++i) s += dout[static_cast<long long>(i) * OC + o];
  dbias[o] += s;
}

// out = a + b; out may alias a or b.
void residual_forward(Device& dev, float* out, const float* a, const float* b, int64_t n);
// out[i, o] = bias[o] (accumulate false) or out[i, o] += bias[o] (accumulate true).
void bias_broadcast(Device& dev, float* out /* (N, OC) */, const float* bias /* (OC) */, int N,
                    int OC, bool accumulate);
// dbias += column sums of dout.
void bias_backward(Device& dev, float* dbias /* (OC) */, const float* dout /* (N, OC) */, int N,
                   int OC);

// This family's entry in a device's kernel table (kernel_table.hpp).
struct ResidualKernels {
  void (*forward)(Device& dev, float* out, const float* a, const float* b, int64_t n);
  void (*bias_broadcast)(Device& dev, float* out, const float* bias, int N, int OC,
                         bool accumulate);
  void (*bias_backward)(Device& dev, float* dbias, const float* dout, int N, int OC);
};

}  // namespace shardlab
