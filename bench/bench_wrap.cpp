// Wrap-policy benchmarks: what the unit of gather-and-free costs and buys. full_shard on N local
// ranks, per model preset x wrap policy (core/fsdp/wrap_policy.hpp); one iteration is one
// optimizer step of every rank in lockstep (bench/train_driver.hpp), its wall time the manual time.
// Counters:
//   tokens/s             all ranks' tokens per second of step time
//   step_ms              mean step time
//   collectives          collective calls per step per rank (all-gathers and reduce-scatters)
//   units                FSDP units the policy makes
//   largest_unit         parameters in the largest unit
//   peak_params_unsharded  the most gathered parameter bytes a rank ever held at once
//   peak                 per-rank peak bytes (largest over ranks)
//   planned_peak         the planner's peak for the same run (core/fsdp/memory_plan.hpp)
//   exposed_ms           collective time per step not hidden behind the rank's compute (mean)
//   exposed_share        exposed_ms / step time
//
//   build/bin/bench_wrap                                        (small and medium, N = 4)
//   build/bin/bench_wrap --presets=tiny --benchmark_min_time=0.01                   (quick)
//   build/bin/bench_wrap --wraps=block,layer --ranks=2 --prefetch=0
#include <benchmark/benchmark.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench/flags.hpp"
#include "bench/train_driver.hpp"
#include "core/device/device.hpp"
#include "core/fsdp/wrap_policy.hpp"

using namespace shardlab;
using namespace shardlab::bench;

namespace {

// Per-rank micro-batch of each preset: bench_train_step's.
struct PresetRun {
  const char* name;
  int batch;
  int seq_len;
};
constexpr PresetRun kPresetRuns[] = {{"tiny", 4, 64}, {"small", 2, 64}, {"medium", 1, 64}};

const PresetRun& preset_run(const std::string& name) {
  for (const PresetRun& p : kPresetRuns)
    if (name == p.name) return p;
  SL_THROW(InvalidArgument, "--presets: unknown preset '", name,
           "' (expected tiny, small or medium)");
}

void set_bytes(benchmark::State& state, const char* name, double bytes) {
  state.counters[name] =
      benchmark::Counter(bytes, benchmark::Counter::kDefaults, benchmark::Counter::OneK::kIs1024);
}

struct Options {
  std::vector<std::string> presets{"small", "medium"};
  std::vector<std::string> wraps{"block",    "whole",       "layer",
                                 "blocks:2", "size:300000", "size:1000000"};
  int ranks = 4;
  int prefetch = 1;
};

void bm_wrap(benchmark::State& state, const PresetRun* preset, std::string wrap, Options o) {
  TrainRun run;
  run.model = GPTConfig::preset(preset->name);
  run.batch = preset->batch;
  run.seq_len = preset->seq_len;
  run.engine.strategy = Strategy::full_shard;
  run.engine.prefetch = o.prefetch;
  run.engine.wrap = wrap;
  run.ranks = o.ranks;
  const WrapPlan w = make_wrap_plan(run.model, parse_wrap_policy(wrap));
  TrainReport rep;
  double seconds = 0;
  try {
    LockstepTrainer trainer(run);
    for (auto _ : state) {
      const double s = trainer.step();
      state.SetIterationTime(s);
      seconds += s;
    }
    rep = trainer.finish();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const double steps = static_cast<double>(state.iterations());
  const double tokens_per_step = static_cast<double>(o.ranks) * run.batch * run.seq_len;
  state.counters["tokens/s"] = seconds > 0 ? tokens_per_step * steps / seconds : 0.0;
  state.counters["step_ms"] = steps > 0 ? 1e3 * seconds / steps : 0.0;
  state.counters["collectives"] = rep.collectives_per_step;
  state.counters["units"] = static_cast<double>(w.units.size());
  int64_t largest = 0;
  for (const WrapUnit& u : w.units) largest = std::max(largest, u.numel);
  state.counters["largest_unit"] = static_cast<double>(largest);
  set_bytes(state, "peak_params_unsharded",
            static_cast<double>(rep.peak_of[static_cast<int>(MemCategory::params_unsharded)]));
  set_bytes(state, "peak", static_cast<double>(rep.peak));
  PlanInput in = plan_input(run.engine, o.ranks, run.model, run.batch, run.seq_len);
  set_bytes(state, "planned_peak", static_cast<double>(plan_memory(in).peak_total()));
  state.counters["exposed_ms"] = rep.exposed_ms_per_step;
  state.counters["exposed_share"] = rep.exposed_share;
  state.counters["params"] = static_cast<double>(rep.params);
}

// Takes this program's own flags out of argv (Google Benchmark rejects unknown ones).
Options parse_own_flags(int* argc, char** argv) {
  Options o;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--presets=", 0) == 0) {
      o.presets = split_list(a.substr(10));
    } else if (a.rfind("--wraps=", 0) == 0) {
      o.wraps = split_list(a.substr(8));
    } else if (a.rfind("--ranks=", 0) == 0) {
      o.ranks = int_flag("--ranks", a.substr(8), 1);
    } else if (a.rfind("--prefetch=", 0) == 0) {
      o.prefetch = int_flag("--prefetch", a.substr(11), 0);
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  SL_CHECK(o.ranks >= 1, "--ranks ", o.ranks, " must be >= 1");
  SL_CHECK(o.prefetch >= 0, "--prefetch ", o.prefetch, " must be >= 0");
  for (const std::string& w : o.wraps) parse_wrap_policy(w);  // "--wrap X: ..." on a bad one
  return o;
}

void register_all(const Options& o) {
  for (const std::string& name : o.presets) {
    const PresetRun& p = preset_run(name);
    for (const std::string& wrap : o.wraps) {
      const std::string bm = "wrap/local/full_shard/" + std::string(p.name) + "/" + wrap;
      auto* b = benchmark::RegisterBenchmark(bm.c_str(), bm_wrap, &p, wrap, o);
      b->ArgNames({"ranks"})->Arg(o.ranks);
      b->UseManualTime()->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  set_blas_threads(1);  // one BLAS thread per rank, as bench_train_step
  Options o;
  try {
    o = parse_own_flags(&argc, argv);
    register_all(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_wrap: %s\n", e.what());
    return 2;
  }
  initialize(&argc, argv, "bench_wrap",
             "one full_shard optimizer step of every rank in lockstep, per preset x wrap policy "
             "(docs/fsdp.md, Wrap policy)",
             {{"--presets=small,medium", "model presets to run: tiny, small, medium"},
              {"--wraps=block,whole,layer,blocks:2,size:300000,size:1000000",
               "wrap policies (--wrap of shardlab train)"},
              {"--ranks=4", "local ranks"},
              {"--prefetch=1", "units whose all-gather is issued ahead"}});
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
