// Shared by the GPU tests: the skip when no GPU is present, random inputs, and error measures.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/device/cuda/cuda_device.hpp"
#include "core/device/device.hpp"

// First line of every test that needs a GPU: skips with the reason when there is none.
#define SL_REQUIRE_CUDA()                                                          \
  do {                                                                             \
    if (::shardlab::cuda_device_count() == 0)                                      \
      GTEST_SKIP() << "no CUDA device: " << ::shardlab::cuda_unavailable_reason(); \
  } while (0)

// As SL_REQUIRE_CUDA, and skips when fewer than n GPUs are visible.
#define SL_REQUIRE_GPUS(n)                                                            \
  do {                                                                                \
    SL_REQUIRE_CUDA();                                                                \
    if (::shardlab::cuda_device_count() < (n))                                        \
      GTEST_SKIP() << "needs " << (n) << " GPUs, " << ::shardlab::cuda_device_count() \
                   << " visible";                                                     \
  } while (0)

namespace shardlab::testing {

inline std::vector<float> random_vector(int64_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// max_i |a_i - b_i| / max(max_i |b_i|, tiny): one relative error for a whole array, so entries
// near zero do not blow it up.
inline double max_rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double scale = 1e-30, diff = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
  }
  return diff / scale;
}

// Host vectors to and from a device buffer charged to `c`.
inline Buffer to_device(Device& dev, const std::vector<float>& host,
                        MemCategory c = MemCategory::workspace) {
  Buffer b = dev.alloc(static_cast<int64_t>(host.size() * sizeof(float)), c);
  dev.copy_from_host(b.data(), host.data(), b.bytes());
  return b;
}
template <typename T>
inline Buffer to_device_as(Device& dev, const std::vector<T>& host,
                           MemCategory c = MemCategory::workspace) {
  Buffer b = dev.alloc(static_cast<int64_t>(host.size() * sizeof(T)), c);
  dev.copy_from_host(b.data(), host.data(), b.bytes());
  return b;
}
inline std::vector<float> to_host(Device& dev, const void* p, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  dev.copy_to_host(v.data(), p, n * static_cast<int64_t>(sizeof(float)));
  return v;
}

}  // namespace shardlab::testing
