// Rotary position embedding on any device through its kernel table, and the CPU loops.
#include "core/kernels/rope.hpp"

#include "core/base/cpu_simd.hpp"
#include "core/base/error.hpp"
#include "core/kernels/kernel_table.hpp"

namespace shardlab {

namespace {
void check_heads(int n_heads, int hs, int64_t ld, const char* fn) {
  SL_CHECK(hs > 0 && hs % 2 == 0, fn, ": head size ", hs, " must be even");
  SL_CHECK(static_cast<int64_t>(n_heads) * hs <= ld, fn, ": ", n_heads, " heads of ", hs,
           " do not fit a row of ", ld);
}
}  // namespace

void rope_table(Device& dev, float* cos_sin, int T, int hs, const RopeParams& p) {
  SL_CHECK(hs > 0 && hs % 2 == 0, "rope_table: head size ", hs, " must be even");
  kernel_table(dev).rope->table(dev, cos_sin, T, hs, p);
}

void rope_forward(Device& dev, float* x, const float* cos_sin, int B, int T, int n_heads, int hs,
                  int64_t ld) {
  check_heads(n_heads, hs, ld, "rope_forward");
  kernel_table(dev).rope->forward(dev, x, cos_sin, B, T, n_heads, hs, ld);
}

void rope_backward(Device& dev, float* dx, const float* cos_sin, int B, int T, int n_heads, int hs,
                   int64_t ld) {
  check_heads(n_heads, hs, ld, "rope_backward");
  kernel_table(dev).rope->backward(dev, dx, cos_sin, B, T, n_heads, hs, ld);
}

// ---- CPU --------------------------------------------------------------------------------------
// Element-wise pairs, vectorised at the CPU's width (cpu_simd.hpp): the same bits at every width.
// The table's cosf and sinf are libm calls, T * hs / 2 of each per table: one table serves every
// layer of a step.

namespace cpu {
namespace {

SL_CPU_INLINE void forward_rows_body(float* x, const float* cos_sin, int B, int T, int n_heads,
                                     int hs, int64_t ld) {
  for (int64_t r = 0; r < static_cast<int64_t>(B) * T; ++r) {
    const float* cs = cos_sin + (r % T) * hs;
    for (int h = 0; h < n_heads; ++h) rope_forward_head(x + r * ld + h * hs, cs, hs);
  }
}
SL_CPU_SIMD_KERNEL(forward_rows,
                   (float* x, const float* cos_sin, int B, int T, int n_heads, int hs, int64_t ld),
                   (x, cos_sin, B, T, n_heads, hs, ld))

SL_CPU_INLINE void backward_rows_body(float* dx, const float* cos_sin, int B, int T, int n_heads,
                                      int hs, int64_t ld) {
  for (int64_t r = 0; r < static_cast<int64_t>(B) * T; ++r) {
    const float* cs = cos_sin + (r % T) * hs;
    for (int h = 0; h < n_heads; ++h) rope_backward_head(dx + r * ld + h * hs, cs, hs);
  }
}
SL_CPU_SIMD_KERNEL(backward_rows,
                   (float* dx, const float* cos_sin, int B, int T, int n_heads, int hs, int64_t ld),
                   (dx, cos_sin, B, T, n_heads, hs, ld))

void table(Device&, float* cos_sin, int T, int hs, const RopeParams& p) {
  for (int t = 0; t < T; ++t) rope_table_row(cos_sin + static_cast<int64_t>(t) * hs, t, hs, p);
}

void forward(Device&, float* x, const float* cos_sin, int B, int T, int n_heads, int hs,
             int64_t ld) {
  forward_rows(x, cos_sin, B, T, n_heads, hs, ld);
}

void backward(Device&, float* dx, const float* cos_sin, int B, int T, int n_heads, int hs,
              int64_t ld) {
  backward_rows(dx, cos_sin, B, T, n_heads, hs, ld);
}

}  // namespace
}  // namespace cpu

const RopeKernels kCpuRope = {cpu::table, cpu::forward, cpu::backward};
}  // namespace shardlab
