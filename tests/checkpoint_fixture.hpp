// Shared by tests/checkpoint_*_test.cpp: ranks as threads with an abortable barrier, a tiny GPT
// (the model's unit_layout and init_unit), and per-rank shards cut from a reference "full" state
// (what an engine would hold).
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/checkpoint/ckpt_shard.hpp"
#include "core/checkpoint/gpt_checkpoint.hpp"
#include "core/checkpoint/load.hpp"
#include "core/checkpoint/save.hpp"
#include "core/fsdp/flat_param.hpp"  // round_up
#include "core/model/config.hpp"
#include "core/model/params.hpp"

namespace shardlab::ckpt_test {

// A barrier whose waiters throw CommError once any rank failed (as the launcher's collectives do).
class ThreadBarrier {
 public:
  explicit ThreadBarrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lk(mu_);
    if (aborted_) throw CommError("barrier aborted");
    int gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lk, [&] { return gen_ != gen || aborted_; });
    if (gen_ == gen) throw CommError("barrier aborted");
  }
  void abort() {
    std::lock_guard<std::mutex> lk(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, count_ = 0, gen_ = 0;
  bool aborted_ = false;
};

// Runs fn(sync) on n threads; rethrows the first failure that was not a barrier abort.
inline void run_ranks(int n, const std::function<void(const CkptSync&)>& fn) {
  ThreadBarrier barrier(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      set_thread_rank(r);
      CkptSync sync{r, n, [&] { barrier.wait(); }};
      try {
        fn(sync);
      } catch (const CommError&) {
        errors[r] = std::current_exception();
        barrier.abort();
      } catch (...) {
        errors[r] = std::current_exception();
        barrier.abort();
      }
      set_thread_rank(-1);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const CommError& e) {
      if (std::string(e.what()) != "barrier aborted") throw;
    }
  }
  for (int r = 0; r < n; ++r)
    if (errors[r]) std::rethrow_exception(errors[r]);
}

// The tiny preset, shrunk further so every test stays fast.
inline GPTConfig tiny_config() {
  GPTConfig c;
  c.vocab_size = 32;
  c.max_seq_len = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 12;
  return c;
}

inline const std::vector<std::string>& all_states() {
  static const std::vector<std::string> s = {kStateParams, kStateExpAvg, kStateExpAvgSq};
  return s;
}

// Every unit's unpadded flat buffer for every state: params from the model's own initialisation
// (init_unit), Adam's m and v arbitrary finite bit patterns, so a misplaced or rounded element
// cannot go unnoticed.
struct FullState {
  GPTConfig cfg;
  std::vector<UnitLayout> layouts;
  std::map<std::string, std::vector<std::vector<float>>> data;  // state -> unit -> values
};

inline FullState make_full_state(const GPTConfig& cfg, uint64_t seed) {
  FullState s;
  s.cfg = cfg;
  for (int u = 0; u < num_units(cfg); ++u) s.layouts.push_back(unit_layout(cfg, u));
  std::mt19937_64 rng(seed);
  for (const auto& st : all_states())
    for (int u = 0; u < num_units(cfg); ++u) {
      std::vector<float> v(static_cast<size_t>(s.layouts[u].numel));
      if (st == kStateParams) {
        init_unit(cfg, u, seed, v.data());
        s.data[st].push_back(std::move(v));
        continue;
      }
      for (auto& x : v) {
        uint32_t bits = static_cast<uint32_t>(rng());
        bits = (bits & 0x807fffffu) | ((0x70u + (bits >> 23) % 16u) << 23);  // finite, varied
        std::memcpy(&x, &bits, 4);
      }
      s.data[st].push_back(std::move(v));
    }
  return s;
}

// What one rank holds: per unit and state, its range of the padded buffer.
struct RankHolding {
  std::vector<std::map<std::string, std::vector<float>>> buffers;  // unit -> state -> values
  std::vector<CkptShard> shards;
};

// Shard r of `group` over a padded buffer: [r * S, (r + 1) * S) with S = padded / group (the
// engine's FlatLayout::shard_range).
inline std::pair<int64_t, int64_t> shard_bounds(int64_t padded, int r, int group) {
  const int64_t s = padded / group;
  return {r * s, (r + 1) * s};
}

