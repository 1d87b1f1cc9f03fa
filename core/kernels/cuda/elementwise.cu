// CUDA launchers of the element-wise array kernels (core/kernels/elementwise.hpp).
#include <cmath>
#include <vector>

#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/elementwise.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {
namespace cuda {

namespace {

__global__ void fill_kernel(float* x, float value, int64_t n) {
  SL_GRID_STRIDE(i, n) x[i] = value;
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  SL_GRID_STRIDE(i, n) x[i] *= s;
}

__global__ void axpy_kernel(float* y, float a, const float* x, int64_t n) {
  SL_GRID_STRIDE(i, n) y[i] = axpy_elem(y[i], a, x[i]);
}

__global__ void cast_from_f32_kernel(void* dst, DType t, const float* src, int64_t n) {
  SL_GRID_STRIDE(i, n) store_from_f32(dst, static_cast<size_t>(i), t, src[i]);
}

__global__ void cast_to_f32_kernel(float* dst, const void* src, DType t, int64_t n) {
  SL_GRID_STRIDE(i, n) dst[i] = load_as_f32(src, static_cast<size_t>(i), t);
}

// One double partial sum per block (a shared-memory tree); the host adds the partials in block
// order, so the result does not depend on scheduling.
__global__ void sum_squares_kernel(double* partials, const float* x, int64_t n) {
  __shared__ double shared[kThreads];
  double s = 0.0;
  SL_GRID_STRIDE(i, n) s += static_cast<double>(x[i]) * x[i];
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

void fill_array(Device& dev, float* x, float value, int64_t n) {
  if (n <= 0) return;
  Launch l(dev);
  fill_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(x, value, n);
  CUDA_CHECK_LAUNCH();
}

void scale_array(Device& dev, float* x, float s, int64_t n) {
  if (n <= 0) return;
  Launch l(dev);
  scale_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(x, s, n);
  CUDA_CHECK_LAUNCH();
}

void axpy(Device& dev, float* y, float a, const float* x, int64_t n) {
  if (n <= 0) return;
  Launch l(dev);
  axpy_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(y, a, x, n);
  CUDA_CHECK_LAUNCH();
}

void cast_from_f32(Device& dev, void* dst, DType dst_type, const float* src, int64_t n) {
  if (n <= 0) return;
  Launch l(dev);
  cast_from_f32_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(dst, dst_type, src, n);
  CUDA_CHECK_LAUNCH();
}

void cast_to_f32(Device& dev, float* dst, const void* src, DType src_type, int64_t n) {
  if (n <= 0) return;
  Launch l(dev);
  cast_to_f32_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(dst, src, src_type, n);
  CUDA_CHECK_LAUNCH();
}

double sum_squares(Device& dev, const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  Launch l(dev);
  // A modest grid: the partials come back to the host.
  const unsigned blocks = blocks_for(n) < 1024 ? blocks_for(n) : 1024;
  Buffer partials =
      dev.alloc(static_cast<int64_t>(blocks) * sizeof(double), MemCategory::workspace);
  sum_squares_kernel<<<blocks, kThreads, 0, l.stream>>>(partials.as<double>(), x, n);
  CUDA_CHECK_LAUNCH();
  std::vector<double> host(blocks);
  dev.copy_to_host(host.data(), partials.data(), partials.bytes());
  double s = 0.0;
  for (double p : host) s += p;
  return s;
}

// The sum of squares is finite exactly when every element is (elementwise.hpp). Calls name cuda::
// so that argument-dependent lookup does not add the public shardlab:: functions of the same type.
bool all_finite(Device& dev, const void* x, DType t, int64_t n) {
  if (t == DType::f32)
    return std::isfinite(cuda::sum_squares(dev, static_cast<const float*>(x), n));
  Buffer tmp = dev.alloc(n * 4, MemCategory::workspace);
  cuda::cast_to_f32(dev, tmp.f32(), x, t, n);
  return std::isfinite(cuda::sum_squares(dev, tmp.f32(), n));
}

}  // namespace
}  // namespace cuda

const ElementwiseKernels kCudaElementwise = {
    cuda::fill_array,  cuda::scale_array, cuda::axpy,      cuda::cast_from_f32,
    cuda::cast_to_f32, cuda::sum_squares, cuda::all_finite};

}  // namespace shardlab
