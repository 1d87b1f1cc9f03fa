// CPU loops of softmax + cross-entropy and its logits gradient.
#include "core/kernels/crossentropy.hpp"

#include <vector>

#include "core/base/error.hpp"

namespace shardlab {

namespace {
void check_target(int target, int i, int V) {
  if (target < 0 || target >= V)
    SL_THROW(InvalidArgument, "cross-entropy: target ", target, " at position ", i,
             " is outside the vocabulary [0, ", V, ")");
}
}  // namespace

void crossentropy_forward(Device& dev, float* probs, float* losses, const int* targets, int N,
                          int V) {
#if SHARDLAB_WITH_CUDA
  if (dev.kind() == DeviceKind::cuda) return cuda::crossentropy_forward(dev, probs, losses, targets, N, V);
#endif
  (void)dev;
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

void crossentropy_backward(Device& dev, float* dlogits, const float* probs, const int* targets,
                           float dloss, int N, int V) {
#if SHARDLAB_WITH_CUDA
  if (dev.kind() == DeviceKind::cuda) return cuda::crossentropy_backward(dev, dlogits, probs, targets, dloss, N, V);
#endif
  (void)dev;
  for (int i = 0; i < N; ++i) {
    check_target(targets[i], i, V);
    int64_t r = static_cast<int64_t>(i) * V;
    crossentropy_backward_row(dlogits + r, probs + r, targets[i], dloss, V);
  }
}

float mean_loss(Device& dev, const float* losses, int N) {
  std::vector<float> host(static_cast<size_t>(N));
  dev.copy_to_host(host.data(), losses, static_cast<int64_t>(N) * 4);
  double s = 0.0;
  for (float l : host) s += l;
  return N > 0 ? static_cast<float>(s / N) : 0.0f;
}

}  // namespace shardlab
