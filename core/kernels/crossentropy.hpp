// Softmax + cross-entropy over the vocabulary, and its gradient with respect to the logits:
//   p = softmax(z),  loss = -log p[target],  dloss/dz = p - onehot(target).
#pragma once

#include <math.h>  // logf: the C name exists on host and device alike

#include "core/base/hd.hpp"
#include "core/device/device.hpp"
#include "core/kernels/fastmath.hpp"

namespace shardlab {

// In place: row holds logits on entry, probabilities on exit. Returns -log p[target], or 0 when
// target < 0 (softmax only). Subtracting the max keeps the exponentials in (0, 1].
SL_HD float crossentropy_forward_row(float* row /* (V) */, int target, int V) {
  float mx = row[0];
  for (int i = 1; i < V; ++i) mx = row[i] > mx ? row[i] : mx;
  float sum = 0.0f;
  for (int i = 0; i < V; ++i) {
    row[i] = exp_nonpos_approx(row[i] - mx);
    sum += row[i];
  }
  float inv = 1.0f / sum;
  for (int i = 0; i < V; ++i) row[i] *= inv;
  if (target < 0) return 0.0f;
  // -log p computed from the normalised value; 1e-30 guards log(0) after underflow. The compare
  // is written so that a NaN p (diverged logits) stays NaN rather than becoming the guard's 69.
  float p = row[target];
  return -logf(p < 1e-30f ? 1e-30f : p);
}

// dlogits = dloss * (p - onehot(target)), overwritten.
SL_HD void crossentropy_backward_row(float* dlogits /* (V) */, const float* probs /* (V) */,
                                     int target, float dloss, int V) {
  for (int i = 0; i < V; ++i) dlogits[i] = dloss * (probs[i] - (i == target ? 1.0f : 0.0f));
}

// probs: logits in, probabilities out. losses[i] = -log p[i, targets[i]]; targets may be null
// (softmax only, losses untouched and may be null). The CPU path throws InvalidArgument for a
// target outside [0, V).
void crossentropy_forward(Device& dev, float* probs /* (N, V) */, float* losses /* (N) */,
                          const int* targets /* (N) */, int N, int V);
// dlogits overwritten; dloss is the gradient of the loss at every position (1/N for a mean).
void crossentropy_backward(Device& dev, float* dlogits /* (N, V) */,
                           const float* probs /* (N, V) */, const int* targets /* (N) */,
                           float dloss, int N, int V);
// The mean of losses, on the host (accumulated in double).
float mean_loss(Device& dev, const float* losses /* (N) */, int N);

// This family's entry in a device's kernel table (kernel_table.hpp).
struct CrossEntropyKernels {
  void (*forward)(Device& dev, float* probs, float* losses, const int* targets, int N, int V);
  void (*backward)(Device& dev, float* dlogits, const float* probs, const int* targets, float dloss,
                   int N, int V);
};

}  // namespace shardlab
