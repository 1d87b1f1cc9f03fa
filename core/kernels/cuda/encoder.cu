// CUDA launchers of the token + position embedding (core/kernels/encoder.hpp).
// Forward: one thread per (b, t) row. Backward: the CPU loop adds rows into the tables in row
// order; here each thread owns table entries and adds the same values in the same order, so the
// GPU gradients are bit-identical to the CPU's and need no atomics:
//   dwpe: one thread per (t, c), summing over b;  dwte: one thread per column c, over all rows.
// A token outside [0, V) cannot throw on the GPU: its output row becomes NaN and its gradient is
// dropped (the CPU path throws for it).
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/encoder.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {
namespace cuda {

namespace {

__global__ void encoder_forward_kernel(float* out, const int* tokens, const float* wte,
                                       const float* wpe, int64_t rows, int T, int C, int V) {
  SL_GRID_STRIDE(r, rows) {
    const int token = tokens[r];
    float* row = out + r * C;
    if (token < 0 || token >= V) {
      for (int c = 0; c < C; ++c) row[c] = __int_as_float(0x7fc00000);
      continue;
    }
    encoder_forward_row(row, wte, wpe, token, static_cast<int>(r % T), C);
  }
}

__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, const int* tokens,
                                            int B, int T, int C, int V) {
  const int64_t n = static_cast<int64_t>(T) * C;
  SL_GRID_STRIDE(i, n) {
    const int64_t t = i / C;
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) {
      const int64_t r = b * static_cast<int64_t>(T) + t;
      const int token = tokens[r];
      if (token >= 0 && token < V) acc += dout[r * C + (i % C)];
    }
    dwpe[i] = acc;
  }
}

__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout, const int* tokens,
                                            int64_t rows, int C, int V) {
  SL_GRID_STRIDE(c, C) {
    for (int64_t r = 0; r < rows; ++r) {
      const int token = tokens[r];
      if (token >= 0 && token < V) dwte[static_cast<int64_t>(token) * C + c] += dout[r * C + c];
    }
  }
}

void encoder_forward(Device& dev, float* out, const int* tokens, const float* wte, const float* wpe,
                     int B, int T, int C, int V) {
  const int64_t rows = static_cast<int64_t>(B) * T;
  if (rows <= 0 || C <= 0) return;
  Launch l(dev);
  encoder_forward_kernel<<<blocks_for(rows), kThreads, 0, l.stream>>>(out, tokens, wte, wpe, rows,
                                                                      T, C, V);
  CUDA_CHECK_LAUNCH();
}

void encoder_backward(Device& dev, float* dwte, float* dwpe, const float* dout, const int* tokens,
                      int B, int T, int C, int V) {
  const int64_t rows = static_cast<int64_t>(B) * T;
  if (rows <= 0 || C <= 0) return;
  Launch l(dev);
  if (dwpe) {
    encoder_backward_wpe_kernel<<<blocks_for(static_cast<int64_t>(T) * C), kThreads, 0, l.stream>>>(
        dwpe, dout, tokens, B, T, C, V);
    CUDA_CHECK_LAUNCH();
  }
  encoder_backward_wte_kernel<<<blocks_for(C), kThreads, 0, l.stream>>>(dwte, dout, tokens, rows, C,
                                                                        V);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

const EncoderKernels kCudaEncoder = {cuda::encoder_forward, cuda::encoder_backward};

}  // namespace shardlab
