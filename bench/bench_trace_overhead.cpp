// Tracing overhead of a training step: the small preset (3.3M parameters) on N local ranks with
// full_shard, once with tracing on (each rank's Recorder appending to a run directory, as
// `shardlab train` runs by default) and once off (a disabled recorder, `--trace off`).
//
// The machine is shared and noisy, so the two are measured paired and interleaved: every rank
// holds two engines with the same weights, one built on a disabled recorder and one on a run
// directory recorder, and each benchmark iteration runs one step of each, in alternating order.
// Load changes then hit both alike, and the medians over all pairs give the overhead. A traced step
// does what the trainer does: events into the recorder (allocations, collectives, compute spans,
// unit states), then the step event and a flush to rank<R>.jsonl.
// Counters: step_ms_off and step_ms_on (medians), overhead_pct (median of the paired ratios),
// events_per_step and trace_bytes_per_step (all ranks).
//   bench_trace_overhead --benchmark_min_time=20 --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/flags.hpp"
#include "core/base/file_io.hpp"
#include "core/comm/launcher.hpp"
#include "core/fsdp/engine.hpp"
#include "core/model/config.hpp"
#include "core/trace/recorder.hpp"
#include "core/trace/run_dir.hpp"

using namespace shardlab;

namespace {

constexpr int kGlobalBatch = 16;  // the trainer's default: 16 sequences of 64 tokens
constexpr int kSeq = 64;

// Ranks that stay up between benchmark iterations: run(mode) releases one step of `mode` on every
// rank and returns when all are done.
class RankPool {
 public:
  using RankFn = std::function<void(RankContext&, const std::function<int()>& next_mode)>;

  RankPool(int ranks, const RankFn& fn) : ranks_(ranks) {
    runner_ = std::thread([this, fn] {
      try {
        LaunchOptions lo;
        lo.ranks = ranks_;
        launch(lo, [&](RankContext& ctx) {
          int64_t seen = 0;
          fn(ctx, [&] { return wait_for_work(seen); });
        });
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lk(mu_);
        error_ = e.what();
        cv_.notify_all();
      }
      std::lock_guard<std::mutex> lk(mu_);
      finished_ = true;
      cv_.notify_all();
    });
  }
  ~RankPool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    runner_.join();
  }

  // Each rank calls it when ready for the next step: the mode to run, or -1 to stop.
  int wait_for_work(int64_t& seen) {
    std::unique_lock<std::mutex> lk(mu_);
    if (seen == 0 ? ++ready_ == ranks_ : ++done_ == ranks_) cv_.notify_all();
    cv_.wait(lk, [&] { return stop_ || go_ > seen; });
    if (go_ == seen) return -1;
    seen = go_;
    return mode_;
  }

