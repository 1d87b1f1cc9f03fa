// Calibration: GEMM rates, copy bandwidth and collective alpha-beta measured on this machine.
#include "apps/shardlab/calibrate.hpp"
#include "apps/shardlab/calibrate_collectives.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <thread>
#include <vector>

#include "core/base/cpu_affinity.hpp"
#include "core/base/error.hpp"
#include "core/comm/launcher.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/device/cpu_speed.hpp"
#include "core/device/device.hpp"
#include "core/device/meta_device.hpp"
#include "core/kernels/attention.hpp"
#include "core/kernels/crossentropy.hpp"
#include "core/kernels/elementwise.hpp"
#include "core/kernels/gelu.hpp"
#include "core/kernels/layernorm.hpp"
#include "core/kernels/optim.hpp"
#include "core/kernels/residual.hpp"

namespace shardlab {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The best (shortest) time of fn over repetitions lasting about `budget` seconds: the least
// disturbed run on a shared machine.
template <typename Fn>
double best_time(double budget, Fn&& fn) {
  fn();  // warm-up: first touch, BLAS buffers
  double best = 1e30;
  const auto t0 = Clock::now();
  int reps = 0;
  while (reps < 3 || (since(t0) < budget && reps < 10000)) {
    const auto t = Clock::now();
    fn();
    best = std::min(best, since(t));
    ++reps;
  }
  return best;
}

struct GemmFit {
  double peak = 0;      // FLOP/s of a large GEMM
  double half_dim = 0;  // median fit of d / (d + h) per dimension over the smaller sizes
};

// sgemm FLOP/s over square sizes in the three layouts the model's layers use (A B, A B^T for the
// forward's x W^T and the backward's dx, A^T B for dW). The peak is the median over the layouts
// of the two largest sizes: on this machine the layouts differ by up to 20% at the same size, and
// the largest of two single measurements (the old peak) took the luckiest one on a shared machine.
// Each smaller size's median over the layouts fits the half dimension against that peak.
GemmFit measure_gemm(const CalibrateOptions& o, std::ostream& log) {
  MemoryTracker tracker;
  auto dev = make_cpu_device(tracker);
  set_blas_threads(1);
  const std::vector<int> sizes =
      o.quick ? std::vector<int>{64, 256, 1024} : std::vector<int>{32, 64, 128, 256, 512, 1024};
  const bool layouts[3][2] = {{false, false}, {false, true}, {true, false}};
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
  };
  std::vector<std::vector<double>> rates(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int d = sizes[i];
    const int64_t n = static_cast<int64_t>(d) * d;
    Buffer a = dev->alloc_zeros(n * 4, MemCategory::workspace);
    Buffer b = dev->alloc_zeros(n * 4, MemCategory::workspace);
    Buffer c = dev->alloc_zeros(n * 4, MemCategory::workspace);
    log << "  sgemm " << d << "^3 (nn, nt, tn):";
    for (const auto& l : layouts) {
      const double t = best_time(o.seconds_per_point / 3, [&] {
        dev->gemm(l[0], l[1], d, d, d, 1.0f, a.f32(), d, b.f32(), d, 0.0f, c.f32(), d);
      });
      rates[i].push_back(2.0 * d * d * static_cast<double>(d) / t);
      log << " " << rates[i].back() * 1e-9;
    }
    log << " GFLOP/s\n";
  }
  GemmFit f;
  std::vector<double> large = rates[rates.size() - 1];
  large.insert(large.end(), rates[rates.size() - 2].begin(), rates[rates.size() - 2].end());
  f.peak = median(large);
  // rate(d) = peak (d / (d + h))^3  =>  h = d ((peak / rate)^(1/3) - 1), 0 where a smaller size
  // ran as fast (on a loaded machine it may even run faster).
  std::vector<double> h;
  for (size_t i = 0; i + 2 < sizes.size(); ++i)
    h.push_back(sizes[i] * std::max(0.0, std::cbrt(f.peak / median(rates[i])) - 1.0));
  f.half_dim = h.empty() ? 0.0 : median(h);
  log << "  sgemm peak " << f.peak * 1e-9 << " GFLOP/s, half dimension " << f.half_dim << "\n";
  return f;
}

