// Collective bandwidth, as nccl-tests report it: every row of the collective table over buffer
// sizes 1 KiB .. 256 MiB (the full buffer, nccl-tests' "size"), on the local backend at 2 and 4
// ranks, and on MPI when started under mpirun (skipped otherwise). Counters: time per call,
// bytes = the buffer (the full size), sent = what one rank sends (ring traffic; both as
// core/comm/traffic.hpp defines them), algbw = bytes / time, busbw = algbw * bus factor (bytes
// per second). A 256 MiB memcpy gives the machine's copy bandwidth for comparison. The
// collectives that have an out-of-place form run in place too, as `<name>/local_in_place` and
// `<name>/mpi_in_place` (all_gather's send block is the rank's slot of recv, the way FSDP's unshard
// calls it: core/fsdp/unshard.cpp).
//
//   build/bin/bench_collectives --benchmark_filter='bytes:(1048576|67108864)/'   (quick subset)
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bin/bench_collectives
//       --benchmark_filter=/mpi/                                        (one command line)
//
// `--memcpy_rounds=R` pairs each local collective with its reference: the timed calls run in R
// rounds, each followed by the same number of memcpy calls of the collective's size by every rank
// thread at once, and `memcpy_frac` is busbw over that copy rate, the median round (the issue's
// "at 0.7 of memcpy, measured in one run with the same threads"; docs/collectives.md).
//
// `reduce_placement/<layout>` times the local all_reduce's reduction alone, on one thread, with
// its four buffers at three placements (docs/collectives.md, "Buffer placement").
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/flags.hpp"
#include "core/comm/collective_table.hpp"
#include "core/comm/launcher.hpp"
#include "core/comm/reduce.hpp"
#include "core/comm/traffic.hpp"

#ifdef SHARDLAB_WITH_MPI
#include <mpi.h>
#endif

using namespace shardlab;

namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;

int g_mpi_rank = 0;
int g_mpi_size = 0;       // 0: not under mpirun
int64_t g_calls = 0;      // --calls: timed calls per benchmark, 0 = iterations_for(size)
int g_memcpy_rounds = 0;  // --memcpy_rounds: local collectives alternate with memcpy (0: off)

// Fixed iterations per size (the same on every MPI process, so all call the same collectives):
// about 256 MiB of buffer per benchmark, between 10 and 1000 calls.
int64_t iterations_for(int64_t bytes) {
  if (g_calls > 0) return g_calls;
  const int64_t it = (256 * kMiB) / bytes;
  return it < 10 ? 10 : (it > 1000 ? 1000 : it);
}

// Untimed calls before the timed ones, as nccl-tests' -w 5: the first is checked, and a fresh
// buffer's first calls run slower (local, 16 MiB: the first five up to 1.9x the later ones).
constexpr int kWarmupCalls = 5;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// What time_collective measured, rank 0's figures. Without paired rounds there is one round.
struct Timed {
  double per_call = 0;           // seconds per collective call over every timed call
  std::vector<double> calls;     // per round: the calls timed
  std::vector<double> coll_s;    // per round: seconds for those collective calls
  std::vector<double> memcpy_s;  // per round, paired only: seconds for as many memcpy calls
};

