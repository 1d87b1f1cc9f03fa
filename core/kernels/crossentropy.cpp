// Softmax + cross-entropy and its logits gradient on any device through its kernel table, the
// mean loss, and the CPU loops.
#include "core/kernels/crossentropy.hpp"

#include <vector>

#include "core/base/error.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

void crossentropy_forward(Device& dev, float* probs, float* losses, const int* targets, int N,
                          int V) {
  kernel_table(dev).crossentropy->forward(dev, probs, losses, targets, N, V);
}

void crossentropy_backward(Device& dev, float* dlogits, const float* probs, const int* targets,
                           float dloss, int N, int V) {
  kernel_table(dev).crossentropy->backward(dev, dlogits, probs, targets, dloss, N, V);
}

float mean_loss(Device& dev, const float* losses, int N) {
  std::vector<float> host(static_cast<size_t>(N));
  dev.copy_to_host(host.data(), losses, static_cast<int64_t>(N) * 4);
  double s = 0.0;
  for (float l : host) s += l;
  return N > 0 ? static_cast<float>(s / N) : 0.0f;
}

// ---- CPU --------------------------------------------------------------------------------------

namespace cpu {
namespace {

void check_target(int target, int i, int V) {
  if (target < 0 || target >= V)
    SL_THROW(InvalidArgument, "cross-entropy: target ", target, " at position ", i,
             " is outside the vocabulary [0, ", V, ")");
}

void forward(Device&, float* probs, float* losses, const int* targets, int N, int V) {
  for (int i = 0; i < N; ++i) {
    int target = -1;
    if (targets) {
      target = targets[i];
      check_target(target, i, V);
    }
    float loss = crossentropy_forward_row(probs + static_cast<int64_t>(i) * V, target, V);
    if (targets) losses[i] = loss;
  }
}

void backward(Device&, float* dlogits, const float* probs, const int* targets, float dloss, int N,
              int V) {
  for (int i = 0; i < N; ++i) {
    check_target(targets[i], i, V);
    int64_t r = static_cast<int64_t>(i) * V;
    crossentropy_backward_row(dlogits + r, probs + r, targets[i], dloss, V);
  }
}

}  // namespace
}  // namespace cpu

const CrossEntropyKernels kCpuCrossEntropy = {cpu::forward, cpu::backward};
}  // namespace shardlab
