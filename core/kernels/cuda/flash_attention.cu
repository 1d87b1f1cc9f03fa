// CUDA kernels of flash attention (core/kernels/flash_attention.hpp), written to be read: one
// thread per query (or key) row, kTile rows of keys (or queries) at a time in shared memory, the
// row arithmetic in the header's SL_HD functions (flash_forward_row_tile, flash_backward_pair),
// which the CPU tests run too. fp32 arithmetic on CUDA cores, no tensor cores: correct on any
// architecture, not fast; a tuned kernel (FlashAttention-2's) would replace these launches and
// keep their contract.
//
// Backward runs three kernels and no atomics, so its results do not depend on scheduling:
// D_t = dO_t . O_t per query row; dK and dV per key row, summing over the queries that see it
// (and over the query heads of its group); dQ per query row, summing over the keys it sees.
#include <cmath>

#include "core/base/error.hpp"
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/flash_attention.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {
namespace cuda {

namespace {

constexpr int kRows = 64;  // threads per block: one row each
constexpr int kTile = 16;  // rows of the other side in shared memory per step

// Element d of head h at position (b, t) of a rows tensor, as fp32.
__device__ float at(RowsIn x, DType t_, int64_t row, int h, int hs, int d) {
  return load_as_f32(x.data, static_cast<size_t>(row * x.ld + static_cast<int64_t>(h) * hs + d),
                     t_);
}

// n rows of head h from position row0 on into shared memory, hs apart.
__device__ void load_rows(float* dst, RowsIn x, DType t_, int64_t row0, int n, int h, int hs) {
  for (int i = threadIdx.x; i < n * hs; i += blockDim.x)
    dst[i] = at(x, t_, row0 + i / hs, h, hs, i % hs);
}

__device__ void store_row(RowsOut y, DType t_, int64_t row, int h, int hs, const float* src) {
  for (int d = 0; d < hs; ++d)
    store_from_f32(y.data, static_cast<size_t>(row * y.ld + static_cast<int64_t>(h) * hs + d), t_,
                   src[d]);
}

// grid (ceil(T / kRows), B NH); shared: K and V tiles.
__global__ void forward_kernel(FlashShape s, float scale, RowsOut out, float* lse, RowsIn q,
                               RowsIn k, RowsIn v) {
  extern __shared__ float smem[];
  float* ks = smem;
  float* vs = smem + kTile * s.hs;
  const int bh = blockIdx.y, b = bh / s.NH, h = bh % s.NH, g = h / s.group();
  const int t = blockIdx.x * kRows + threadIdx.x;
  const bool active = t < s.T;
  const int64_t row = static_cast<int64_t>(b) * s.T + t;
  float qr[kFlashMaxHeadSize], o[kFlashMaxHeadSize], sc[kTile];
  float m = -INFINITY, l = 0.0f;
  if (active)
    for (int d = 0; d < s.hs; ++d) {
      qr[d] = at(q, s.dtype, row, h, s.hs, d);
      o[d] = 0.0f;
    }
  const int last = min(s.T, (blockIdx.x + 1) * kRows);  // keys past the block's last row: hidden
  for (int c0 = 0; c0 < last; c0 += kTile) {
    const int n_tile = min(kTile, last - c0);
    const int64_t krow0 = static_cast<int64_t>(b) * s.T + c0;
    load_rows(ks, k, s.dtype, krow0, n_tile, g, s.hs);
    load_rows(vs, v, s.dtype, krow0, n_tile, g, s.hs);
    __syncthreads();
    const int n = min(n_tile, t - c0 + 1);
    if (active && n > 0) flash_forward_row_tile(o, &m, &l, sc, qr, ks, vs, s.hs, n, s.hs, scale);
    __syncthreads();
  }
  if (!active) return;
  lse[static_cast<int64_t>(bh) * s.T + t] = flash_forward_row_finish(o, m, l, s.hs);
  store_row(out, s.dtype, row, h, s.hs, o);
}

// D (B, NH, T) = dO . O per row; grid-stride over rows.
__global__ void row_dot_kernel(FlashShape s, float* D, RowsIn dout, RowsIn out) {
  const int64_t rows = static_cast<int64_t>(s.B) * s.NH * s.T;
  SL_GRID_STRIDE(i, rows) {
    const int64_t bh = i / s.T;
    const int t = static_cast<int>(i % s.T);
    const int b = static_cast<int>(bh / s.NH), h = static_cast<int>(bh % s.NH);
    const int64_t row = static_cast<int64_t>(b) * s.T + t;
    float acc = 0.0f;
    for (int d = 0; d < s.hs; ++d)
      acc += at(dout, s.dtype, row, h, s.hs, d) * at(out, s.dtype, row, h, s.hs, d);
    D[i] = acc;
  }
}

// dK, dV: grid (ceil(T / kRows), B NKV), one thread per key row j of kv head g; shared: Q and dO
// tiles with their rows' lse and D.
__global__ void dkdv_kernel(FlashShape s, float scale, RowsOut dk, RowsOut dv, RowsIn dout,
                            RowsIn q, RowsIn k, RowsIn v, const float* lse, const float* D) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* dos = qs + kTile * s.hs;
  float* lses = dos + kTile * s.hs;
  float* ds_ = lses + kTile;
  const int bg = blockIdx.y, b = bg / s.NKV, g = bg % s.NKV;
  const int j = blockIdx.x * kRows + threadIdx.x;
  const bool active = j < s.T;
  const int64_t row = static_cast<int64_t>(b) * s.T + j;
  float kr[kFlashMaxHeadSize], vr[kFlashMaxHeadSize], dkr[kFlashMaxHeadSize],
      dvr[kFlashMaxHeadSize];
  if (active)
    for (int d = 0; d < s.hs; ++d) {
      kr[d] = at(k, s.dtype, row, g, s.hs, d);
      vr[d] = at(v, s.dtype, row, g, s.hs, d);
      dkr[d] = dvr[d] = 0.0f;
    }
  for (int hh = 0; hh < s.group(); ++hh) {
    const int h = g * s.group() + hh;
    const int64_t bh = static_cast<int64_t>(b) * s.NH + h;
    for (int t0 = blockIdx.x * kRows; t0 < s.T; t0 += kTile) {  // earlier queries see no key here
      const int n_tile = min(kTile, s.T - t0);
      const int64_t qrow0 = static_cast<int64_t>(b) * s.T + t0;
      load_rows(qs, q, s.dtype, qrow0, n_tile, h, s.hs);
      load_rows(dos, dout, s.dtype, qrow0, n_tile, h, s.hs);
      for (int i = threadIdx.x; i < n_tile; i += blockDim.x) {
        lses[i] = lse[bh * s.T + t0 + i];
        ds_[i] = D[bh * s.T + t0 + i];
      }
      __syncthreads();
      if (active)
        for (int i = max(0, j - t0); i < n_tile; ++i)  // queries t >= j
          flash_backward_pair(nullptr, dkr, dvr, qs + i * s.hs, kr, vr, dos + i * s.hs, lses[i],
                              ds_[i], s.hs, scale);
      __syncthreads();
    }
  }
  if (!active) return;
  store_row(dk, s.dtype, row, g, s.hs, dkr);
  store_row(dv, s.dtype, row, g, s.hs, dvr);
}

// dQ: grid (ceil(T / kRows), B NH), one thread per query row t; shared: K and V tiles.
__global__ void dq_kernel(FlashShape s, float scale, RowsOut dq, RowsIn dout, RowsIn q, RowsIn k,
                          RowsIn v, const float* lse, const float* D) {
  extern __shared__ float smem[];
  float* ks = smem;
  float* vs = smem + kTile * s.hs;
  const int bh = blockIdx.y, b = bh / s.NH, h = bh % s.NH, g = h / s.group();
  const int t = blockIdx.x * kRows + threadIdx.x;
  const bool active = t < s.T;
  const int64_t row = static_cast<int64_t>(b) * s.T + t;
  float qr[kFlashMaxHeadSize], dor[kFlashMaxHeadSize], dqr[kFlashMaxHeadSize];
  float lse_t = 0.0f, D_t = 0.0f;
  if (active) {
    for (int d = 0; d < s.hs; ++d) {
      qr[d] = at(q, s.dtype, row, h, s.hs, d);
      dor[d] = at(dout, s.dtype, row, h, s.hs, d);
      dqr[d] = 0.0f;
    }
    lse_t = lse[static_cast<int64_t>(bh) * s.T + t];
    D_t = D[static_cast<int64_t>(bh) * s.T + t];
  }
  const int last = min(s.T, (blockIdx.x + 1) * kRows);
  for (int c0 = 0; c0 < last; c0 += kTile) {
    const int n_tile = min(kTile, last - c0);
    const int64_t krow0 = static_cast<int64_t>(b) * s.T + c0;
    load_rows(ks, k, s.dtype, krow0, n_tile, g, s.hs);
    load_rows(vs, v, s.dtype, krow0, n_tile, g, s.hs);
    __syncthreads();
    if (active)
      for (int c = 0; c < n_tile && c0 + c <= t; ++c)
        flash_backward_pair(dqr, nullptr, nullptr, qr, ks + c * s.hs, vs + c * s.hs, dor, lse_t,
                            D_t, s.hs, scale);
    __syncthreads();
  }
  if (active) store_row(dq, s.dtype, row, h, s.hs, dqr);
}

dim3 grid_for(const FlashShape& s, int heads) {
  const int64_t y = static_cast<int64_t>(s.B) * heads;
  SL_CHECK(y <= 65535, "flash attention on CUDA: B x heads ", y, " above the grid's 65535");
  return dim3(static_cast<unsigned>((s.T + kRows - 1) / kRows), static_cast<unsigned>(y));
}

void forward(Device& dev, const FlashShape& s, RowsOut out, float* lse, RowsIn q, RowsIn k,
             RowsIn v, void*) {
  Launch l(dev);
  const size_t shared = 2 * kTile * static_cast<size_t>(s.hs) * sizeof(float);
  forward_kernel<<<grid_for(s, s.NH), kRows, shared, l.stream>>>(s, s.score_scale(), out, lse, q, k,
                                                                 v);
  CUDA_CHECK_LAUNCH();
}

void backward(Device& dev, const FlashShape& s, RowsOut dq, RowsOut dk, RowsOut dv, RowsIn dout,
              RowsIn q, RowsIn k, RowsIn v, RowsIn out, const float* lse, void* workspace) {
  Launch l(dev);
  float* D = static_cast<float*>(workspace);  // (B, NH, T): the workspace's first part
  const float scale = s.score_scale();
  const int64_t rows = static_cast<int64_t>(s.B) * s.NH * s.T;
  row_dot_kernel<<<blocks_for(rows), kThreads, 0, l.stream>>>(s, D, dout, out);
  CUDA_CHECK_LAUNCH();
  const size_t tiles = 2 * kTile * static_cast<size_t>(s.hs) * sizeof(float);
  dkdv_kernel<<<grid_for(s, s.NKV), kRows, tiles + 2 * kTile * sizeof(float), l.stream>>>(
      s, scale, dk, dv, dout, q, k, v, lse, D);
  CUDA_CHECK_LAUNCH();
  dq_kernel<<<grid_for(s, s.NH), kRows, tiles, l.stream>>>(s, scale, dq, dout, q, k, v, lse, D);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

const FlashAttentionKernels kCudaFlashAttention = {cuda::forward, cuda::backward};

}  // namespace shardlab