double measure_copy_bandwidth(const CalibrateOptions& o, std::ostream& log) {
  MemoryTracker tracker;
  auto dev = make_cpu_device(tracker);
  const int64_t bytes = o.quick ? (int64_t{64} << 20) : (int64_t{256} << 20);
  Buffer a = dev->alloc_zeros(bytes, MemCategory::workspace);
  Buffer b = dev->alloc_zeros(bytes, MemCategory::workspace);
  const double t = best_time(o.seconds_per_point, [&] { dev->copy(b.data(), a.data(), bytes); });
  const double bw = 2.0 * static_cast<double>(bytes) / t;  // read + written
  log << "  copy " << format_bytes(bytes) << ": " << bw * 1e-9 << " GB/s moved\n";
  return bw;
}

struct KernelFit {
  double median = 0;                      // the spec's memory_efficiency (kernels not measured)
  std::map<std::string, double> by_name;  // the spec's kernel_efficiency
};

// How close each element-wise and row kernel comes to the copy bandwidth: the time the meta kernel
// table charges for it at the copy bandwidth over the time the CPU kernel takes, per kernel, under
// the meta table's name. On a CPU these differ by 2x and more (AdamW streams seven arrays; GELU
// computes a tanh and softmax an exp per element), so the spec keeps each one
// (efficiency.kernel_efficiency); their median is memory_efficiency, for kernels not measured here.
KernelFit measure_kernel_efficiency(const CalibrateOptions& o, double copy_bw, std::ostream& log) {
  ClusterSpec ideal;  // only what the meta kernels read: bandwidth, no launch cost
  ideal.memory_bandwidth = copy_bw;
  ideal.cost.memory_efficiency = 1.0;
  ideal.cost.kernel_launch_us = 0;
  MemoryTracker tracker, meta_tracker;
  auto cpu = make_cpu_device(tracker);
  VirtualClock clock;
  MetaDevice meta(meta_tracker, ideal, clock, GemmMath::fp32);
  const int64_t n = o.quick ? (int64_t{1} << 20) : (int64_t{4} << 20);
  Buffer a = cpu->alloc_zeros(n * 4, MemCategory::workspace);
  Buffer b = cpu->alloc_zeros(n * 4, MemCategory::workspace);
  Buffer c = cpu->alloc_zeros(n * 4, MemCategory::workspace);
  Buffer d = cpu->alloc_zeros(n * 4, MemCategory::workspace);
  Buffer tg = cpu->alloc_zeros(n * 4, MemCategory::workspace);  // targets: token 0
  const int C = 256, N = static_cast<int>(n / C), T = 256, BH = static_cast<int>(n / (T * T));
  struct Kernel {
    const char* name;  // the meta kernel table's name (meta_kernels.cpp)
    std::function<void(Device&)> run;
  };
  const std::vector<Kernel> kernels = {
      {"layernorm_forward",
       [&](Device& dv) {
         layernorm_forward(dv, b.f32(), c.f32(), d.f32(), a.f32(), c.f32(), d.f32(), N, C);
       }},
      {"layernorm_backward",
       [&](Device& dv) {
         layernorm_backward(dv, b.f32(), c.f32(), d.f32(), a.f32(), a.f32(), c.f32(), d.f32(),
                            d.f32(), N, C);
       }},
      {"gelu_forward", [&](Device& dv) { gelu_forward(dv, b.f32(), a.f32(), n); }},
      {"gelu_backward", [&](Device& dv) { gelu_backward(dv, b.f32(), a.f32(), c.f32(), n); }},
      {"softmax_forward", [&](Device& dv) { attention_softmax_forward(dv, a.f32(), BH, T); }},
      {"softmax_backward",
       [&](Device& dv) { attention_softmax_backward(dv, b.f32(), a.f32(), c.f32(), BH, T); }},
      {"crossentropy_forward",
       [&](Device& dv) { crossentropy_forward(dv, b.f32(), c.f32(), tg.as<int>(), N, C); }},
      {"crossentropy_backward",
       [&](Device& dv) {
         crossentropy_backward(dv, b.f32(), c.f32(), tg.as<int>(), 1.0f / N, N, C);
       }},
      {"residual_forward", [&](Device& dv) { residual_forward(dv, c.f32(), a.f32(), b.f32(), n); }},
      {"bias_broadcast", [&](Device& dv) { bias_broadcast(dv, b.f32(), a.f32(), N, C, true); }},
      {"bias_backward", [&](Device& dv) { bias_backward(dv, c.f32(), a.f32(), N, C); }},
      {"axpy", [&](Device& dv) { axpy(dv, b.f32(), 0.5f, a.f32(), n); }},
      {"scale", [&](Device& dv) { scale_array(dv, b.f32(), 0.5f, n); }},
      {"sum_squares", [&](Device& dv) { sum_squares(dv, a.f32(), n); }},
      {"all_finite", [&](Device& dv) { all_finite(dv, a.data(), DType::f32, n); }},
      {"copy", [&](Device& dv) { dv.copy(b.data(), a.data(), n * 4); }},
      // A zeroed buffer as the engine takes one (the MetaDevice charges alloc_zeros as a "fill").
      // The best time is a warm one: after the first call glibc serves the block from its heap,
      // so this is the memset; the page faults of fresh blocks are not in it
      // (docs/simulate-validation.md, "Fresh pages on every step").
      {"fill", [&](Device& dv) { Buffer z = dv.alloc_zeros(n * 4, MemCategory::workspace); }},
      {"adamw",
       [&](Device& dv) {
         adamw_update(dv, a.f32(), b.f32(), c.f32(), d.f32(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f,
                      1);
       }},
      // What the engine's optimizer step runs (core/optim/optimizer.cpp, step_checked): the fused
      // pass with its finiteness checks, a different loop from adamw_update's.
      {"adamw_checked", [&](Device& dv) {
         NonFinite found;
         adamw_checked(dv, a.f32(), b.f32(), c.f32(), d.f32(), n, 1.0f, 1e-3f, 0.9f, 0.95f, 1e-8f,
                       0.0f, 1, &found);
       }}};
  KernelFit fit;
  std::vector<double> ratios;
  for (const Kernel& k : kernels) {
    const double t_cpu = best_time(o.seconds_per_point, [&] { k.run(*cpu); });
    const int64_t t0 = clock.now_ns;
    k.run(meta);
    const double t_model = static_cast<double>(clock.now_ns - t0) * 1e-9;
    const double ratio = std::min(1.0, t_model / t_cpu);
    ratios.push_back(ratio);
    fit.by_name[k.name] = ratio;
    log << "  " << k.name << ": " << t_cpu * 1e3 << " ms, " << 100.0 * ratio
        << "% of the copy bandwidth\n";
  }
  std::sort(ratios.begin(), ratios.end());
  fit.median = ratios.size() % 2 == 1
                   ? ratios[ratios.size() / 2]
                   : 0.5 * (ratios[ratios.size() / 2 - 1] + ratios[ratios.size() / 2]);
  return fit;
}

// How fast the ranks compute together: every rank runs bench_cpu_speed's sgemm for a few seconds
// at once (core/device/cpu_speed.hpp), and per 100 ms window the slowest rank's rate, averaged,
// over the best window of any rank is the fraction of the calibrated (best-time) speed a rank
// keeps when it waits for the others at every collective. On this machine's vCPUs, whose speeds
// move independently, that is 0.8 to 0.9 (docs/simulate-validation.md, "Local full_shard at N = 2:
// ranks in lockstep on a noisy machine"). The spec's efficiency.lockstep_compute_efficiency.
struct Lockstep {
  double efficiency = 1;  // the slowest rank per window, averaged, over the best window
  double median = 0;      // FLOP/s: the median over every rank's windows
};

Lockstep measure_lockstep(const CalibrateOptions& o, std::ostream& log) {
  const double seconds = o.quick ? 1.0 : 4.0;
  LaunchOptions lo;
  lo.backend = o.backend;
  lo.ranks = o.ranks;
  CpuSpeed speed;
  launch(lo, [&](RankContext& ctx) {
    set_blas_threads(1);
    ctx.comm->barrier();
    const std::vector<double> mine =
        sgemm_windows(*ctx.device, std::chrono::steady_clock::now(), seconds);
    const int64_t w = static_cast<int64_t>(mine.size());
    std::vector<float> send(mine.begin(), mine.end()), all(static_cast<size_t>(w * ctx.world));
    for (float& f : send) f *= 1e-9f;  // GFLOP: float keeps 7 digits of it
    ctx.comm->all_gather(send.data(), all.data(), w, DType::f32);
    std::vector<std::vector<double>> per_rank(static_cast<size_t>(ctx.world));
    for (int r = 0; r < ctx.world; ++r)
      for (int64_t i = 0; i < w; ++i) per_rank[r].push_back(1e9 * all[r * w + i]);
    // Every rank computes the same figure from the same windows; under MPI each process keeps it.
    if (ctx.rank == 0 || o.backend != "local") speed = cpu_speed(per_rank);
  });
  const double eff = std::min(1.0, speed.lockstep / speed.best);
  log << "  lockstep: " << o.ranks << " ranks computing at once for " << seconds
      << " s: best window " << speed.best * 1e-9 << " GFLOP/s, median " << speed.median * 1e-9
      << ", the slowest rank per window " << speed.lockstep * 1e-9 << " (" << 100.0 * eff
      << "% of best; windows with every rank fast: " << 100.0 * speed.all_fast_fraction << "%)\n";
  return {eff, speed.median};
}

// The sgemm peak for the spec. measure_gemm's figures come from a burst of under a second, and on
// a shared host such a burst can fall into a slow second: twice in one `make sim-validate` it
// measured 82 GFLOP/s, while the lockstep windows seconds later had a median of 97 and the
// training steps after it ran at the usual ~100 (docs/simulate-validation.md). The lockstep's
// median over 4 s of windows, every rank computing at once, is a rate the ranks reach anyway, so
// the peak is never taken below it.
double sgemm_peak(const GemmFit& g, const Lockstep& l, std::ostream& log) {
  if (g.peak >= l.median) return g.peak;
  log << "  sgemm peak " << g.peak * 1e-9
      << " GFLOP/s is below the lockstep windows' median: " << l.median * 1e-9
      << " GFLOP/s taken instead\n";
  return l.median;
}

// The CPUs this machine's ranks compute on, for the spec's devices_per_node: the local backend's
// threads may use the process's CPUs (its affinity mask, as taskset sets it); an mpirun rank is
// bound to one core, so the machine's online CPUs stand for the node's.
int devices_per_node(const CalibrateOptions& o) {
  if (o.backend == "local") return std::max(1, static_cast<int>(allowed_cpus().size()));
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : std::max(1, o.ranks);
}

}  // namespace

