// Training-step benchmarks: DP against FSDP. Strategy (no_shard, shard_optim, shard_grad_op,
// full_shard, hybrid_shard) x ranks (1, 2, 4, 8) x model preset (tiny, small; medium, llama-tiny
// and llama-small on request) x prefetch (on/off, for the strategies that gather parameters per
// unit), on the local backend; on MPI when started under mpirun. One iteration is one optimizer
// step of every rank: the ranks start once per benchmark run and step in lockstep
// (bench/train_driver.hpp); the manual time is the step's wall time.
//
// Weak scaling: every rank trains B x T tokens of its own per step, so tokens/s counts all ranks.
// The CPU column is the process's CPU time per step, all ranks' threads together.
// Counters (bytes as kIs1024 counters, so the console shows Ki/Mi):
//   tokens/s       all ranks' tokens per second of step time
//   step_ms        mean step time
//   step_ms_median median step time (the timed steps, after --warmup untimed ones)
//   peak           per-rank peak bytes (the largest over ranks); peak_<category> the categories
//                  at that moment (they sum to peak)
//   persistent     params + grads + optimizer state per rank (largest over ranks)
//   formula        docs/memory.md's persistent bytes per rank for this strategy
//                  (16 Psi, 16 Psi / N, ...)
//   planned_peak   the planner's peak (core/fsdp/memory_plan.hpp) for the same run
//   comm_bytes     sent per rank: bytes one rank sends into collectives per step (ring traffic;
//                  the largest over ranks)
//   comm_buffer    buffer: the full sizes of the same collectives per step (nccl-tests'
//                  convention; the largest over ranks). core/comm/traffic.hpp defines both.
//   comm_share     time in collectives / step time (mean over ranks)
//   exposed_share  collective time not hidden behind this rank's compute / step time
//   params         Psi
//   rss_peak       peak resident memory of the process during the row (VmHWM; under MPI the
//                  largest over processes, each one rank; locally all N ranks' threads together)
//   minflt_per_step minor page faults of the process per timed step (getrusage; locally all
//                  ranks together, under MPI rank 0's process)
//   model_gflops   model FLOP/s per rank at the median step, in GFLOP/s: flops per token =
//                  6 Psi + 12 L C T (docs/gpu.md), times B T per rank, over the median step time
//   sgemm_gflops   what one rank thread's sgemm reaches (n^3, n = --ceiling_size, 2048 by
//                  default; OpenBLAS, one thread) while the row's N rank threads all run it at
//                  once: the same threads' GEMM ceiling,
//                  measured next to the row, just before its trainer starts and just after its
//                  timed steps; the mean of the two (a host whose speed drifts biases neither)
//   sgemm_before, sgemm_after  the two measurements, GFLOP/s: how far the host drifted
//   gemm_frac      model_gflops / sgemm_gflops: the step's fraction of the GEMM ceiling
// hybrid_shard uses groups of G = 2 ranks (G = 1 at one rank): the "group" argument.
//
//   build/bin/bench_train_step                                     (tiny and small, 1..8 ranks)
//   build/bin/bench_train_step --presets=tiny --ranks=1,2 --benchmark_min_time=0.01   (quick)
//   build/bin/bench_train_step --presets=medium --benchmark_filter=full_shard
//   build/bin/bench_train_step --trace=0      (no span recording: the recorder's cost, measured)
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bin/bench_train_step --mpi_steps=10
//   build/bin/bench_train_step --presets=small --ranks=2 --batch=4 --seq=128 --warmup=2 --steps=20
//                                       (bench/peers/: the shapes PyTorch runs beside it)
#include <benchmark/benchmark.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <sstream>
#include <string>
#include <vector>

#include "bench/flags.hpp"
#include "bench/train_driver.hpp"
#include "core/comm/launcher.hpp"
#include "core/device/device.hpp"

#ifdef SHARDLAB_WITH_MPI
#include <mpi.h>

#include "core/comm/mpi/mpi_comm.hpp"
#endif

using namespace shardlab;
using namespace shardlab::bench;

