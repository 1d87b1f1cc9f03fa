// The collectives' per-collective alpha-beta fits of `shardlab calibrate`
// (calibrate_collectives.hpp).
#include "apps/shardlab/calibrate_collectives.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>

#include "core/base/error.hpp"
#include "core/comm/comm_common.hpp"
#include "core/comm/launcher.hpp"
#include "core/device/device.hpp"
#include "core/memory/tracker.hpp"

namespace shardlab {

namespace {

using Clock = std::chrono::steady_clock;

struct Line {
  double alpha = 0;     // seconds per ring step
  double per_byte = 0;  // seconds per byte of a step's chunk (1 / beta)
  double worst = 0;     // largest relative error over the points it was fitted to
};

// The smallest time per byte a fit may give (a bandwidth of 100 TB/s): a run of sizes whose times
// do not grow (small buffers on a quiet link) fits a flat line, and a spec needs a finite beta.
constexpr double kMinPerByte = 1e-14;

double line_seconds(const Line& l, int ranks, int steps, double bytes) {
  return steps * (l.alpha + bytes / ranks * l.per_byte);
}

// Least squares on the relative error over samples [i, j]: minimise sum (pred_k / t_k - 1)^2,
// pred = a x + b y with x = steps, y = steps S / n; alpha >= 0 and 1/beta >= kMinPerByte.
Line fit_line(const std::vector<CollectiveSample>& s, size_t i, size_t j, int ranks, int steps) {
  double xx = 0, xy = 0, yy = 0, x1 = 0, y1 = 0;
  for (size_t k = i; k <= j; ++k) {
    const double x = steps / s[k].seconds;
    const double y = steps * static_cast<double>(s[k].bytes) / ranks / s[k].seconds;
    xx += x * x, xy += x * y, yy += y * y, x1 += x, y1 += y;
  }
  Line l;
  const double det = xx * yy - xy * xy;
  if (std::abs(det) > 1e-300 * xx * yy) {
    l.alpha = (x1 * yy - y1 * xy) / det;
    l.per_byte = (xx * y1 - xy * x1) / det;
  }
  if (l.alpha < 0 || l.per_byte < kMinPerByte) {
    // On the boundary: the better of a line through 0 (alpha 0) and a flat one (beta at its cap).
    Line through0{0, std::max(kMinPerByte, y1 / yy), 0};
    Line flat{std::max(0.0, (x1 - kMinPerByte * xy) / xx), kMinPerByte, 0};
    const auto sq = [&](const Line& c) {
      double e = 0;
      for (size_t k = i; k <= j; ++k) {
        const double r = line_seconds(c, ranks, steps, double(s[k].bytes)) / s[k].seconds - 1;
        e += r * r;
      }
      return e;
    };
    l = sq(through0) <= sq(flat) ? through0 : flat;
  }
  for (size_t k = i; k <= j; ++k)
    l.worst = std::max(
        l.worst, std::abs(line_seconds(l, ranks, steps, double(s[k].bytes)) / s[k].seconds - 1));
  return l;
}

struct Cut {
  std::vector<size_t> ends;  // last sample of each run
  std::vector<Line> lines;
  double worst = 1e300;
};

// The best cut of the samples into `runs` contiguous runs of at least two samples each.
Cut best_cut(const std::vector<CollectiveSample>& s, int runs, int ranks, int steps) {
  const size_t m = s.size();
  Cut best;
  std::vector<size_t> ends(static_cast<size_t>(runs));
  // ends[r] for r < runs - 1 chosen by recursion; ends[runs - 1] = m - 1.
  std::function<void(int, size_t)> go = [&](int r, size_t start) {
    if (r == runs - 1) {
      if (m - start < 2) return;
      ends[static_cast<size_t>(r)] = m - 1;
      Cut c;
      c.ends = ends;
      size_t from = 0;
      c.worst = 0;
      for (size_t e : ends) {
        c.lines.push_back(fit_line(s, from, e, ranks, steps));
        c.worst = std::max(c.worst, c.lines.back().worst);
        from = e + 1;
      }
      if (c.worst < best.worst) best = c;
      return;
    }
    for (size_t e = start + 1; e + 1 < m; ++e) {
      ends[static_cast<size_t>(r)] = e;
      go(r + 1, e + 1);
    }
  };
  go(0, 0);
  return best;
}

// The knee between a run ending at sample `a` and the next starting at `a + 1`: where their lines
// cross if that is between the two sizes, else the geometric middle.
int64_t knee(const std::vector<CollectiveSample>& s, size_t a, const Line& lo, const Line& hi,
             int ranks) {
  const double s0 = double(s[a].bytes), s1 = double(s[a + 1].bytes);
  const double dslope = (lo.per_byte - hi.per_byte) / ranks;
  double k = std::sqrt(s0 * s1);
  if (std::abs(dslope) > 0) {
    const double cross = (hi.alpha - lo.alpha) / dslope;
    if (cross >= s0 && cross < s1) k = cross;
  }
  return static_cast<int64_t>(std::llround(k));
}

// Cache sizes from sysfs ("L2 1024K, L3 36608K"), for the log: the knees are compared with them.
std::string cache_sizes() {
  std::string out;
  for (int i = 0; i < 8; ++i) {
    const std::string d = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(d + "level"), type(d + "type"), size(d + "size");
    std::string lv, ty, sz;
    if (!(level >> lv) || !(type >> ty) || !(size >> sz)) continue;
    if (ty == "Instruction") continue;
    out += (out.empty() ? "" : ", ") + ("L" + lv) + " " + sz;
  }
  return out.empty() ? "not in sysfs" : out;
}

struct OpPlan {
  CommOp op;
  int steps;  // ring steps per call on n ranks
};

// Calls per size and round, the same on every rank (MPI processes must agree): many for small
// buffers, whose single calls are noisy and whose ranks reach the steady rhythm of back-to-back
// calls only after a few dozen, at least 3 for the largest; kRounds rounds. Before them, warm-up
// calls: up to 5, as nccl-tests makes (its -w), since a buffer's first calls after another size's
// run slower while the caches refill (local, 16 MiB: the first five took up to 1.9x the later
// ones), but no more than 64 MiB of buffer: beyond the caches one call is enough, and a 256 MiB
// call over a 1 Gbit/s link takes seconds.
constexpr int kRounds = 3;
constexpr int64_t kCallBytes = int64_t{64} << 20;
int calls_for(int64_t bytes, bool quick) {
  return static_cast<int>(std::clamp<int64_t>(kCallBytes / bytes, quick ? 2 : 3, quick ? 11 : 100));
}
int warmups_for(int64_t bytes, bool quick) {
  return quick ? 1 : static_cast<int>(std::clamp<int64_t>(kCallBytes / bytes, 1, 5));
}

// --link-groups: this rank's group (the ranks r with r mod G = this rank's r mod G), or null when
// the collectives run on the whole world.
std::unique_ptr<Communicator> link_group(const CalibrateOptions& o, RankContext& ctx) {
  if (o.link_groups <= 1) return nullptr;
  if (ctx.world % o.link_groups != 0 || ctx.world / o.link_groups < 2)
    SL_THROW(InvalidArgument, "calibrate: --link-groups ", o.link_groups, " must divide the ",
             ctx.world, " ranks into groups of two or more");
  if (ctx.world != o.ranks)
    SL_THROW(InvalidArgument, "calibrate: --link-groups needs --ranks ", o.ranks,
             " to be the number of ranks launched, ", ctx.world);
  return ctx.comm->split(ctx.rank % o.link_groups, ctx.rank);
}

// --link-groups: each entry the largest over every rank's. The groups need not share the links
// evenly (two TCP streams over one veth split it unequally), and a training step waits for the
// slowest.
void slowest_ranks(RankContext& ctx, std::vector<float>& v) {
  const size_t k = v.size();
  std::vector<float> all(k * static_cast<size_t>(ctx.world), 0.0f);
  std::copy(v.begin(), v.end(), all.begin() + static_cast<std::ptrdiff_t>(k * ctx.rank));
  ctx.comm->all_gather(all.data() + k * ctx.rank, all.data(), static_cast<int64_t>(k), DType::f32);
  for (int r = 0; r < ctx.world; ++r)
    for (size_t i = 0; i < k; ++i) v[i] = std::max(v[i], all[k * r + i]);
}

struct OpTimes {
  std::vector<double> median, mean;  // per size, seconds per call
};

// Median (and, for the log, mean) call time of `op` at each size (rank 0's, given to every rank).
OpTimes time_op(const CalibrateOptions& o, CommOp op, const std::vector<int64_t>& sizes) {
  OpTimes out;
  LaunchOptions lo;
  lo.backend = o.backend;
  lo.ranks = o.ranks;
  launch(lo, [&](RankContext& ctx) {
    std::unique_ptr<Communicator> group = link_group(o, ctx);
    Communicator& comm = group ? *group : *ctx.comm;
    const int n = comm.size();
    const int64_t most = sizes.back();
    Buffer a = ctx.device->alloc_zeros(most, MemCategory::workspace);
    Buffer b = ctx.device->alloc_zeros(most, MemCategory::workspace);
    // Rounds over all sizes, each size's calls in every round: a disturbance from another
    // process on this shared machine lands in one round of a size, and the median over the
    // rounds' calls leaves it out (one pass per size moved whole sizes by 1.5x between runs).
    std::vector<std::vector<double>> t(sizes.size());
    for (int round = 0; round < kRounds; ++round) {
      for (size_t k = 0; k < sizes.size(); ++k) {
        const int64_t per_rank = std::max<int64_t>(1, sizes[k] / 4 / n);
        const int calls = calls_for(sizes[k], o.quick);
        const int warm = warmups_for(sizes[k], o.quick);
        for (int i = 0; i < warm + calls; ++i) {
          const auto t0 = Clock::now();
          switch (op) {
            case CommOp::all_gather:  // in place: this rank's slot of the gathered buffer
              comm.all_gather(a.as<char>() + comm.rank() * per_rank * 4, a.data(), per_rank,
                              DType::f32);
              break;
            case CommOp::reduce_scatter:
              comm.reduce_scatter(a.data(), b.data(), per_rank, DType::f32);
              break;
            default: comm.all_reduce(a.data(), b.data(), per_rank * n, DType::f32); break;
          }
          if (i >= warm) t[k].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        }
      }
    }
    std::vector<float> medians, means;
    for (std::vector<double>& x : t) {
      std::sort(x.begin(), x.end());
      const size_t h = x.size() / 2;
      medians.push_back(static_cast<float>(x.size() % 2 == 1 ? x[h] : 0.5 * (x[h - 1] + x[h])));
      double sum = 0;
      for (double v : x) sum += v;
      means.push_back(static_cast<float>(sum / static_cast<double>(x.size())));
    }
    if (group) {
      slowest_ranks(ctx, medians);
      slowest_ranks(ctx, means);
    }
    // Rank 0's medians on every rank: under MPI each process writes --out, and all the same.
    ctx.comm->broadcast(medians.data(), static_cast<int64_t>(medians.size()), DType::f32, 0);
    ctx.comm->broadcast(means.data(), static_cast<int64_t>(means.size()), DType::f32, 0);
    if (ctx.rank == 0 || o.backend != "local") {
      out.median.assign(medians.begin(), medians.end());
      out.mean.assign(means.begin(), means.end());
    }
  });
  return out;
}

// Whether an async collective advances while the rank is away from the library: a blocking
// all_reduce of 16 MiB is timed (the median of 3), then an async one is issued, every rank sleeps
// three times that long without calling the library, and the wait is timed. A wait under half the
// blocking time means the collective ran meanwhile (the local backend's worker); a longer one
// that it waited for the rank (Open MPI has no progress thread by default). Rank 0's verdict.
bool time_async_progress(const CalibrateOptions& o, std::ostream& log) {
  bool out = true;
  LaunchOptions lo;
  lo.backend = o.backend;
  lo.ranks = o.ranks;
  launch(lo, [&](RankContext& ctx) {
    const int64_t count = (int64_t{16} << 20) / 4;
    Buffer a = ctx.device->alloc_zeros(count * 4, MemCategory::workspace);
    Buffer b = ctx.device->alloc_zeros(count * 4, MemCategory::workspace);
    std::vector<double> t;
    for (int i = 0; i < 4; ++i) {  // the first is a warm-up
      const auto t0 = Clock::now();
      ctx.comm->all_reduce(a.data(), b.data(), count, DType::f32);
      if (i > 0) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    float blocking = static_cast<float>(t[1]);
    ctx.comm->broadcast(&blocking, 1, DType::f32, 0);  // every rank sleeps as long
    Work w = ctx.comm->all_reduce(a.data(), b.data(), count, DType::f32, ReduceOp::sum, true);
    std::this_thread::sleep_for(std::chrono::duration<double>(3.0 * blocking));
    const auto t0 = Clock::now();
    w.wait();
    float waited = static_cast<float>(std::chrono::duration<double>(Clock::now() - t0).count());
    ctx.comm->broadcast(&waited, 1, DType::f32, 0);
    if (ctx.rank == 0 || o.backend != "local") {
      out = waited < 0.5f * blocking;
      if (ctx.rank == 0)
        log << "  async progress: all_reduce 16 MiB blocking " << blocking * 1e3
            << " ms; issued async, after " << 3 * blocking * 1e3 << " ms away the wait took "
            << waited * 1e3 << " ms: " << (out ? "it ran meanwhile" : "it waited for the rank")
            << "\n";
    }
  });
  return out;
}

}  // namespace

CollectiveFit fit_collective(const std::vector<CollectiveSample>& samples, int ranks, int steps) {
  if (samples.size() < 2)
    SL_THROW(InvalidArgument, "fit_collective: ", samples.size(), " sizes; need at least 2");
  for (size_t i = 0; i < samples.size(); ++i) {
    if (!(samples[i].seconds > 0) || samples[i].bytes <= 0)
      SL_THROW(InvalidArgument, "fit_collective: sample ", i, " (", samples[i].bytes, " bytes, ",
               samples[i].seconds, " s) is not positive");
    if (i > 0 && samples[i].bytes <= samples[i - 1].bytes)
      SL_THROW(InvalidArgument, "fit_collective: sizes must ascend (sample ", i, ")");
  }
  const int most_runs = static_cast<int>(std::min<size_t>(3, samples.size() / 2));
  Cut chosen;
  for (int runs = 1; runs <= most_runs; ++runs) {
    Cut c = best_cut(samples, runs, ranks, steps);
    if (c.worst < chosen.worst) chosen = c;
    if (chosen.worst <= kRegimeTolerance) break;  // the fewest runs that hold the tolerance
  }
  CollectiveFit f;
  f.worst_error = chosen.worst;
  for (size_t r = 0; r < chosen.lines.size(); ++r) {
    LinkRegime g;
    g.latency = chosen.lines[r].alpha;
    g.bandwidth = 1.0 / chosen.lines[r].per_byte;
    if (r + 1 < chosen.lines.size())
      g.up_to_bytes = knee(samples, chosen.ends[r], chosen.lines[r], chosen.lines[r + 1], ranks);
    f.regimes.push_back(g);
  }
  return f;
}

int link_group_size(const CalibrateOptions& o) {
  return o.link_groups > 1 ? o.ranks / o.link_groups : o.ranks;
}

double fit_seconds(const CollectiveFit& f, int ranks, int steps, double bytes) {
  for (const LinkRegime& g : f.regimes)
    if (g.up_to_bytes == 0 || bytes <= double(g.up_to_bytes))
      return steps * (g.latency + bytes / ranks / g.bandwidth);
  return 0;
}

MeasuredCollectives measure_collectives(const CalibrateOptions& o, std::ostream& log) {
  // 64 KiB .. 256 MiB by 2 (quick: .. 16 MiB by 4). The largest sizes are there for the memory
  // regime: with 64 MiB the last one mixed sizes that partly stay in a 36 MiB L3 with those that
  // do not, and 256 MiB, extrapolated, came out 1.3x too fast (docs/simulate-validation.md).
  std::vector<int64_t> sizes;
  for (int64_t s = 64 << 10; s <= (o.quick ? int64_t{16} << 20 : int64_t{256} << 20);
       s *= (o.quick ? 4 : 2))
    sizes.push_back(s);
  const int n = link_group_size(o);
  const OpPlan plans[3] = {{CommOp::all_gather, n - 1},
                           {CommOp::reduce_scatter, n - 1},
                           {CommOp::all_reduce, 2 * (n - 1)}};
  log << "  collectives (median call; all_gather in place, the others out of place; caches: "
      << cache_sizes() << ")\n";
  MeasuredCollectives m;
  m.per_op = nlohmann::json::object();
  for (const OpPlan& p : plans) {
    const OpTimes t = time_op(o, p.op, sizes);
    std::vector<CollectiveSample> samples;
    for (size_t i = 0; i < sizes.size(); ++i) samples.push_back({sizes[i], t.median[i]});
    const CollectiveFit f = fit_collective(samples, n, p.steps);
    const char* name = comm_op_name(p.op);
    log << "  " << name << " (size: median us, mean / median, fit / median):";
    for (size_t i = 0; i < samples.size(); ++i)
      log << " " << format_bytes(samples[i].bytes) << ": " << samples[i].seconds * 1e6 << ", "
          << t.mean[i] / samples[i].seconds << ", "
          << fit_seconds(f, n, p.steps, double(samples[i].bytes)) / samples[i].seconds << ";";
    log << "\n    fit (worst " << 100 * f.worst_error << "%):";
    nlohmann::json regimes = nlohmann::json::array();
    for (const LinkRegime& g : f.regimes) {
      nlohmann::json r = {{"bandwidth_GBps", g.bandwidth * 1e-9}, {"latency_us", g.latency * 1e6}};
      log << " alpha " << g.latency * 1e6 << " us, beta " << g.bandwidth * 1e-9 << " GB/s";
      if (g.up_to_bytes > 0) {
        r["up_to_bytes"] = g.up_to_bytes;
        log << " up to " << format_bytes(g.up_to_bytes) << ";";
      }
      regimes.push_back(r);
    }
    log << "\n";
    m.per_op[name] = regimes;
    if (p.op == CommOp::all_gather) {
      m.latency = f.regimes.front().latency;
      m.bandwidth = f.regimes.back().bandwidth;
    }
  }
  m.async_progress = time_async_progress(o, log);
  return m;
}

}  // namespace shardlab
