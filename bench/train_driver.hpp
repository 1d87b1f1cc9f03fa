// Drives FSDP training steps for the benchmarks: the ranks are started once, build their engine,
// take one warm-up step, then wait; each call of step() releases every rank of this process for
// exactly one training step and returns when all of them have finished it, so a benchmark
// iteration is one step of the whole world, in lockstep. finish() stops the ranks and collects,
// over every rank (all-gathered, so MPI processes see the same numbers), peak memory by category,
// persistent bytes, bytes communicated per step and the exposed-communication share.
//
// Exposed communication comes from the engine's own spans: each rank records its compute and comm
// spans (no memory events) into an in-memory Recorder, and the comm time not covered by the rank's
// compute spans is "exposed" (the definition of core/trace/summary.hpp). Only the timed steps
// count.
//
// Peak RSS: the constructor resets the process's high-water mark (/proc/self/clear_refs), and each
// rank reads VmHWM from /proc/self/status after its last step: the resident peak of this process
// during the run. Ranks that are threads share one process and read the same value; MPI
// processes each read their own, and finish() reports the largest.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/launcher.hpp"
#include "core/fsdp/engine.hpp"
#include "core/fsdp/memory_plan.hpp"
#include "core/trace/recorder.hpp"
#include "core/trace/summary.hpp"

namespace shardlab::bench {

// One benchmark's run: what to train, on what, with which engine settings.
struct TrainRun {
  GPTConfig model;
  EngineConfig engine;
  std::string backend = "local";  // local | mpi
  int ranks = 1;                  // local; under mpi the world size comes from mpirun
  int batch = 1;                  // B sequences per rank per step
  int seq_len = 64;               // T
  int warmup = 1;                 // untimed steps before the first step() (first touch, pools)
  int64_t mem_limit = 0;          // per-rank tracker capacity, 0 = unlimited
  bool trace = true;              // record spans for the exposed-communication share
};

// What finish() reports, over all ranks.
struct TrainReport {
  int world = 0;
  int timed_steps = 0;
  int64_t params = 0;                // Psi
  int64_t peak = 0;                  // max over ranks of the tracker's peak total
  MemArray at_peak{};                // categories at the peak of the rank with the largest peak
  int64_t persistent = 0;            // max over ranks of Engine::persistent_bytes() (sum)
  int64_t comm_bytes_per_step = 0;   // sent per rank: max over ranks of StepStats::comm_total()
                                     // of the last step
  int64_t comm_buffer_per_step = 0;  // buffer: max over ranks of StepStats::comm_buffer, same step
  double comm_share = 0;             // comm time (union of comm spans) / step time, mean over ranks
  double exposed_share = 0;          // exposed comm time / step time, mean over ranks
  double exposed_of_comm = 0;        // exposed comm / comm time (summary.json's fraction), mean
  double exposed_ms_per_step = 0;    // exposed comm time per timed step, mean over ranks
  double collectives_per_step = 0;   // comm spans (collective calls) per timed step, max over ranks
  MemArray peak_of{};    // each category's own peak, max over ranks (peak_of[params_unsharded]: the
                         // most gathered parameters ever held at once)
  int64_t rss_peak = 0;  // max over processes of VmHWM during the run (0: unknown)
};

// The process's resident-set high-water mark in bytes (VmHWM of /proc/self/status), 0 where the
// file or the line is missing (not Linux).
inline int64_t process_rss_peak_bytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::istringstream in(line.substr(6));
    int64_t kib = 0;
    in >> kib;
    return kib * 1024;
  }
  return 0;
}

// Sets the high-water mark back to the current resident size ("5" to /proc/self/clear_refs,
// Linux 4.0+), so VmHWM afterwards is the peak of what follows. Returns false where that fails.
inline bool reset_process_rss_peak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5" << std::flush;
  return static_cast<bool>(f);
}

// Fixed tokens for one rank (the same every step: the benchmark measures speed, not learning).
inline std::vector<int> bench_tokens(const GPTConfig& m, int rank, int64_t n, uint32_t salt) {
  std::mt19937 gen(1234u + 7919u * static_cast<uint32_t>(rank) + salt);
  std::vector<int> v(static_cast<size_t>(n));
  for (int& x : v) x = static_cast<int>(gen() % static_cast<uint32_t>(m.vocab_size));
  return v;
}

