// How steady this machine's CPUs are (docs/simulate-validation.md, "Local full_shard at N = 2:
// ranks in lockstep on a noisy machine"): threads (or ranks) run the same sgemm back to back and
// count the FLOPs done in each 100 ms window, and the windows of all of them give each one's rate
// over time and the rate of the slowest in each window. Ranks that meet in a collective several
// times a window go at that lockstep rate, not at the best rate a calibration keeps. Shared by
// bench/bench_cpu_speed.cpp (one pinned thread per CPU, 10 s) and `shardlab calibrate` (its ranks,
// a few seconds: the spec's efficiency.lockstep_compute_efficiency).
#pragma once

#include <chrono>
#include <vector>

#include "core/device/device.hpp"

namespace shardlab {

constexpr double kCpuSpeedWindowS = 0.1;
constexpr double kCpuSpeedFast = 0.75;  // a window at >= this fraction of the best one is "fast"

// Runs the sgemm (1024 x 768 x 256, x W^T as the `small` model's MLP runs it) on `dev` from now
// until `seconds` after `t0`, adding each call's FLOPs to the window (of kCpuSpeedWindowS from t0)
// it ended in. The caller sets the BLAS threads (one: a rank's share) and pins the thread if it
// wants one CPU. Returns the FLOPs of each window.
std::vector<double> sgemm_windows(Device& dev, std::chrono::steady_clock::time_point t0,
                                  double seconds);

struct CpuSpeed {
  double best = 0;               // FLOP/s of the fastest window of any CPU
  double median = 0;             // FLOP/s, the median over every CPU's windows
  double fast_fraction = 0;      // of all windows, those at >= kCpuSpeedFast of best
  double all_fast_fraction = 0;  // of the windows, those in which every CPU was fast
  double lockstep = 0;           // FLOP/s: per window the slowest CPU's rate, their mean
};

// From each CPU's (or rank's) window FLOPs, all over the same windows. Throws InvalidArgument
// for no CPUs, no windows or lists of different lengths.
CpuSpeed cpu_speed(const std::vector<std::vector<double>>& flops_per_cpu);

}  // namespace shardlab
