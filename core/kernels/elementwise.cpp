// The element-wise array kernels on any device through its kernel table, and the CPU loops.
#include "core/kernels/elementwise.hpp"

#include "core/kernels/kernel_table.hpp"

namespace shardlab {

void fill_array(Device& dev, float* x, float value, int64_t n) {
  kernel_table(dev).elementwise->fill(dev, x, value, n);
}

void scale_array(Device& dev, float* x, float s, int64_t n) {
  kernel_table(dev).elementwise->scale(dev, x, s, n);
}

void axpy(Device& dev, float* y, float a, const float* x, int64_t n) {
  kernel_table(dev).elementwise->axpy(dev, y, a, x, n);
}

void cast_from_f32(Device& dev, void* dst, DType dst_type, const float* src, int64_t n) {
  if (dst_type == DType::f32) return dev.copy(dst, src, n * 4);
  kernel_table(dev).elementwise->cast_from_f32(dev, dst, dst_type, src, n);
}

void cast_to_f32(Device& dev, float* dst, const void* src, DType src_type, int64_t n) {
  if (src_type == DType::f32) return dev.copy(dst, src, n * 4);
  kernel_table(dev).elementwise->cast_to_f32(dev, dst, src, src_type, n);
}

double sum_squares(Device& dev, const float* x, int64_t n) {
  return kernel_table(dev).elementwise->sum_squares(dev, x, n);
}

bool all_finite(Device& dev, const void* x, DType t, int64_t n) {
  return kernel_table(dev).elementwise->all_finite(dev, x, t, n);
}

// ---- CPU --------------------------------------------------------------------------------------

namespace cpu {
namespace {

void fill(Device&, float* x, float value, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

void scale(Device&, float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void axpy(Device&, float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = axpy_elem(y[i], a, x[i]);
}

void cast_from_f32(Device&, void* dst, DType dst_type, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_from_f32(dst, static_cast<size_t>(i), dst_type, src[i]);
}

void cast_to_f32(Device&, float* dst, const void* src, DType src_type, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_as_f32(src, static_cast<size_t>(i), src_type);
}

double sum_squares(Device&, const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

// 1 when any element's exponent bits are all ones (Inf or NaN). An OR over the bits rather than an
// early exit: the loop stays branch-free and vectorises.
template <typename Bits>
bool any_exponent_all_ones(const Bits* x, int64_t n, Bits exp_mask) {
  Bits bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<Bits>((x[i] & exp_mask) == exp_mask);
  return bad != 0;
}

bool all_finite(Device&, const void* x, DType t, int64_t n) {
  switch (t) {
    case DType::f32:
      return !any_exponent_all_ones(static_cast<const uint32_t*>(x), n, uint32_t{0x7f800000u});
    case DType::bf16:
      return !any_exponent_all_ones(static_cast<const uint16_t*>(x), n, uint16_t{0x7f80u});
    default: return !any_exponent_all_ones(static_cast<const uint16_t*>(x), n, uint16_t{0x7c00u});
  }
}

}  // namespace
}  // namespace cpu

const ElementwiseKernels kCpuElementwise = {cpu::fill,          cpu::scale,       cpu::axpy,
                                            cpu::cast_from_f32, cpu::cast_to_f32, cpu::sum_squares,
                                            cpu::all_finite};
}  // namespace shardlab