class LockstepTrainer {
 public:
  explicit LockstepTrainer(const TrainRun& run) : run_(run) {
    opts_.backend = run.backend;
    opts_.ranks = run.backend == "local" ? run.ranks : 1;
    opts_.mem_limit = run.mem_limit;
    local_ranks_ = run.backend == "local" ? run.ranks : 1;
    rss_reset_ = reset_process_rss_peak();
    thread_ = std::thread([this] {
      try {
        launch(opts_, [this](RankContext& ctx) { rank_main(ctx); });
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      exited_ = true;
      cv_.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return ready_ == local_ranks_ || exited_; });
    if (exited_) {
      lock.unlock();
      thread_.join();  // no destructor runs after a throwing constructor
      lock.lock();
      rethrow_locked(lock);
    }
  }

  ~LockstepTrainer() {
    try {
      finish();
    } catch (...) {
      // A failure was already reported by step() or finish(); a destructor must not throw.
    }
  }

  LockstepTrainer(const LockstepTrainer&) = delete;
  LockstepTrainer& operator=(const LockstepTrainer&) = delete;

  // One training step on every rank; returns its wall time in seconds as seen by this thread.
  double step() {
    std::unique_lock<std::mutex> lock(mu_);
    if (exited_) rethrow_locked(lock);
    const auto t0 = std::chrono::steady_clock::now();
    done_ = 0;
    ++generation_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return done_ == local_ranks_ || exited_; });
    const auto t1 = std::chrono::steady_clock::now();
    if (done_ != local_ranks_) rethrow_locked(lock);
    return std::chrono::duration<double>(t1 - t0).count();
  }

  // Stops the ranks and returns what they measured. Rethrows a rank's failure. Idempotent.
  TrainReport finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
    std::unique_lock<std::mutex> lock(mu_);
    if (error_) rethrow_locked(lock);
    return report_;
  }

 private:
  // Per-rank numbers packed as floats for one all_gather over the world (KiB for bytes: exact in
  // f32 below 16 GiB; the trackers count multiples of 4 bytes, so KiB keeps two decimals).
  enum Field {
    kPeak,
    kAtPeak0,
    kPersistent = kAtPeak0 + kNumMemCategories,
    kComm,
    kCommBuffer,
    kStepNs,
    kCommNs,
    kExposedNs,
    kCollectives,
    kRss,
    kPeakOf0,
    kNumFields = kPeakOf0 + kNumMemCategories
  };

  [[noreturn]] void rethrow_locked(std::unique_lock<std::mutex>& lock) {
    std::exception_ptr e = error_;
    lock.unlock();
    if (e) std::rethrow_exception(e);
    throw Error("bench: the ranks stopped without reporting an error");
  }

  void rank_main(RankContext& ctx) {
    try {
      run_rank(ctx);
    } catch (...) {
      // Release the ranks of this process that wait for a command; the launcher aborts the world.
      std::lock_guard<std::mutex> lock(mu_);
      failed_ = true;
      cv_.notify_all();
      throw;
    }
  }

  void run_rank(RankContext& ctx) {
    const TrainRun& r = run_;
    std::unique_ptr<Recorder> rec =
        r.trace ? std::make_unique<Recorder>(ctx.rank, "") : Recorder::disabled(ctx.rank);
    Recorder* launcher_rec = ctx.comm->recorder();
    ctx.comm->set_recorder(rec.get());
    struct RestoreRecorder {  // the communicator outlives this function's recorder
      Communicator* c;
      Recorder* r;
      ~RestoreRecorder() { c->set_recorder(r); }
    } restore{ctx.comm, launcher_rec};

    const int64_t n = static_cast<int64_t>(r.batch) * r.seq_len;
    const std::vector<int> tokens = bench_tokens(r.model, ctx.rank, n, 0);
    const std::vector<int> targets = bench_tokens(r.model, ctx.rank, n, 1);
    const std::vector<const int*> tok{tokens.data()}, tgt{targets.data()};

    Engine eng(*ctx.device, *ctx.comm, rec.get(), r.model, r.engine);
    StepStats last;
    for (int w = 0; w < r.warmup; ++w) last = eng.step(tok, tgt, r.batch, r.seq_len);
    const int64_t t_timed = trace_now_ns();
    int64_t step_ns = 0;
    int steps = 0;
    uint64_t seen = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++ready_;
      cv_.notify_all();
      seen = generation_;
    }
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return generation_ != seen || stop_ || failed_; });
        if (failed_) throw CommError("bench: another rank of this process failed");
        if (generation_ == seen) break;  // stop_ with no step pending
        seen = generation_;
      }
      const int64_t s0 = trace_now_ns();
      last = eng.step(tok, tgt, r.batch, r.seq_len);
      step_ns += trace_now_ns() - s0;
      ++steps;
      std::lock_guard<std::mutex> lock(mu_);
      ++done_;
      cv_.notify_all();
    }

    // Exposed communication over the timed steps, from this rank's spans.
    std::vector<Interval> compute, comm;
    int64_t collectives = 0;
    std::istringstream lines(rec->buffered_text());
    for (std::string line; std::getline(lines, line);) {
      if (line.find("\"kind\":\"span\"") == std::string::npos) continue;
      const nlohmann::json j = nlohmann::json::parse(line);
      const int64_t a = j.at("t_start").get<int64_t>(), b = j.at("t_end").get<int64_t>();
      if (a < t_timed) continue;
      const bool is_comm = j.at("lane") == "comm";
      collectives += is_comm ? 1 : 0;
      (is_comm ? comm : compute).emplace_back(a, b);
    }
    const std::vector<Interval> comm_u = interval_union(std::move(comm));
    const int64_t comm_ns = total_length(comm_u);
    const int64_t exposed_ns = length_not_covered(comm_u, interval_union(std::move(compute)));

    std::vector<float> mine(kNumFields, 0.0f);
    mine[kPeak] = kib(ctx.tracker->peak_total());
    const MemArray at = ctx.tracker->at_peak();
    for (int c = 0; c < kNumMemCategories; ++c) mine[kAtPeak0 + c] = kib(at[c]);
    int64_t persistent = 0;
    for (int64_t b : eng.persistent_bytes()) persistent += b;
    mine[kPersistent] = kib(persistent);
    mine[kComm] = kib(last.comm_total());
    mine[kCommBuffer] = kib(last.comm_buffer);
    mine[kStepNs] = static_cast<float>(step_ns);
    mine[kCommNs] = static_cast<float>(comm_ns);
    mine[kExposedNs] = static_cast<float>(exposed_ns);
    mine[kCollectives] =
        steps > 0 ? static_cast<float>(collectives) / static_cast<float>(steps) : 0;
    mine[kRss] = rss_reset_ ? kib(process_rss_peak_bytes()) : 0.0f;
    const MemArray peaks = ctx.tracker->peak_all();
    for (int c = 0; c < kNumMemCategories; ++c) mine[kPeakOf0 + c] = kib(peaks[c]);

    const int N = ctx.world;
    std::vector<float> all(static_cast<size_t>(N) * kNumFields);
    ctx.comm->all_gather(mine.data(), all.data(), kNumFields, DType::f32);
    if (ctx.rank != 0 && r.backend == "local") return;  // local: rank 0 writes for everyone

    TrainReport rep;
    rep.world = N;
    rep.timed_steps = steps;
    rep.params = r.model.num_params();
    int top = 0;
    for (int q = 0; q < N; ++q) {
      const float* f = &all[static_cast<size_t>(q) * kNumFields];
      if (f[kPeak] > all[static_cast<size_t>(top) * kNumFields + kPeak]) top = q;
      rep.persistent = std::max(rep.persistent, bytes(f[kPersistent]));
      rep.comm_bytes_per_step = std::max(rep.comm_bytes_per_step, bytes(f[kComm]));
      rep.comm_buffer_per_step = std::max(rep.comm_buffer_per_step, bytes(f[kCommBuffer]));
      rep.rss_peak = std::max(rep.rss_peak, bytes(f[kRss]));
      if (f[kStepNs] > 0) {
        rep.comm_share += f[kCommNs] / f[kStepNs] / N;
        rep.exposed_share += f[kExposedNs] / f[kStepNs] / N;
      }
      if (f[kCommNs] > 0) rep.exposed_of_comm += f[kExposedNs] / f[kCommNs] / N;
      if (steps > 0) rep.exposed_ms_per_step += 1e-6 * f[kExposedNs] / steps / N;
      rep.collectives_per_step =
          std::max(rep.collectives_per_step, static_cast<double>(f[kCollectives]));
      for (int c = 0; c < kNumMemCategories; ++c)
        rep.peak_of[c] = std::max(rep.peak_of[c], bytes(f[kPeakOf0 + c]));
    }
    const float* t = &all[static_cast<size_t>(top) * kNumFields];
    rep.peak = bytes(t[kPeak]);
    for (int c = 0; c < kNumMemCategories; ++c) rep.at_peak[c] = bytes(t[kAtPeak0 + c]);
    std::lock_guard<std::mutex> lock(mu_);
    report_ = rep;
  }

  static float kib(int64_t b) { return static_cast<float>(static_cast<double>(b) / 1024.0); }
  static int64_t bytes(float k) {
    return static_cast<int64_t>(static_cast<double>(k) * 1024.0 + 0.5);
  }

  TrainRun run_;
  LaunchOptions opts_;
  int local_ranks_ = 1;
  bool rss_reset_ = false;  // VmHWM was reset at the start: rss_peak is this run's
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  int ready_ = 0;
  int done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  bool failed_ = false;
  bool exited_ = false;
  std::exception_ptr error_;
  TrainReport report_;
};

}  // namespace shardlab::bench
