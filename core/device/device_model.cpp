// GEMM, kernel and host-copy times from a cluster spec.
#include "core/device/device_model.hpp"

#include <algorithm>
#include <cmath>

namespace shardlab {

namespace {

int64_t to_ns(double seconds) { return static_cast<int64_t>(std::llround(seconds * 1e9)); }

double saturation(double d, double half) { return d / (d + half); }

}  // namespace

double gemm_efficiency(const CostModel& c, int64_t M, int64_t N, int64_t K) {
  const double h = c.gemm_half_dim;
  return c.gemm_efficiency * saturation(static_cast<double>(M), h) *
         saturation(static_cast<double>(N), h) * saturation(static_cast<double>(K), h);
}

int64_t gemm_ns(const ClusterSpec& s, GemmMath m, int64_t M, int64_t N, int64_t K, int64_t batch) {
  if (M <= 0 || N <= 0 || K <= 0 || batch <= 0) return 0;
  const double flops = 2.0 * static_cast<double>(M) * N * K * batch;
  const double eff = gemm_efficiency(s.cost, M, N, K);
  const double t_math = flops / (s.peak(m) * eff);
  const double es = m == GemmMath::bf16 ? 2.0 : 4.0;
  const double bytes =
      es * batch *
      (static_cast<double>(M) * K + static_cast<double>(K) * N + 2.0 * static_cast<double>(M) * N);
  const double t_mem = bytes / (s.memory_bandwidth * s.cost.memory_efficiency);
  return to_ns(s.cost.kernel_launch_us * 1e-6 + std::max(t_math, t_mem));
}

int64_t memory_ns(const ClusterSpec& s, int64_t bytes) {
  return to_ns(s.cost.kernel_launch_us * 1e-6 +
               static_cast<double>(std::max<int64_t>(bytes, 0)) /
                   (s.memory_bandwidth * s.cost.memory_efficiency));
}

int64_t host_copy_ns(const ClusterSpec& s, int64_t bytes) {
  return to_ns(s.host_link.latency +
               static_cast<double>(std::max<int64_t>(bytes, 0)) / s.host_link.bandwidth);
}

int64_t host_memory_ns(const ClusterSpec& s, int64_t bytes) {
  return to_ns(static_cast<double>(std::max<int64_t>(bytes, 0)) /
               (s.host_memory_bandwidth * s.cost.memory_efficiency));
}

}  // namespace shardlab
