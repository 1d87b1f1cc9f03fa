// The token + position embedding on any device through its kernel table, and the CPU loops.
#include "core/kernels/encoder.hpp"

#include "core/base/error.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

void encoder_forward(Device& dev, float* out, const int* tokens, const float* wte, const float* wpe,
                     int B, int T, int C, int V) {
  kernel_table(dev).encoder->forward(dev, out, tokens, wte, wpe, B, T, C, V);
}

void encoder_backward(Device& dev, float* dwte, float* dwpe, const float* dout, const int* tokens,
                      int B, int T, int C, int V) {
  kernel_table(dev).encoder->backward(dev, dwte, dwpe, dout, tokens, B, T, C, V);
}

// ---- CPU --------------------------------------------------------------------------------------

namespace cpu {
namespace {

// fn(row, token, t) for every (b, t) in order, row = b * T + t; throws InvalidArgument naming the
// position when a token is outside [0, V), after the rows before it were done.
template <typename Fn>
void for_each_token(const int* tokens, int B, int T, int V, Fn&& fn) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const int64_t row = static_cast<int64_t>(b) * T + t;
      const int token = tokens[row];
      if (token < 0 || token >= V)
        SL_THROW(InvalidArgument, "embedding: token ", token, " at (b ", b, ", t ", t,
                 ") is outside the vocabulary [0, ", V, ")");
      fn(row, token, t);
    }
}

void forward(Device&, float* out, const int* tokens, const float* wte, const float* wpe, int B,
             int T, int C, int V) {
  for_each_token(tokens, B, T, V, [&](int64_t row, int token, int t) {
    encoder_forward_row(out + row * C, wte, wpe, token, t, C);
  });
}

void backward(Device&, float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T,
              int C, int V) {
  for_each_token(tokens, B, T, V, [&](int64_t row, int token, int t) {
    encoder_backward_row(dwte, dwpe, dout + row * C, token, t, C);
  });
}

}  // namespace
}  // namespace cpu

const EncoderKernels kCpuEncoder = {cpu::forward, cpu::backward};
}  // namespace shardlab