// Times `iters` calls of `row` on every rank of the launched world after kWarmupCalls untimed
// ones, as rank 0 measures them between two barriers. Checks the first call's result.
//
// With `rounds` > 0 (--memcpy_rounds, local backend only) the timed calls are split into that many
// rounds, and after each one every rank thread copies the collective's size from one buffer of its
// own to another as many times, all at once (bm_memcpy_ranks' reference): collective and memcpy
// alternate in one launch on the same threads, so a host whose memory speed drifts moves both.
Timed time_collective(const CollectiveRow& row, const LaunchOptions& opts, int64_t count,
                      int64_t bytes, int64_t iters, bool in_place, int rounds, std::string* error) {
  const bool paired = rounds > 0;
  const int nr = paired ? static_cast<int>(std::min<int64_t>(rounds, iters)) : 1;
  std::vector<int64_t> calls(nr);  // the timed calls, as evenly split into rounds as they go
  for (int r = 0; r < nr; ++r) calls[r] = iters * (r + 1) / nr - iters * r / nr;
  Timed out;
  launch(opts, [&](RankContext& ctx) {
    const int n = ctx.world;
    CollectiveBuffers b = make_collective_buffers(row, *ctx.device, n, ctx.rank, count, DType::f32,
                                                  in_place || !row.out_of_place);
    row.init(ctx.rank, n, b);
    row.run(*ctx.comm, b, false);  // the first warm-up call touches every page
    std::string e = row.check(ctx.rank, n, b);
    if (!e.empty() && ctx.rank == 0) *error = e;
    for (int i = 1; i < kWarmupCalls; ++i) row.run(*ctx.comm, b, false);
    Buffer src, dst;
    if (paired) {
      src = ctx.device->alloc(bytes, MemCategory::workspace);
      dst = ctx.device->alloc(bytes, MemCategory::workspace);
      std::memset(src.data(), 1 + ctx.rank, static_cast<size_t>(bytes));
      for (int i = 0; i < kWarmupCalls; ++i)
        std::memcpy(dst.data(), src.data(), static_cast<size_t>(bytes));
    }
    std::vector<float> t(2 * static_cast<size_t>(nr), 0.0f);  // collective, memcpy per round
    for (int r = 0; r < nr; ++r) {
      ctx.comm->barrier();
      double t0 = now_s();
      for (int64_t i = 0; i < calls[r]; ++i) row.run(*ctx.comm, b, false);
      ctx.comm->barrier();
      t[2 * r] = static_cast<float>(now_s() - t0);
      if (!paired) continue;
      t0 = now_s();
      for (int64_t i = 0; i < calls[r]; ++i) {
        std::memcpy(dst.data(), src.data(), static_cast<size_t>(bytes));
        benchmark::ClobberMemory();
      }
      ctx.comm->barrier();
      t[2 * r + 1] = static_cast<float>(now_s() - t0);
    }
    // Every MPI process reports rank 0's times, so all make the same decisions.
    ctx.comm->broadcast(t.data(), static_cast<int64_t>(t.size()), DType::f32, 0);
    // Local ranks share `out` (rank 0 writes it); each MPI process has its own.
    if (ctx.rank == 0 || opts.backend != "local") {
      double total = 0;
      for (int r = 0; r < nr; ++r) {
        out.calls.push_back(static_cast<double>(calls[r]));
        out.coll_s.push_back(t[2 * r]);
        if (paired) out.memcpy_s.push_back(t[2 * r + 1]);
        total += t[2 * r];
      }
      out.per_call = total / static_cast<double>(iters);
    }
  });
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// The CommOp of a row of the collective table, by its name.
CommOp op_of(const CollectiveRow& row) {
  for (CommOp op :
       {CommOp::all_gather, CommOp::reduce_scatter, CommOp::all_reduce, CommOp::broadcast})
    if (std::strcmp(row.name, comm_op_name(op)) == 0) return op;
  std::fprintf(stderr, "bench_collectives: no collective named %s\n", row.name);
  std::exit(2);
}

void report(benchmark::State& state, const CollectiveRow& row, int64_t count, int64_t bytes, int n,
            const Timed& t) {
  for (auto _ : state) state.SetIterationTime(t.per_call);
  const Bandwidth bw = collective_bandwidth(row, bytes, n, t.per_call);
  using benchmark::Counter;
  state.counters["time"] = Counter(t.per_call);
  state.counters["algbw"] = Counter(bw.algbw, Counter::kDefaults, Counter::OneK::kIs1024);
  state.counters["busbw"] = Counter(bw.busbw, Counter::kDefaults, Counter::OneK::kIs1024);
  state.counters["bytes"] = Counter(double(bytes), Counter::kDefaults, Counter::OneK::kIs1024);
  state.counters["sent"] = Counter(double(sent_bytes(op_of(row), count, DType::f32, n)),
                                   Counter::kDefaults, Counter::OneK::kIs1024);
  if (t.memcpy_s.empty()) return;
  // Per round: busbw over what each rank thread's memcpy of the same size reached just after.
  std::vector<double> frac, copy_bw;
  for (size_t r = 0; r < t.memcpy_s.size(); ++r) {
    const double mem_bw = double(bytes) * t.calls[r] / t.memcpy_s[r];
    copy_bw.push_back(mem_bw);
    frac.push_back(collective_bandwidth(row, bytes, n, t.coll_s[r] / t.calls[r]).busbw / mem_bw);
  }
  state.counters["memcpy_rounds"] = Counter(double(t.memcpy_s.size()));
  state.counters["memcpy_bw"] =
      Counter(median(copy_bw), Counter::kDefaults, Counter::OneK::kIs1024);
  state.counters["memcpy_frac"] = Counter(median(frac));
  state.counters["memcpy_frac_min"] = Counter(*std::min_element(frac.begin(), frac.end()));
  state.counters["memcpy_frac_max"] = Counter(*std::max_element(frac.begin(), frac.end()));
}

void bm_collective(benchmark::State& state, const CollectiveRow* row, bool mpi, bool in_place) {
  const int64_t bytes_wanted = state.range(0);
  LaunchOptions opts;
  int n = static_cast<int>(state.range(1));
  if (mpi) {
    if (g_mpi_size == 0) {
      state.SkipWithError(
          "backend mpi: start under mpirun (mpirun --allow-run-as-root "
          "--oversubscribe -np 4 build/bin/bench_collectives)");
      return;
    }
    opts.backend = "mpi";
  } else {
    opts.ranks = n;
  }
  const int64_t count = count_for_bytes(*row, bytes_wanted, n, DType::f32);
  const int64_t bytes = row->bytes(count, n, DType::f32);
  std::string error;
  const Timed t = time_collective(*row, opts, count, bytes, state.max_iterations, in_place,
                                  mpi ? 0 : g_memcpy_rounds, &error);
  if (!error.empty()) {
    state.SkipWithError(("wrong result: " + error).c_str());
    return;
  }
  report(state, *row, count, bytes, n, t);
}

// The reference the local collectives are compared with, in the same process and on the same kind
// of threads: launch() starts N rank threads, as for a collective, and each copies its own `bytes`
// (the collective's nccl-tests size) from one buffer of its device to another, all N at once, so
// they share the memory bandwidth as the ranks of a collective do. `bw` = bytes one rank copies per
// second (rank 0's time between two barriers, as for the collectives): the rate a rank's "link"
// reaches when it only copies, the figure busbw is compared with (docs/collectives.md).
void bm_memcpy_ranks(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  LaunchOptions opts;
  opts.ranks = static_cast<int>(state.range(1));
  const int64_t iters = state.max_iterations;
  double per_call = 0;
  launch(opts, [&](RankContext& ctx) {
    Buffer src = ctx.device->alloc(bytes, MemCategory::workspace);
    Buffer dst = ctx.device->alloc(bytes, MemCategory::workspace);
    std::memset(src.data(), 1 + ctx.rank, static_cast<size_t>(bytes));
    for (int i = 0; i < kWarmupCalls; ++i)  // as for the collectives; the first touches every page
      std::memcpy(dst.data(), src.data(), static_cast<size_t>(bytes));
    ctx.comm->barrier();
    const double t0 = now_s();
    for (int64_t i = 0; i < iters; ++i) {
      std::memcpy(dst.data(), src.data(), static_cast<size_t>(bytes));
      benchmark::ClobberMemory();
    }
    ctx.comm->barrier();
    if (ctx.rank == 0) per_call = (now_s() - t0) / static_cast<double>(iters);
  });
  for (auto _ : state) state.SetIterationTime(per_call);
  using benchmark::Counter;
  state.counters["time"] = Counter(per_call);
  state.counters["bw"] =
      Counter(double(bytes) / per_call, Counter::kDefaults, Counter::OneK::kIs1024);
  state.counters["bytes"] = Counter(double(bytes), Counter::kDefaults, Counter::OneK::kIs1024);
}

// Where the four buffers of a 2-rank all_reduce (two sources, two destinations) sit, as offsets
// from a 256 MiB boundary:
// - glibc_arenas: what glibc gave two rank threads in one launch of all_reduce/local
//   (bytes:1048576; read from an aligned_alloc hook): each rank's send and recv in its own thread
//   arena, the arenas 128 MiB apart, the blocks at nearly the same offset in each;
// - same_offset: four same-sized mappings exactly 256 MiB apart (how the kernel places bare
//   mappings of one size one after another, here of 256 MiB);
// - pool: the same four blocks as the CPU pool maps them (core/device/cpu_device.cpp): one page
//   longer than the block, so mappings placed one after another are 256 MiB + 4 KiB apart, and
//   the blocks start 0, 23, 46 and 5 cache lines into their first page.
struct Placement {
  const char* name;
  int64_t send0, send1, recv0, recv1;
};
constexpr int64_t kLine = 64;
constexpr Placement kPlacements[] = {
    {"glibc_arenas", 128 * kMiB + 0x101c00, 0x100bc0, 128 * kMiB + 0x201c80, 0x200c40},
    {"same_offset", 0, 256 * kMiB, 512 * kMiB, 768 * kMiB},
    {"pool", 0, 256 * kMiB + 4 * kKiB + 23 * kLine, 512 * kMiB + 8 * kKiB + 46 * kLine,
     768 * kMiB + 12 * kKiB + 5 * kLine},
};

// reduce_rank_order over 2 sources into 2 destinations, the whole buffer on one thread (a rank
// thread runs the same loop on its pieces), at a placement from kPlacements.
void bm_reduce_placement(benchmark::State& state, const Placement* at) {
  const int64_t bytes = state.range(0);
  const size_t reserve = size_t{1280} * kMiB;  // a 256 MiB boundary and 1 GiB past it (unbacked)
  void* m = mmap(nullptr, reserve, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    state.SkipWithError("mmap of the placement area failed");
    return;
  }
  const uintptr_t base =
      (reinterpret_cast<uintptr_t>(m) + 256 * kMiB - 1) & ~uintptr_t(256 * kMiB - 1);
  auto buf = [base](int64_t offset) { return reinterpret_cast<float*>(base + offset); };
  float* send[2] = {buf(at->send0), buf(at->send1)};
  const void* src[2] = {send[0], send[1]};
  void* dst[2] = {buf(at->recv0), buf(at->recv1)};
  const int64_t len = bytes / 4;
  for (int r = 0; r < 2; ++r) {
    std::memset(dst[r], 0, static_cast<size_t>(bytes));
    for (int64_t i = 0; i < len; ++i) send[r][i] = float(i % 17);
  }
  for (int i = 0; i < kWarmupCalls; ++i)
    reduce_rank_order(src, 2, dst, 2, len, DType::f32, ReduceOp::sum);
  for (auto _ : state) {
    reduce_rank_order(src, 2, dst, 2, len, DType::f32, ReduceOp::sum);
    benchmark::ClobberMemory();
  }
  munmap(m, reserve);
  using benchmark::Counter;
  state.counters["bytes"] = Counter(double(bytes), Counter::kDefaults, Counter::OneK::kIs1024);
}

// Bytes copied per second by one thread's memcpy of 256 MiB.
void bm_memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  using benchmark::Counter;
  state.counters["bw"] =
      Counter(double(bytes) * double(state.iterations()), Counter::kIsRate, Counter::OneK::kIs1024);
}

