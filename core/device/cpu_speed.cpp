// Each CPU's sgemm rate per window, and the statistics over them.
#include "core/device/cpu_speed.hpp"

#include <algorithm>

#include "core/base/error.hpp"

namespace shardlab {

namespace {
constexpr int kM = 1024, kN = 768, kK = 256;
}  // namespace

std::vector<double> sgemm_windows(Device& dev, std::chrono::steady_clock::time_point t0,
                                  double seconds) {
  const int windows = static_cast<int>(seconds / kCpuSpeedWindowS);
  std::vector<double> flops(static_cast<size_t>(std::max(windows, 0)), 0.0);
  Buffer a = dev.alloc_zeros(int64_t{kM} * kK * 4, MemCategory::workspace);
  Buffer b = dev.alloc_zeros(int64_t{kN} * kK * 4, MemCategory::workspace);
  Buffer out = dev.alloc_zeros(int64_t{kM} * kN * 4, MemCategory::workspace);
  for (;;) {
    dev.gemm(false, true, kM, kN, kK, 1.0f, a.f32(), kK, b.f32(), kK, 0.0f, out.f32(), kN);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int w = static_cast<int>(t / kCpuSpeedWindowS);
    if (w >= windows) break;
    if (w >= 0) flops[static_cast<size_t>(w)] += 2.0 * kM * kN * static_cast<double>(kK);
  }
  return flops;
}

CpuSpeed cpu_speed(const std::vector<std::vector<double>>& flops_per_cpu) {
  SL_CHECK(!flops_per_cpu.empty() && !flops_per_cpu[0].empty(), "cpu_speed: no windows");
  const size_t windows = flops_per_cpu[0].size();
  for (const auto& cpu : flops_per_cpu)
    SL_CHECK(cpu.size() == windows, "cpu_speed: ", cpu.size(), " windows beside ", windows);
  std::vector<double> all;
  double best = 0;
  for (const auto& cpu : flops_per_cpu)
    for (double f : cpu) {
      all.push_back(f / kCpuSpeedWindowS);
      best = std::max(best, f / kCpuSpeedWindowS);
    }
  std::sort(all.begin(), all.end());
  int fast = 0, all_fast = 0;
  double lockstep = 0;
  for (size_t w = 0; w < windows; ++w) {
    double slowest = best;
    bool every = true;
    for (const auto& cpu : flops_per_cpu) {
      const double r = cpu[w] / kCpuSpeedWindowS;
      slowest = std::min(slowest, r);
      fast += r >= kCpuSpeedFast * best;
      every = every && r >= kCpuSpeedFast * best;
    }
    all_fast += every;
    lockstep += slowest;
  }
  CpuSpeed s;
  s.best = best;
  s.median = all[all.size() / 2];
  s.fast_fraction = static_cast<double>(fast) / static_cast<double>(all.size());
  s.all_fast_fraction = static_cast<double>(all_fast) / static_cast<double>(windows);
  s.lockstep = lockstep / static_cast<double>(windows);
  return s;
}

}  // namespace shardlab