namespace {

int g_mpi_rank = 0;
int g_mpi_size = 0;  // 0: not under mpirun
int g_mpi_steps = 10;
bool g_trace = true;  // --trace=0: no spans recorded (and no comm_share / exposed_share counters)
int g_batch = 0;      // --batch: per-rank micro-batch for every preset (0: the preset's own)
int g_seq = 0;        // --seq: T for every preset (0: the preset's own)
int g_warmup = 1;     // --warmup: untimed steps before the timed ones
int g_steps = 0;      // --steps: timed steps per row on the local backend (0: Google Benchmark's)
int g_ceiling_n = 2048;    // --ceiling_size: n of the n^3 sgemm that measures the ceiling
bool g_keep_root = false;  // --keep_root=1: EngineConfig::keep_root where the strategy gathers

// Per-rank micro-batch of each preset: enough tokens that the GEMMs dominate, few enough that
// eight ranks on two cores still take a step in well under a second.
struct PresetRun {
  const char* name;
  int batch;
  int seq_len;
};
constexpr PresetRun kPresetRuns[] = {{"tiny", 4, 64},
                                     {"small", 2, 64},
                                     {"medium", 1, 64},
                                     {"llama-tiny", 4, 64},
                                     {"llama-small", 2, 64}};

// The presets of this run with --batch / --seq applied; a deque, so registered pointers stay put.
std::deque<PresetRun> g_runs;

const PresetRun& preset_run(const std::string& name) {
  for (const PresetRun& p : kPresetRuns)
    if (name == p.name) return p;
  SL_THROW(InvalidArgument, "bench_train_step: --presets: unknown preset '", name,
           "' (expected tiny, small, medium, llama-tiny or llama-small)");
}

int hybrid_group_for(int ranks) { return ranks >= 2 ? 2 : 1; }

void set_bytes(benchmark::State& state, const char* name, double bytes) {
  state.counters[name] =
      benchmark::Counter(bytes, benchmark::Counter::kDefaults, benchmark::Counter::OneK::kIs1024);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

int64_t minor_faults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_minflt);
}

// FLOP/s one thread's sgemm (n^3, n = --ceiling_size, 2048 by default; the device's GEMM:
// OpenBLAS, one thread) reaches while `ranks` rank threads of a local world run it at the same
// time: the mean over the threads of 2 n^3 / (the mean of 2 timed calls, after one warm-up).
// Under mpirun every process runs its own (one thread) at the same point. Each row measures it
// twice, around its steps: about 1 s per row at N = 2 on the 2-core machine.
double sgemm_rate(int ranks) {
  const int kN = g_ceiling_n;
  LaunchOptions opts;
  opts.ranks = g_mpi_size > 0 ? 1 : ranks;
  std::vector<double> rate(opts.ranks, 0.0);
  launch(opts, [&](RankContext& ctx) {
    std::vector<float> a(static_cast<size_t>(kN) * kN, 0.5f),
        b(static_cast<size_t>(kN) * kN, 0.25f), c(static_cast<size_t>(kN) * kN);
    std::vector<double> t;
    ctx.comm->barrier();
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      ctx.device->gemm(false, false, kN, kN, kN, 1.0f, a.data(), kN, b.data(), kN, 0.0f, c.data(),
                       kN);
      const std::chrono::duration<double> d = std::chrono::steady_clock::now() - t0;
      if (i > 0) t.push_back(d.count());
    }
    rate[ctx.rank] = 2.0 * kN * kN * double(kN) / median(t);
  });
  double sum = 0;
  for (double r : rate) sum += r;
  return sum / static_cast<double>(rate.size());
}

