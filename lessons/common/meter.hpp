// Measuring one rank's training steps: the bytes each communicator sent during the step (by
// collective; "sent per rank") and the collectives' full sizes ("buffer"; both as
// core/comm/traffic.hpp defines them), the step's time, the mean loss over all ranks, the step
// event for the run directory and the printed line. What a rank measured ends up in its RankResult.
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/comm/launcher.hpp"
#include "core/trace/recorder.hpp"

namespace shardlab::lessons {

// Bytes sent in one step, by key: "all_reduce", or "all_gather in group" when a label is given.
using StepBytes = std::map<std::string, int64_t>;

struct RankResult {
  std::vector<float> losses;     // mean over all ranks, per step
  std::vector<StepBytes> bytes;  // per step: sent per rank, by collective
  std::vector<int64_t> buffer;   // per step: the collectives' buffers, all together
  MemArray now{};                // tracker after the last step: what a rank keeps
  MemArray peak{};               // each category's own peak
  int64_t peak_total = 0;
  double seconds = 0;                            // training loop wall time
  uint64_t fingerprint = 0xcbf29ce484222325ull;  // hash of the rank's weights (see fingerprint)
};

// FNV-1a over a buffer's bytes (copied to the host), chained through `h`: equal weights, equal
// hash.
inline uint64_t fingerprint(Device& dev, const Buffer& buf, uint64_t h = 0xcbf29ce484222325ull) {
  std::vector<unsigned char> host(static_cast<size_t>(buf.bytes()));
  dev.copy_to_host(host.data(), buf.data(), buf.bytes());
  for (unsigned char c : host) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Starts measuring at construction; stop() returns what the watched communicators sent since, and
// buffer() then gives their collectives' full sizes over the same span.
class StepMeter {
 public:
  // `comms`: the communicators whose traffic a step counts, each with a label ("" for none).
  explicit StepMeter(std::vector<std::pair<Communicator*, std::string>> comms)
      : comms_(std::move(comms)), t0_(std::chrono::steady_clock::now()) {
    for (auto& [c, label] : comms_) start_.push_back(c->traffic());
  }

  StepBytes stop() {
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    StepBytes out;
    buffer_ = 0;
    for (size_t i = 0; i < comms_.size(); ++i) {
      const Communicator::Traffic a = start_[i], b = comms_[i].first->traffic();
      buffer_ += b.buffer - a.buffer;
      const std::string sfx = comms_[i].second.empty() ? "" : " " + comms_[i].second;
      const std::pair<const char*, int64_t> ops[] = {
          {"all_gather", b.all_gather - a.all_gather},
          {"reduce_scatter", b.reduce_scatter - a.reduce_scatter},
          {"all_reduce", b.all_reduce - a.all_reduce},
          {"broadcast", b.broadcast - a.broadcast}};
      for (const auto& [op, n] : ops)
        if (n != 0) out[op + sfx] += n;
    }
    return out;
  }
  double seconds() const { return seconds_; }
  int64_t buffer() const { return buffer_; }

 private:
  std::vector<std::pair<Communicator*, std::string>> comms_;
  std::vector<Communicator::Traffic> start_;
  std::chrono::steady_clock::time_point t0_;
  double seconds_ = 0;
  int64_t buffer_ = 0;
};

inline void print_step_header() {
  std::printf("  step |     loss | ms/step |  tokens/s | peak MiB/rank\n");
}

// Ends a step: stops the meter, averages the loss over all ranks (outside the measured bytes),
// records the step event, and prints the line on rank 0 (steps 1 to 5, then every 5th).
inline void end_step(RankContext& ctx, StepMeter& meter, int step, float loss, int64_t tokens,
                     RankResult& res) {
  res.bytes.push_back(meter.stop());
  res.buffer.push_back(meter.buffer());
  ctx.comm->all_reduce(&loss, &loss, 1, DType::f32, ReduceOp::avg, false, {-1, "loss"});
  res.losses.push_back(loss);
  ctx.recorder->step(step + 1, loss, tokens, meter.seconds());  // 1-based, as the trainer
  res.seconds += meter.seconds();
  // Between steps a rank holds only what it keeps; peaks cover every step so far.
  res.now = ctx.tracker->current_all();
  res.peak = ctx.tracker->peak_all();
  res.peak_total = ctx.tracker->peak_total();
  const int n = step + 1;
  if (ctx.rank == 0 && (n <= 5 || n % 5 == 0))
    std::printf("%6d | %8.4f | %7.1f | %9.0f | %13.3f\n", n, loss, meter.seconds() * 1e3,
                static_cast<double>(tokens) * ctx.world / meter.seconds(),
                static_cast<double>(ctx.tracker->peak_total()) / (1 << 20));
}

}  // namespace shardlab::lessons
