// CPU loops of the token + position embedding.
#include "core/kernels/encoder.hpp"

#include "core/base/error.hpp"

namespace shardlab {

namespace {
void check_token(int token, int b, int t, int V) {
  if (token < 0 || token >= V)
    SL_THROW(InvalidArgument, "embedding: token ", token, " at (b ", b, ", t ", t,
             ") is outside the vocabulary [0, ", V, ")");
}
}  // namespace

void encoder_forward(Device& dev, float* out, const int* tokens, const float* wte,
                     const float* wpe, int B, int T, int C, int V) {
#if SHARDLAB_WITH_CUDA
  if (dev.kind() == DeviceKind::cuda) return cuda::encoder_forward(dev, out, tokens, wte, wpe, B, T, C, V);
#endif
  (void)dev;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      int token = tokens[b * T + t];
      check_token(token, b, t, V);
      encoder_forward_row(out + (static_cast<int64_t>(b) * T + t) * C, wte, wpe, token, t, C);
    }
}

void encoder_backward(Device& dev, float* dwte, float* dwpe, const float* dout, const int* tokens,
                      int B, int T, int C, int V) {
#if SHARDLAB_WITH_CUDA
  if (dev.kind() == DeviceKind::cuda) return cuda::encoder_backward(dev, dwte, dwpe, dout, tokens, B, T, C, V);
#endif
  (void)dev;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      int token = tokens[b * T + t];
      check_token(token, b, t, V);
      encoder_backward_row(dwte, dwpe, dout + (static_cast<int64_t>(b) * T + t) * C, token, t, C);
    }
}

}  // namespace shardlab