nlohmann::json calibrate_this_machine(const CalibrateOptions& o, std::ostream& log) {
  if (o.ranks < 2)
    SL_THROW(InvalidArgument, "calibrate: --ranks ", o.ranks,
             " must be >= 2 (collectives need two ranks to measure a link)");
  if (!(o.seconds_per_point > 0 && o.seconds_per_point <= 60))
    SL_THROW(InvalidArgument, "calibrate: --seconds ", o.seconds_per_point, " must be in (0, 60]");
  if (o.link_groups < 1 || o.ranks % o.link_groups != 0 || link_group_size(o) < 2)
    SL_THROW(InvalidArgument, "calibrate: --link-groups ", o.link_groups, " must divide --ranks ",
             o.ranks, " into groups of two or more");
  log << "calibrating this machine (" << o.ranks << " ranks, backend " << o.backend << ")\n";
  const GemmFit g = measure_gemm(o, log);
  const double bw = measure_copy_bandwidth(o, log);
  const KernelFit kernel_eff = measure_kernel_efficiency(o, bw, log);
  const Lockstep lockstep = measure_lockstep(o, log);
  const double peak = sgemm_peak(g, lockstep, log);

  // The collectives: per collective alpha-beta regimes (calibrate_collectives.hpp).
  const int n = link_group_size(o);
  const MeasuredCollectives coll = measure_collectives(o, log);

  char host[256] = "this machine";
  gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const double peak_tflops = peak * 1e-12;
  const nlohmann::json link = {{"bandwidth_GBps", coll.bandwidth * 1e-9},
                               {"latency_us", coll.latency * 1e6},
                               {"collectives", coll.per_op}};
  return {
      {"name", "this-machine"},
      {"source",
       std::string("measured by shardlab calibrate on ") + host + " at " + when + ": " +
           std::to_string(o.ranks) + " ranks (" + o.backend +
           "), sgemm with one BLAS thread in three layouts, a large copy, each kernel against it, "
           "all_gather (in place), reduce_scatter and all_reduce (out of place) fitted each to "
           "alpha-beta regimes by buffer size over 64 KiB to 256 MiB, median calls" +
           (o.link_groups > 1 ? " on " + std::to_string(o.link_groups) +
                                    " groups of ranks at once (links shared between them)"
                              : std::string()) +
           "; the ranks' sgemm rate in lockstep (the slowest per 100 ms window) over their best, "
           "and the median of those windows as the least the sgemm peak can be; "
           "CPU ranks have no tensor cores, so fp32, tf32 and bf16 are the one sgemm rate"},
      {"nodes", 1},
      {"async_progress", coll.async_progress},
      {"attention_causal_block", kCpuAttentionCausalBlock},
      {"ranks_per_node", n},
      {"devices_per_node", devices_per_node(o)},
      {"gpu",
       {{"name", "CPU rank (one BLAS thread)"},
        {"peak_tflops", {{"fp32", peak_tflops}, {"tf32", peak_tflops}, {"bf16", peak_tflops}}},
        {"memory_GiB", static_cast<double>(host_memory_bytes()) / (1024.0 * 1024 * 1024) / n},
        {"memory_bandwidth_GBps", bw * 1e-9}}},
      {"intra_node", link},
      {"inter_node", link},
      {"host_link", {{"bandwidth_GBps", bw * 0.5e-9}, {"latency_us", 0}}},
      // CPU ranks' host tier (--offload) is the same memory: the same measured bandwidth, not the
      // default a GPU's share of a server's host memory gets.
      {"host", {{"memory_bandwidth_GBps", bw * 1e-9}}},
      // The CPU device allocates what its tracker counts and has no context or NCCL: "fits" is
      // the tracked peak, as train's --mem-limit compares it.
      {"headroom",
       {{"context_GiB", 0},
        {"nccl_GiB_per_communicator", 0},
        {"fragmentation", 0},
        {"source", "CPU ranks: no CUDA context, no NCCL, the tracker's bytes are what is held"}}},
      {"efficiency",
       {{"gemm_efficiency", 1.0},
        {"gemm_half_dim", g.half_dim},
        {"memory_efficiency", kernel_eff.median},
        {"kernel_efficiency", kernel_eff.by_name},
        {"lockstep_compute_efficiency", lockstep.efficiency},
        {"kernel_launch_us", 0}}}};
}

}  // namespace shardlab
