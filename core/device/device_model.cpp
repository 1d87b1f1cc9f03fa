// GEMM, kernel and host-copy times from a cluster spec.
#include "core/device/device_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/base/virtual_clock.hpp"

namespace shardlab {

namespace {

int64_t to_ns(double seconds) { return virtual_ns(seconds, "simulated device"); }

double saturation(double d, double half) { return d / (d + half); }

// A kernel that specs calibrated before it was measured lack, and the kernel whose figure stands
// in for it there: the fused AdamW step moves what adamw moves.
struct KernelStandIn {
  const char* kernel;
  const char* stand_in;
};
constexpr KernelStandIn kStandIns[] = {{"adamw_checked", "adamw"}};

// The fraction of memory bandwidth `kernel` reaches: its own measured figure where the spec has
// one, else its stand-in's, else memory_efficiency.
double bandwidth_efficiency(const CostModel& c, const char* kernel) {
  if (kernel != nullptr && !c.kernel_efficiency.empty()) {
    auto it = c.kernel_efficiency.find(kernel);
    for (const KernelStandIn& s : kStandIns)
      if (it == c.kernel_efficiency.end() && std::strcmp(kernel, s.kernel) == 0)
        it = c.kernel_efficiency.find(s.stand_in);
    if (it != c.kernel_efficiency.end()) return it->second;
  }
  return c.memory_efficiency;
}

}  // namespace

double gemm_efficiency(const CostModel& c, int64_t M, int64_t N, int64_t K) {
  const double h = c.gemm_half_dim;
  return c.gemm_efficiency * saturation(static_cast<double>(M), h) *
         saturation(static_cast<double>(N), h) * saturation(static_cast<double>(K), h);
}

int64_t gemm_ns(const ClusterSpec& s, GemmMath m, int64_t M, int64_t N, int64_t K, int64_t batch) {
  const int es = m == GemmMath::bf16 ? 2 : 4;
  return gemm_ns(s, m, M, N, K, batch, es, es);
}

int64_t gemm_ns(const ClusterSpec& s, GemmMath m, int64_t M, int64_t N, int64_t K, int64_t batch,
                int ab_bytes, int c_bytes) {
  if (M <= 0 || N <= 0 || K <= 0 || batch <= 0) return 0;
  const double flops = 2.0 * static_cast<double>(M) * N * K * batch;
  const double eff = gemm_efficiency(s.cost, M, N, K);
  const double t_math = flops / (s.peak(m) * eff);
  const double ab = static_cast<double>(M) * K + static_cast<double>(K) * N;
  const double c = 2.0 * static_cast<double>(M) * N;
  const double bytes = ab_bytes == c_bytes
                           ? static_cast<double>(ab_bytes) * batch * (ab + c)
                           : static_cast<double>(batch) * (ab_bytes * ab + c_bytes * c);
  // Streaming the operands is a copy (BLAS packs them into its blocks), not a kernel that computes
  // per element: a spec that measured the copy charges it at that, not at the median kernel's
  // efficiency (calibrate's median is GELU-like, 0.2-0.3 on a CPU, which made mid-sized GEMMs
  // look memory-bound at a third of their real speed).
  const double t_mem = bytes / (s.memory_bandwidth * bandwidth_efficiency(s.cost, "copy"));
  return to_ns(s.cost.kernel_launch_us * 1e-6 + std::max(t_math, t_mem));
}

int64_t fused_ns(const ClusterSpec& s, GemmMath m, double flops, double efficiency, int64_t bytes) {
  const double t_math = flops > 0 ? flops / (s.peak(m) * efficiency) : 0.0;
  const double t_mem = static_cast<double>(std::max<int64_t>(bytes, 0)) /
                       (s.memory_bandwidth * s.cost.memory_efficiency);
  return to_ns(s.cost.kernel_launch_us * 1e-6 + std::max(t_math, t_mem));
}

int64_t memory_ns(const ClusterSpec& s, int64_t bytes, const char* kernel) {
  return to_ns(s.cost.kernel_launch_us * 1e-6 +
               static_cast<double>(std::max<int64_t>(bytes, 0)) /
                   (s.memory_bandwidth * bandwidth_efficiency(s.cost, kernel)));
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
