// Helpers for the FSDP engine tests: a tiny model, a deterministic global batch, and running the
// engine on N local ranks (threads) or the single-rank GPT reference for a number of steps.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/comm/launcher.hpp"
#include "core/fsdp/engine.hpp"
#include "core/kernels/optim.hpp"
#include "core/model/gpt.hpp"
#include "core/model/params.hpp"

namespace shardlab::fsdp_test {

// A model small enough that 20 steps on 4 ranks take well under a second: 2 blocks, C = 32.
inline GPTConfig tiny_model() {
  GPTConfig c;
  c.vocab_size = 64;
  c.max_seq_len = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  return c;
}

// Engine settings the tests share: lr high enough that 20 steps visibly learn the pattern.
inline EngineConfig test_config(Strategy s) {
  EngineConfig ec;
  ec.strategy = s;
  ec.optim.lr = 1e-2f;
  ec.optim.weight_decay = 0.1f;
  return ec;
}

// Tokens of step s: `rows` sequences of length T + 1 (inputs and next-token targets), the same on
// every rank; each rank takes its rows. Values follow a simple pattern plus noise so the loss
// falls.
struct GlobalBatch {
  std::vector<int> tokens, targets;  // (rows, T)
};
inline GlobalBatch make_batch(int vocab, int rows, int T, int step) {
  GlobalBatch b;
  std::mt19937 gen(1000 + step);
  std::uniform_int_distribution<int> d(0, vocab - 1), coin(0, 3);
  for (int r = 0; r < rows; ++r) {
    int x = d(gen);
    std::vector<int> seq;
    for (int t = 0; t <= T; ++t) {
      seq.push_back(x);
      x = coin(gen) == 0 ? d(gen) : (x * 7 + 3) % vocab;
    }
    for (int t = 0; t < T; ++t) {
      b.tokens.push_back(seq[t]);
      b.targets.push_back(seq[t + 1]);
    }
  }
  return b;
}

inline GlobalBatch make_batch(const GPTConfig& cfg, int rows, int T, int step) {
  return make_batch(cfg.vocab_size, rows, T, step);
}

struct RunResult {
  std::vector<std::vector<float>> params;           // per unit, unpadded, from rank 0
  std::map<std::string, std::vector<float>> named;  // the same, by parameter name (any wrap)
  std::vector<StepStats> stats;                     // rank 0's, per step
  std::vector<float> losses;                        // world-mean loss per step
  std::vector<MemArray> persistent;                 // per rank
  std::vector<MemArray> peak;                       // per rank, tracker peaks by category
  std::vector<int64_t> peak_total;                  // per rank
};

// Runs `steps` steps of the engine on `ranks` local ranks. Each step's global batch has
// ranks * K * B rows; rank r's micro-batch k takes rows (k * ranks + r) * B .. + B. Any model
// (a GPTConfig converts to GPT-2's).
inline RunResult run_engine(const Model& model, EngineConfig ec, int ranks, int steps, int B, int T,
                            int K = 1, int64_t mem_limit = 0,
                            std::function<void(Engine&, int step)> after_step = nullptr) {
  RunResult out;
  out.persistent.resize(ranks);
  out.peak.resize(ranks);
  out.peak_total.resize(ranks);
  LaunchOptions lo;
  lo.ranks = ranks;
  lo.mem_limit = mem_limit;
  launch(lo, [&](RankContext& ctx) {
    Engine eng(*ctx.device, *ctx.comm, ctx.recorder, model, ec);
    for (int s = 0; s < steps; ++s) {
      GlobalBatch gb = make_batch(model.vocab_size(), ranks * K * B, T, s);
      std::vector<const int*> tok, tgt;
      for (int k = 0; k < K; ++k) {
        const int64_t row = (static_cast<int64_t>(k) * ranks + ctx.rank) * B;
        tok.push_back(gb.tokens.data() + row * T);
        tgt.push_back(gb.targets.data() + row * T);
      }
      StepStats st = eng.step(tok, tgt, B, T);
      float mean = eng.world_mean(st.loss);
      if (ctx.rank == 0) {
        out.stats.push_back(st);
        out.losses.push_back(mean);
      }
      if (after_step) after_step(eng, s);
    }
    out.persistent[ctx.rank] = eng.persistent_bytes();
    out.peak[ctx.rank] = ctx.tracker->peak_all();
    out.peak_total[ctx.rank] = ctx.tracker->peak_total();
    std::vector<std::vector<float>> params;
    for (int u = 0; u < eng.num_units(); ++u) params.push_back(eng.gather_unit_params(u));
    if (ctx.rank == 0) {
      for (int u = 0; u < eng.num_units(); ++u)
        for (const FlatEntry& e : eng.layout(u).entries())
          out.named[e.name].assign(params[u].begin() + e.offset,
                                   params[u].begin() + e.offset + e.numel);
      out.params = std::move(params);
    }
  });
  return out;
}

// The single-rank reference: GPT on the whole global batch (ranks * K * B rows as one batch),
// AdamW with the same settings on every unit.
inline RunResult run_reference(const GPTConfig& model, const EngineConfig& ec, int rows, int steps,
                               int T) {
  RunResult out;
  MemoryTracker tracker;
  auto dev = make_cpu_device(tracker);
  GPT gpt(*dev, model, ec.seed);
  std::vector<Buffer> m, v;
  for (int u = 0; u < gpt.num_units(); ++u) {
    m.push_back(dev->alloc_zeros(gpt.layout(u).numel * 4, MemCategory::optimizer_state));
    v.push_back(dev->alloc_zeros(gpt.layout(u).numel * 4, MemCategory::optimizer_state));
  }
  const OptimizerConfig& a = ec.optim;
  for (int s = 0; s < steps; ++s) {
    GlobalBatch gb = make_batch(model, rows, T, s);
    gpt.zero_grad();
    out.losses.push_back(gpt.forward(gb.tokens.data(), gb.targets.data(), rows, T));
    gpt.backward();
    for (int u = 0; u < gpt.num_units(); ++u)
      adamw_update(*dev, gpt.unit_params(u), gpt.unit_grads(u), m[u].f32(), v[u].f32(),
                   gpt.layout(u).numel, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, s + 1);
  }
  for (int u = 0; u < gpt.num_units(); ++u) {
    std::vector<float> p(gpt.layout(u).numel);
    dev->copy_to_host(p.data(), gpt.unit_params(u), p.size() * 4);
    out.params.push_back(std::move(p));
  }
  return out;
}

// Largest |a - b| over all units.
inline double max_abs_diff(const std::vector<std::vector<float>>& a,
                           const std::vector<std::vector<float>>& b) {
  double m = 0;
  for (size_t u = 0; u < a.size(); ++u)
    for (size_t i = 0; i < a[u].size(); ++i)
      m = std::max(m, static_cast<double>(std::abs(a[u][i] - b[u][i])));
  return m;
}

inline bool bit_identical(const std::vector<std::vector<float>>& a,
                          const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t u = 0; u < a.size(); ++u)
    if (a[u].size() != b[u].size() ||
        std::memcmp(a[u].data(), b[u].data(), a[u].size() * sizeof(float)) != 0)
      return false;
  return true;
}

}  // namespace shardlab::fsdp_test
