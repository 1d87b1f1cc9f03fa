// The CPU kernels' vector level: detection, SHARDLAB_CPU_SIMD, the scoped override.
#include "core/base/cpu_simd.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/base/error.hpp"

namespace shardlab {
namespace {

CpuSimd detect() {
#if SL_CPU_SIMD_DISPATCH
  __builtin_cpu_init();
  // GCC's and Clang's checks include the OS's support for the wider registers (XCR0).
  if (__builtin_cpu_supports("avx512f")) return CpuSimd::avx512;
  if (__builtin_cpu_supports("avx2")) return CpuSimd::avx2;
#endif
  return CpuSimd::baseline;
}

// The level from SHARDLAB_CPU_SIMD, or the widest; checked once.
CpuSimd from_environment() {
  const CpuSimd best = cpu_simd_supported();
  const char* env = std::getenv("SHARDLAB_CPU_SIMD");
  if (env == nullptr || *env == '\0') return best;
  const std::string v = env;
  CpuSimd want;
  if (v == "baseline") {
    want = CpuSimd::baseline;
  } else if (v == "avx2") {
    want = CpuSimd::avx2;
  } else if (v == "avx512") {
    want = CpuSimd::avx512;
  } else {
    throw InvalidArgument("SHARDLAB_CPU_SIMD=" + v + ": expected baseline, avx2 or avx512");
  }
  if (static_cast<int>(want) > static_cast<int>(best)) {
    throw InvalidArgument("SHARDLAB_CPU_SIMD=" + v + ": this CPU runs at most " +
                          cpu_simd_name(best));
  }
  return want;
}

std::atomic<int> g_override{-1};

}  // namespace

const char* cpu_simd_name(CpuSimd level) {
  switch (level) {
    case CpuSimd::avx512: return "avx512";
    case CpuSimd::avx2: return "avx2";
    default: return "baseline";
  }
}

CpuSimd cpu_simd_supported() {
  static const CpuSimd level = detect();
  return level;
}

CpuSimd cpu_simd() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<CpuSimd>(o);
  static const CpuSimd level = from_environment();
  return level;
}

ScopedCpuSimd::ScopedCpuSimd(CpuSimd level) : previous_(g_override.load()) {
  if (static_cast<int>(level) > static_cast<int>(cpu_simd_supported())) {
    throw InvalidArgument(std::string("ScopedCpuSimd: this CPU runs at most ") +
                          cpu_simd_name(cpu_simd_supported()) + ", not " + cpu_simd_name(level));
  }
  g_override.store(static_cast<int>(level));
}

ScopedCpuSimd::~ScopedCpuSimd() { g_override.store(previous_); }

}  // namespace shardlab