  // One step of `mode` on every rank; false when a rank failed (error()).
  bool run(int mode) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return ready_ == ranks_ || !error_.empty() || finished_; });
    if (!error_.empty() || finished_) return false;
    done_ = 0;
    mode_ = mode;
    ++go_;
    cv_.notify_all();
    cv_.wait(lk, [&] { return done_ == ranks_ || !error_.empty() || finished_; });
    return error_.empty() && !finished_;
  }
  std::string error() {
    std::lock_guard<std::mutex> lk(mu_);
    return error_.empty() ? "the ranks stopped early" : error_;
  }

 private:
  int ranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t go_ = 0;
  int ready_ = 0, done_ = 0, mode_ = 0;
  bool stop_ = false, finished_ = false;
  std::string error_;
  std::thread runner_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void BM_TraceOverhead(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const int B = kGlobalBatch / ranks;
  const GPTConfig model = GPTConfig::preset("small");
  EngineConfig ec;
  ec.strategy = Strategy::full_shard;

  const std::string dir =
      (std::filesystem::temp_directory_path() /
       ("shardlab_bench_trace_" + std::to_string(::getpid()) + "_n" + std::to_string(ranks)))
          .string();
  remove_all(dir);
  RunDirOptions ro;
  ro.dir = dir;
  const RunDir run = RunDir::create({{"strategy", "full_shard"}, {"world_size", ranks}}, ro);

  auto pool = std::make_unique<RankPool>(ranks, [&](RankContext& ctx,
                                                    const std::function<int()>& next_mode) {
    // Off: the launcher's disabled recorder everywhere, as with --trace off.
    Recorder* off_rec = ctx.recorder;
    Engine off(*ctx.device, *ctx.comm, off_rec, model, ec);
    // On: the run directory's recorder sees the engine's allocations, collectives and spans.
    std::unique_ptr<Recorder> rec = run.make_recorder(ctx.rank);
    ctx.comm->set_recorder(rec.get());  // the engine's shard groups keep it (split copies it)
    Engine on(*ctx.device, *ctx.comm, rec.get(), model, ec);
    ctx.comm->set_recorder(off_rec);

    std::mt19937 gen(static_cast<unsigned>(ctx.rank));
    std::vector<int> tok(static_cast<size_t>(B) * kSeq), tgt(tok.size());
    for (size_t i = 0; i < tok.size(); ++i) {
      tok[i] = static_cast<int>(gen() % static_cast<unsigned>(model.vocab_size));
      tgt[i] = static_cast<int>(gen() % static_cast<unsigned>(model.vocab_size));
    }
    off.step({tok.data()}, {tgt.data()}, B, kSeq);  // warm-up: first-touch of every buffer
    on.step({tok.data()}, {tgt.data()}, B, kSeq);
    int step = 1;
    for (int mode; (mode = next_mode()) >= 0;) {
      if (mode == 0) {  // what EngineStepper::step does with tracing off
        off.world_mean(off.step({tok.data()}, {tgt.data()}, B, kSeq).loss);
        continue;
      }
      rec->attach(*ctx.tracker);
      ctx.comm->set_recorder(rec.get());
      const auto t0 = std::chrono::steady_clock::now();
      const StepStats st = on.step({tok.data()}, {tgt.data()}, B, kSeq);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rec->step(++step, on.world_mean(st.loss), st.tokens, s);
      rec->flush();
      ctx.comm->set_recorder(off_rec);
      rec->detach();
    }
  });

  using Clock = std::chrono::steady_clock;
  std::vector<double> t_off, t_on, ratio;
  int64_t pairs = 0;
  for (auto _ : state) {
    double t[2] = {0, 0};
    const int first = static_cast<int>(pairs % 2);  // alternate the order: off-on, on-off, ...
    for (int k = 0; k < 2; ++k) {
      const int mode = k == 0 ? first : 1 - first;
      const auto t0 = Clock::now();
      if (!pool->run(mode)) {
        state.SkipWithError(pool->error().c_str());
        break;
      }
      t[mode] = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    t_off.push_back(t[0]);
    t_on.push_back(t[1]);
    ratio.push_back(t[1] / t[0]);
    ++pairs;
  }
  pool.reset();                        // stops the ranks: their recorders flush and close
  const int64_t steps_on = pairs + 1;  // the warm-up step was traced too
  int64_t bytes = 0, n_events = 0;
  for (int r = 0; r < ranks; ++r) {
    const std::string text = read_text_file(run.rank_path(r));  // one event a line
    bytes += static_cast<int64_t>(text.size());
    n_events += std::count(text.begin(), text.end(), '\n');
  }
  state.counters["step_ms_off"] = 1e3 * median(t_off);
  state.counters["step_ms_on"] = 1e3 * median(t_on);
  state.counters["overhead_pct"] = 100.0 * (median(ratio) - 1.0);
  state.counters["pairs"] = static_cast<double>(pairs);
  state.counters["trace_bytes_per_step"] = static_cast<double>(bytes) / steps_on;
  state.counters["events_per_step"] = static_cast<double>(n_events) / steps_on;
  state.SetLabel("full_shard, small, batch " + std::to_string(kGlobalBatch) + "x" +
                 std::to_string(kSeq));
  remove_all(dir);
}

}  // namespace

BENCHMARK(BM_TraceOverhead)
    ->Name("TraceOverhead")
    ->ArgNames({"ranks"})
    ->Arg(2)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// BENCHMARK_MAIN(), with bench/flags.hpp's --help and library notice.
int main(int argc, char** argv) {
  shardlab::bench::initialize(&argc, argv, "bench_trace_overhead",
                              "a full_shard step of the small model with tracing on "
                              "against off, paired (docs/observability.md)");
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