// Rank r's holding under `group` ranks sharing each unit (padding to a multiple of group);
// full_range gives every rank the whole buffer (no_shard). `fill` cuts the values from `full`,
// else the buffers hold a 0xFF pattern a load must overwrite.
inline RankHolding make_holding(const FullState& full, int r, int group, bool full_range, bool fill,
                                bool write = true) {
  RankHolding h;
  int n = static_cast<int>(full.layouts.size());
  h.buffers.resize(n);
  for (int u = 0; u < n; ++u) {
    CkptShard s;
    s.unit = u;
    s.tensors = unit_tensors(full.layouts[u]);
    s.padded_numel = round_up(full.layouts[u].numel, group);
    auto range = full_range ? std::make_pair<int64_t, int64_t>(0, int64_t(s.padded_numel))
                            : shard_bounds(s.padded_numel, r, group);
    s.begin = range.first;
    s.end = range.second;
    s.write = write;
    for (const auto& st : all_states()) {
      std::vector<float>& buf = h.buffers[u][st];
      buf.assign(static_cast<size_t>(s.end - s.begin), 0.0f);
      if (fill) {
        const auto& src = full.data.at(st)[u];
        for (int64_t i = s.begin; i < s.end; ++i)
          buf[i - s.begin] = i < static_cast<int64_t>(src.size()) ? src[i] : 0.0f;
      } else {
        std::memset(buf.data(), 0xff, buf.size() * 4);
      }
    }
    h.shards.push_back(std::move(s));
  }
  for (int u = 0; u < n; ++u)
    for (auto& [st, buf] : h.buffers[u]) h.shards[u].states[st] = buf.data();
  return h;
}

// Bit-exact comparison of a holding against the full state (padding must be 0).
inline void expect_holding_matches(const FullState& full, const RankHolding& h,
                                   const std::string& what) {
  for (size_t u = 0; u < h.shards.size(); ++u) {
    const CkptShard& s = h.shards[u];
    for (const auto& [st, ptr] : s.states) {
      const auto& src = full.data.at(st)[u];
      int64_t bad = 0;
      for (int64_t i = s.begin; i < s.end; ++i) {
        float want = i < static_cast<int64_t>(src.size()) ? src[i] : 0.0f;
        if (std::memcmp(&want, ptr + (i - s.begin), 4) != 0) ++bad;
      }
      EXPECT_EQ(bad, 0) << what << ": unit " << u << " state " << st << " range [" << s.begin
                        << ", " << s.end << ")";
    }
  }
}

inline CheckpointMeta make_meta(const GPTConfig& cfg, int64_t step, const std::string& strategy) {
  CheckpointMeta m;
  m.step = step;
  m.optimizer_step = step;
  m.strategy = strategy;
  m.model_config = gpt_config_json(cfg);
  m.loader = {{"epoch", 0}, {"position", 1000 + step}};
  m.rng = {{"seed", 1234}, {"calls", step * 7}};
  return m;
}

// Saves `full` as `world` ranks with the given sharding; returns the checkpoint directory.
inline std::string save_as(const FullState& full, const std::string& root, int64_t step, int world,
                           bool full_range = false, const SaveOptions& opt = {}) {
  std::string out;
  std::mutex mu;
  run_ranks(world, [&](const CkptSync& sync) {
    // no_shard: every rank holds everything and offers it; the save writes it once.
    RankHolding h = make_holding(full, sync.rank, world, full_range, true);
    std::string dir = save_checkpoint(
        root, h.shards, make_meta(full.cfg, step, full_range ? "no_shard" : "full_shard"), sync,
        {{"rank", sync.rank}}, opt);
    std::lock_guard<std::mutex> lk(mu);
    out = dir;
  });
  return out;
}

// A fresh empty directory under the build tree for one test.
inline std::string scratch_dir(const std::string& name) {
  std::string d = std::string(SHARDLAB_BINARY_DIR) + "/test_scratch/checkpoint/" + name;
  remove_all(d);
  make_dirs(d);
  return d;
}

}  // namespace shardlab::ckpt_test
