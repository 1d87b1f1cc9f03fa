// Recorder: one per rank; every allocation, free, collective, compute span, unit state change and
// step is reported here as one event. Events are buffered in memory and written to the run
// directory's rank<R>.jsonl by flush() (called at step boundaries) so the hot path does no I/O.
//
// Event schema (one JSON object per line; "t" is ns since run start on the shared clock):
//   {"t":..,"rank":R,"kind":"mem","category":"params","bytes":+/-n,"cat_total":n,"total":n
//    [,"tier":"host"]}  (a host-memory tracker's change, --offload; absent: device memory)
//   {"t":..,"rank":R,"kind":"span","lane":"compute"|"comm"|"copy","op":"forward","unit":u,"bytes":n,
//    "dtype":"f32","t_issue":..,"t_start":..,"t_end":..,"t_wait":..[,"wait":ns,"last":R]}
//    (comm spans of the local backend add "wait": ns this rank waited for the last rank to
//    arrive, and "last": the world rank that arrived last; copy spans are copies between host
//    and device memory, op "h2d" or "d2h", with --offload)
//   {"t":..,"rank":R,"kind":"unit","unit":u,"state":"sharded"|"gathering"|"unsharded"|"resharded"}
//   {"t":..,"rank":R,"kind":"step","step":s,"loss":x,"tokens":n,"step_time":seconds}
//   {"t":..,"rank":R,"kind":"mark","text":"..."}
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/base/dtype.hpp"
#include "core/memory/tracker.hpp"
#include "core/trace/nvtx.hpp"

namespace shardlab {

enum class Lane : uint8_t { compute, comm, copy };
enum class UnitState : uint8_t { sharded, gathering, unsharded, resharded };
const char* lane_name(Lane l);
const char* unit_state_name(UnitState s);

// The run's clock: ns since the run started, shared by every rank of the process. For MPI, each
// process sets its start right after a barrier so ranks line up.
int64_t trace_now_ns();
void trace_reset_clock();

class Recorder {
 public:
  // A recorder appending to `jsonl_path`; an empty path keeps events in memory only (tests).
  Recorder(int rank, const std::string& jsonl_path);
  // A recorder that drops everything (tracing off): every call is a cheap early return.
  static std::unique_ptr<Recorder> disabled(int rank);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  bool enabled() const { return enabled_; }
  int rank() const { return rank_; }

  // Connects a tracker: every change it makes becomes a mem event. The recorder detaches itself
  // in its destructor, so the tracker must outlive it (or call detach() first).
  void attach(MemoryTracker& tracker);
  void detach();

  // host: the change is in the rank's host-memory tier (written with "tier":"host").
  void mem(const MemoryTracker::Change& c, bool host = false);
  // t_wait: when the caller waited on an async collective (-1 for blocking or compute spans).
  // wait_ns, last_rank: see "wait" and "last" above; -1 leaves them out.
  void span(Lane lane, const char* op, int unit, int64_t bytes, DType dtype, int64_t t_issue,
            int64_t t_start, int64_t t_end, int64_t t_wait = -1, int64_t wait_ns = -1,
            int last_rank = -1, int64_t sent = -1);
  void unit(int unit, UnitState s);
  void step(int step, double loss, int64_t tokens, double step_time_s);
  void mark(const std::string& text);

  // Writes buffered events to the file and flushes it. Called at step boundaries and at the end.
  void flush();

  // Events recorded so far (all of them when the path is empty; the unflushed tail otherwise).
  // Tests use it to compare with what was written.
  int64_t event_count() const;
  // The buffered, not yet written lines (all of them when the path is empty), for tests.
  std::string buffered_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  MemoryTracker* tracker_ = nullptr;
  int rank_;
  bool enabled_;
};

// A compute span from construction to destruction: ScopedSpan s(rec, "forward", unit);
// With tracing on in a CUDA build it is also an NVTX range of the same name (for Nsight Systems).
class ScopedSpan {
 public:
  ScopedSpan(Recorder* rec, const char* op, int unit = -1, int64_t bytes = 0)
      : rec_(rec && rec->enabled() ? rec : nullptr),
        op_(op),
        unit_(unit),
        bytes_(bytes),
        t0_(rec_ ? trace_now_ns() : 0) {
    if (kNvtxEnabled && rec_) nvtx_push(op_);
  }
  ~ScopedSpan() {
    if (!rec_) return;
    if (kNvtxEnabled) nvtx_pop();
    rec_->span(Lane::compute, op_, unit_, bytes_, DType::f32, t0_, t0_, trace_now_ns());
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  Recorder* rec_;
  const char* op_;
  int unit_;
  int64_t bytes_;
  int64_t t0_;
};

}  // namespace shardlab