void register_all() {
  std::vector<int64_t> sizes;
  for (int64_t s = kKiB; s <= 256 * kMiB; s *= 4) sizes.push_back(s);
  for (const CollectiveRow& row : collective_table()) {
    if (g_mpi_size == 0) {
      // Under mpirun each process would run its own local world beside the others: skip those.
      for (bool in_place : {false, true}) {
        if (in_place && !row.out_of_place) continue;  // broadcast: in place already
        const std::string name = std::string(row.name) + (in_place ? "/local_in_place" : "/local");
        for (int n : {2, 4})
          for (int64_t s : sizes)
            benchmark::RegisterBenchmark(name.c_str(), bm_collective, &row, false, in_place)
                ->Args({s, n})
                ->ArgNames({"bytes", "ranks"})
                ->Iterations(iterations_for(s))
                ->UseManualTime()
                ->Unit(benchmark::kMicrosecond);
      }
    }
    // MPI too in both forms; `mpi_in_place` (MPI_IN_PLACE) is how the engine's unshard calls
    // all_gather, the form `shardlab calibrate` times (docs/simulate-validation.md).
    for (bool in_place : {false, true}) {
      if (in_place && !row.out_of_place) continue;
      const std::string name = std::string(row.name) + (in_place ? "/mpi_in_place" : "/mpi");
      for (int64_t s : sizes)
        benchmark::RegisterBenchmark(name.c_str(), bm_collective, &row, true, in_place)
            ->Args({s, g_mpi_size})
            ->ArgNames({"bytes", "ranks"})
            ->Iterations(iterations_for(s))
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
    }
  }
  if (g_mpi_size == 0)
    for (int n : {2, 4})
      for (int64_t s : sizes)
        benchmark::RegisterBenchmark("memcpy/local", bm_memcpy_ranks)
            ->Args({s, n})
            ->ArgNames({"bytes", "ranks"})
            ->Iterations(iterations_for(s))
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
  if (g_mpi_size == 0)
    for (const Placement& at : kPlacements)
      benchmark::RegisterBenchmark((std::string("reduce_placement/") + at.name).c_str(),
                                   bm_reduce_placement, &at)
          ->Arg(1 * kMiB)
          ->ArgNames({"bytes"})
          ->Unit(benchmark::kMicrosecond);
  if (g_mpi_rank == 0)
    benchmark::RegisterBenchmark("memcpy", bm_memcpy)
        ->Arg(256 * kMiB)
        ->ArgNames({"bytes"})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}

