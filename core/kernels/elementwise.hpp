// Element-wise array kernels the engine needs around the model: fill, scale, axpy, dtype casts for
// mixed precision (core/base/dtype.hpp rounding), and the sum of squares for gradient clipping.
#pragma once

#include <cstdint>

#include "core/base/dtype.hpp"
#include "core/base/hd.hpp"
#include "core/device/device.hpp"

namespace shardlab {

SL_HD float axpy_elem(float y, float a, float x) { return y + a * x; }

void fill_array(Device& dev, float* x, float value, int64_t n);
// x *= s
void scale_array(Device& dev, float* x, float s, int64_t n);
// y += a * x
void axpy(Device& dev, float* y, float a, const float* x, int64_t n);
// dst (n elements of dst_type) = src rounded to nearest even (identity copy for f32).
void cast_from_f32(Device& dev, void* dst, DType dst_type, const float* src, int64_t n);
// dst = src (n elements of src_type) widened to f32 (exact).
void cast_to_f32(Device& dev, float* dst, const void* src, DType src_type, int64_t n);
// sum_i x_i^2 on the host, accumulated in double (the squared L2 norm, for clipping).
double sum_squares(Device& dev, const float* x, int64_t n);
// True when none of the n elements of type t is NaN or Inf: the engine's per-step divergence
// check. On the CPU an integer test of the exponent bits (vectorises, no float compare); on a GPU
// sum_squares, which is finite exactly when every element is (|x| < 2^128, so even 2^63 squares
// stay far below the double's 2^1024).
bool all_finite(Device& dev, const void* x, DType t, int64_t n);

// This family's entry in a device's kernel table (kernel_table.hpp). The casts are never
// called with f32 (the public functions copy then).
struct ElementwiseKernels {
  void (*fill)(Device& dev, float* x, float value, int64_t n);
  void (*scale)(Device& dev, float* x, float s, int64_t n);
  void (*axpy)(Device& dev, float* y, float a, const float* x, int64_t n);
  void (*cast_from_f32)(Device& dev, void* dst, DType dst_type, const float* src, int64_t n);
  void (*cast_to_f32)(Device& dev, float* dst, const void* src, DType src_type, int64_t n);
  double (*sum_squares)(Device& dev, const float* x, int64_t n);
  bool (*all_finite)(Device& dev, const void* x, DType t, int64_t n);
};

}  // namespace shardlab
