// Training-step benchmark: one engine step on N local ranks (threads), over strategy x ranks x
// prefetch depth. The ranks stay up between iterations (each iteration releases them for one step
// and waits until all are done), so an iteration is one step as the trainer runs it.
// Counters: tokens/s (rate, all ranks), peak MiB per rank (total and by category, rank 0), bytes
// communicated per rank per step.
//   bench_train_step --benchmark_filter='TrainStep/.*' --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "core/comm/launcher.hpp"
#include "core/fsdp/engine.hpp"
#include "core/model/config.hpp"

using namespace shardlab;

namespace {

// Large enough that a step is mostly GEMMs, small enough for a 2-core machine: ~0.8M params.
GPTConfig bench_model() {
  GPTConfig c;
  c.vocab_size = 256;
  c.max_seq_len = 64;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 128;
  return c;
}

void BM_TrainStep(benchmark::State& state) {
  const auto strategy = static_cast<Strategy>(state.range(0));
  const int ranks = static_cast<int>(state.range(1));
  const int prefetch = static_cast<int>(state.range(2));
  const int B = 4, T = 64;
  const GPTConfig model = bench_model();
  EngineConfig ec;
  ec.strategy = strategy;
  ec.prefetch = prefetch;
  ec.hybrid_group = 2;

  std::mutex mu;
  std::condition_variable cv;
  int64_t go = 0;      // steps released by the benchmark thread
  int ready = 0, done = 0;
  bool stop = false;
  MemArray peak{};
  int64_t peak_total = 0, comm = 0;
  std::string error;

  std::thread runner([&] {
    try {
      LaunchOptions lo;
      lo.ranks = ranks;
      launch(lo, [&](RankContext& ctx) {
        Engine eng(*ctx.device, *ctx.comm, ctx.recorder, model, ec);
        std::mt19937 gen(ctx.rank);
        std::vector<int> tok(B * T), tgt(B * T);
        for (int i = 0; i < B * T; ++i) {
          tok[i] = static_cast<int>(gen() % model.vocab_size);
          tgt[i] = static_cast<int>(gen() % model.vocab_size);
        }
        StepStats st = eng.step({tok.data()}, {tgt.data()}, B, T);  // warm-up
        {
          std::lock_guard<std::mutex> lk(mu);
          if (++ready == ranks) cv.notify_all();
        }
        for (int64_t seen = 0;;) {
          {
            std::unique_lock<std::mutex> lk(mu);
            cv.wait(lk, [&] { return stop || go > seen; });
            if (go == seen) break;  // stopped
            seen = go;
          }
          st = eng.step({tok.data()}, {tgt.data()}, B, T);
          std::lock_guard<std::mutex> lk(mu);
          if (++done == ranks) cv.notify_all();
        }
        if (ctx.rank == 0) {
          peak = ctx.tracker->peak_all();
          peak_total = ctx.tracker->peak_total();
          comm = st.comm_total();
        }
      });
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu);
      error = e.what();
      stop = true;
      ready = ranks;
      cv.notify_all();
    }
  });

  {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return ready == ranks; });
  }
  for (auto _ : state) {
    std::unique_lock<std::mutex> lk(mu);
    if (!error.empty()) break;
    done = 0;
    ++go;
    cv.notify_all();
    cv.wait(lk, [&] { return done == ranks || !error.empty(); });
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    stop = true;
  }
  cv.notify_all();
  runner.join();
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  const double mib = 1024.0 * 1024.0;
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * ranks * B * T,
                         benchmark::Counter::kIsRate);
  state.counters["peak_MiB"] = static_cast<double>(peak_total) / mib;
  state.counters["params_MiB"] = static_cast<double>(peak[0]) / mib;
  state.counters["params_unsharded_MiB"] = static_cast<double>(peak[1]) / mib;
  state.counters["optim_MiB"] = static_cast<double>(peak[4]) / mib;
  state.counters["activations_MiB"] = static_cast<double>(peak[5]) / mib;
  state.counters["comm_bytes_per_step"] = static_cast<double>(comm);
  state.SetLabel(strategy_name(strategy));
}

void train_step_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"strategy", "ranks", "prefetch"});
  for (int ranks : {2, 4})
    for (Strategy s : {Strategy::no_shard, Strategy::full_shard})
      for (int prefetch : {0, 1}) {
        if (s == Strategy::no_shard && prefetch == 1) continue;  // nothing to prefetch
        b->Args({static_cast<int>(s), ranks, prefetch});
      }
  for (Strategy s : {Strategy::shard_optim, Strategy::shard_grad_op, Strategy::hybrid_shard})
    b->Args({static_cast<int>(s), 4, 1});
}

}  // namespace

BENCHMARK(BM_TrainStep)->Name("TrainStep")->Apply(train_step_args)->Unit(benchmark::kMillisecond)
    ->UseRealTime()->MeasureProcessCPUTime();

BENCHMARK_MAIN();