// Prints nothing: the MPI processes other than rank 0 run the same benchmarks silently.
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
#ifdef SHARDLAB_WITH_MPI
  if (under_mpirun()) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_mpi_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_mpi_size);
  }
#endif
  // Only rank 0 writes --benchmark_out; --calls and --memcpy_rounds are ours.
  auto whole = [](const char* arg, size_t prefix, long long hi, long long* out) {
    char* end = nullptr;
    const long long v = std::strtoll(arg + prefix, &end, 10);
    if (end == arg + prefix || *end != '\0' || v < 0 || v > hi) {
      std::fprintf(stderr, "bench_collectives: %s: want a whole number in [0, %lld]\n", arg, hi);
      return false;
    }
    *out = v;
    return true;
  };
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    long long v = 0;
    if (std::strncmp(argv[i], "--calls=", 8) == 0) {
      if (!whole(argv[i], 8, 1000000, &v)) return 2;
      g_calls = v;
      continue;
    }
    if (std::strncmp(argv[i], "--memcpy_rounds=", 16) == 0) {
      if (!whole(argv[i], 16, 100, &v)) return 2;
      g_memcpy_rounds = static_cast<int>(v);
      continue;
    }
    if (g_mpi_rank == 0 || std::strncmp(argv[i], "--benchmark_out", 15) != 0)
      args.push_back(argv[i]);
  }
  int nargs = static_cast<int>(args.size());
  register_all();
  shardlab::bench::initialize(&nargs, args.data(), "bench_collectives",
                              "algbw and busbw of every collective, 1 KiB to 256 MiB, local at 2 "
                              "and 4 ranks, MPI under mpirun; memcpy (docs/collectives.md)",
                              {{"--calls=0",
                                "timed calls per benchmark, after 5 untimed ones (0: about "
                                "256 MiB of buffer each, 10 to 1000 calls); more calls let a "
                                "profiler see the collective rather than the setup and the "
                                "check"},
                               {"--memcpy_rounds=0",
                                "local backend: split the timed calls into this many rounds, each "
                                "followed by as many memcpy calls of the same size by every rank "
                                "thread at once; adds the counters memcpy_bw and memcpy_frac "
                                "(busbw over it, the median round; _min, _max) (0: off)"}});
  if (g_mpi_rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
#ifdef SHARDLAB_WITH_MPI
  if (g_mpi_size > 0) MPI_Finalize();
#endif
  return 0;
}