void bm_train_step(benchmark::State& state, Strategy strategy, const PresetRun* preset, bool mpi) {
  const int ranks = static_cast<int>(state.range(0));
  TrainRun run;
  run.model = GPTConfig::preset(preset->name);
  run.batch = static_cast<int>(state.range(2));
  run.seq_len = static_cast<int>(state.range(3));
  run.engine.strategy = strategy;
  run.engine.prefetch = static_cast<int>(state.range(1));
  run.engine.hybrid_group = static_cast<int>(state.range(4));
  run.engine.keep_root = g_keep_root && gathers_params_per_unit(strategy);
  if (mpi) {
    if (g_mpi_size == 0) {
      state.SkipWithError(
          "backend mpi: start under mpirun (mpirun --allow-run-as-root "
          "--oversubscribe -np 4 build/bin/bench_train_step)");
      return;
    }
    run.backend = "mpi";
  }
  run.ranks = ranks;
  run.trace = g_trace;
  run.warmup = g_warmup;

  TrainReport rep;
  double seconds = 0;
  std::vector<double> times;
  int64_t faults = 0;
  double ceiling_before = 0, ceiling_after = 0;
  try {
    ceiling_before = sgemm_rate(mpi ? 1 : ranks);
    LockstepTrainer trainer(run);
    faults = minor_faults();
    for (auto _ : state) {
      const double s = trainer.step();
      state.SetIterationTime(s);
      seconds += s;
      times.push_back(s);
    }
    faults = minor_faults() - faults;
    rep = trainer.finish();
    ceiling_after = sgemm_rate(mpi ? 1 : ranks);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const double steps = static_cast<double>(state.iterations());
  const double tokens_per_step = static_cast<double>(ranks) * run.batch * run.seq_len;
  state.counters["tokens/s"] = seconds > 0 ? tokens_per_step * steps / seconds : 0.0;
  state.counters["step_ms"] = steps > 0 ? 1e3 * seconds / steps : 0.0;
  state.counters["step_ms_median"] = 1e3 * median(times);
  set_bytes(state, "peak", static_cast<double>(rep.peak));
  for (int c = 0; c < kNumMemCategories; ++c)
    if (mem_category_shown(static_cast<MemCategory>(c), rep.at_peak[c]))
      set_bytes(state,
                (std::string("peak_") + mem_category_name(static_cast<MemCategory>(c))).c_str(),
                static_cast<double>(rep.at_peak[c]));
  set_bytes(state, "persistent", static_cast<double>(rep.persistent));
  set_bytes(state, "formula",
            formula_persistent_bytes(strategy, static_cast<double>(rep.params), ranks,
                                     run.engine.hybrid_group));
  PlanInput in = plan_input(run.engine, ranks, run.model, run.batch, run.seq_len);
  set_bytes(state, "planned_peak", static_cast<double>(plan_memory(in).peak_total()));
  set_bytes(state, "comm_bytes", static_cast<double>(rep.comm_bytes_per_step));
  set_bytes(state, "comm_buffer", static_cast<double>(rep.comm_buffer_per_step));
  if (run.trace) {
    state.counters["comm_share"] = rep.comm_share;
    state.counters["exposed_share"] = rep.exposed_share;
  }
  state.counters["params"] = static_cast<double>(rep.params);
  state.counters["keep_root"] = run.engine.keep_root ? 1.0 : 0.0;
  set_bytes(state, "rss_peak", static_cast<double>(rep.rss_peak));
  state.counters["minflt_per_step"] = steps > 0 ? static_cast<double>(faults) / steps : 0.0;
  // docs/gpu.md's model FLOPs per token; per rank, at the median step.
  const double flops_per_token = run.model.flops_per_token(run.seq_len);
  const double step_median = median(times);
  const double model_rate =
      step_median > 0 ? flops_per_token * run.batch * run.seq_len / step_median : 0.0;
  const double ceiling = 0.5 * (ceiling_before + ceiling_after);
  state.counters["model_gflops"] = model_rate / 1e9;
  state.counters["sgemm_gflops"] = ceiling / 1e9;
  state.counters["sgemm_before"] = ceiling_before / 1e9;
  state.counters["sgemm_after"] = ceiling_after / 1e9;
  state.counters["gemm_frac"] = ceiling > 0 ? model_rate / ceiling : 0.0;
}

struct Options {
  std::vector<std::string> presets{"tiny", "small"};
  std::vector<int> ranks{1, 2, 4, 8};
};

// Takes this program's own flags out of argv (Google Benchmark rejects unknown ones).
Options parse_own_flags(int* argc, char** argv) {
  Options o;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--presets=", 0) == 0) {
      o.presets = split_list(a.substr(10));
    } else if (a.rfind("--ranks=", 0) == 0) {
      o.ranks.clear();
      for (const std::string& r : split_list(a.substr(8)))
        o.ranks.push_back(int_flag("--ranks", r, 1));
    } else if (a.rfind("--trace=", 0) == 0) {
      g_trace = a.substr(8) != "0";
    } else if (a.rfind("--mpi_steps=", 0) == 0) {
      g_mpi_steps = std::stoi(a.substr(12));
    } else if (a.rfind("--batch=", 0) == 0) {
      g_batch = int_flag("--batch", a.substr(8), 1);
    } else if (a.rfind("--seq=", 0) == 0) {
      g_seq = int_flag("--seq", a.substr(6), 1);
    } else if (a.rfind("--warmup=", 0) == 0) {
      g_warmup = int_flag("--warmup", a.substr(9), 0);
    } else if (a.rfind("--steps=", 0) == 0) {
      g_steps = int_flag("--steps", a.substr(8), 1);
    } else if (a.rfind("--keep_root=", 0) == 0) {
      g_keep_root = int_flag("--keep_root", a.substr(12), 0) != 0;
    } else if (a.rfind("--ceiling_size=", 0) == 0) {
      g_ceiling_n = int_flag("--ceiling_size", a.substr(15), 64);
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  return o;
}

void register_all(const Options& o) {
  const Strategy strategies[] = {Strategy::no_shard, Strategy::shard_optim, Strategy::shard_grad_op,
                                 Strategy::full_shard, Strategy::hybrid_shard};
  for (const std::string& name : o.presets) {
    PresetRun& p = g_runs.emplace_back(preset_run(name));
    if (g_batch > 0) p.batch = g_batch;
    if (g_seq > 0) p.seq_len = g_seq;
    for (Strategy s : strategies) {
      // Prefetch changes nothing for strategies that keep full parameters: register it once.
      std::vector<int> prefetch =
          gathers_params_per_unit(s) ? std::vector<int>{1, 0} : std::vector<int>{1};
      const bool mpi = g_mpi_size > 0;
      const std::string bm =
          std::string("train_step/") + (mpi ? "mpi/" : "local/") + strategy_name(s) + "/" + p.name;
      auto* b = benchmark::RegisterBenchmark(bm.c_str(), bm_train_step, s, &p, mpi);
      b->ArgNames({"ranks", "prefetch", "batch", "seq", "group"});
      const std::vector<int> ranks = mpi ? std::vector<int>{g_mpi_size} : o.ranks;
      for (int n : ranks)
        for (int pf : prefetch) b->Args({n, pf, p.batch, p.seq_len, hybrid_group_for(n)});
      // CPU time of the whole process (every rank's threads): steadier than wall time when other
      // processes share the cores.
      b->UseManualTime()->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
      // Every MPI process must run the same number of steps: no adaptive iteration count.
      if (mpi) b->Iterations(g_mpi_steps);
      if (!mpi && g_steps > 0) b->Iterations(g_steps);
    }
  }
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
    mpi_ensure_initialized();
    MPI_Comm_rank(MPI_COMM_WORLD, &g_mpi_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_mpi_size);
  }
#endif
  // Ranks are threads (or processes sharing the cores): one BLAS thread each, at one rank too, so
  // every row of a table measures the same kind of compute.
  set_blas_threads(1);
  Options o;
  try {
    o = parse_own_flags(&argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 2;
  }
  // Only rank 0 writes --benchmark_out.
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i)
    if (g_mpi_rank == 0 || std::strncmp(argv[i], "--benchmark_out", 15) != 0)
      args.push_back(argv[i]);
  int nargs = static_cast<int>(args.size());
  try {
    register_all(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 2;
  }
  initialize(
      &nargs, args.data(), "bench_train_step",
      "one optimizer step of every rank in lockstep, per strategy x ranks x preset x "
      "prefetch (docs/bench/README.md)",
      {{"--presets=tiny,small",
        "model presets to run: tiny, small, medium, llama-tiny, llama-small"},
       {"--ranks=1,2,4,8", "local ranks per row (under mpirun: the process count)"},
       {"--trace=1", "0: record no spans (no comm_share / exposed_share counters)"},
       {"--mpi_steps=10", "steps per row under mpirun (the same in every process)"},
       {"--batch=0", "per-rank micro-batch B for every preset (0: tiny 4, small 2, medium 1)"},
       {"--seq=0", "sequence length T for every preset (0: 64)"},
       {"--warmup=1", "untimed steps before the timed ones, per row"},
       {"--steps=0", "timed steps per local row (0: as many as --benchmark_min_time asks)"},
       {"--keep_root=0",
        "1: full_shard and hybrid_shard keep the root gathered into the backward (train "
        "--keep-root; PyTorch FSDP's default)"},
       {"--ceiling_size=2048",
        "n of the n^3 sgemm measuring sgemm_gflops before and after each row (the quick suite: "
        "256)"}});
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) return 2;
  if (g_mpi_rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  return 0;
}
