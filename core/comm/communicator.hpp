// Communicator: NCCL-like collectives over the ranks of a group, behind one interface with three
// backends (local threads, MPI processes, NCCL GPUs).
//
// Semantics (the same for every backend):
// - all_gather:     send has `count` elements; recv has size()*count; rank r's data lands at
//                   recv[r*count, (r+1)*count). In place when send == recv + rank()*count.
// - reduce_scatter: send has size()*count elements; recv gets `count` = the reduction of block
//                   rank() over all ranks. In place when recv == send + rank()*count.
// - all_reduce:     send and recv have `count` elements (send == recv is in place).
// - broadcast:      buf has `count` elements; root's data reaches every rank.
// The local backend reduces each element in rank order 0..N-1, in all_reduce and reduce_scatter
// alike, so results are bit-identical between the two.
//
// Async: every collective takes `async`. A blocking call returns a completed Work. An async call
// returns at once; its buffers must stay alive and untouched until Work::wait() returns.
// Collectives on one communicator run in issue order, like a stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/base/dtype.hpp"

namespace shardlab {

class Recorder;
class MemoryTracker;
class FlightRecorder;

enum class ReduceOp : uint8_t { sum, avg };
const char* reduce_op_name(ReduceOp op);

// What the caller wants recorded with a collective's trace span.
struct CallInfo {
  int unit = -1;              // the FSDP unit this collective serves, -1 if none
  const char* tag = nullptr;  // optional label, e.g. "grads"
};

// Completion handle of a collective. Copyable (shared state); wait() may be called more than once.
class Work {
 public:
  struct State {
    virtual ~State() = default;
    virtual void wait() = 0;
    virtual bool done() const = 0;
  };
  Work() = default;
  explicit Work(std::shared_ptr<State> s) : state_(std::move(s)) {}
  // Blocks until the collective finished; rethrows its error (a CommError naming the ranks).
  void wait() {
    if (state_) state_->wait();
  }
  bool done() const { return !state_ || state_->done(); }

 private:
  std::shared_ptr<State> state_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual const char* backend() const = 0;

  virtual Work all_gather(const void* send, void* recv, int64_t count, DType t, bool async = false,
                          CallInfo info = {}) = 0;
  virtual Work reduce_scatter(const void* send, void* recv, int64_t count, DType t,
                              ReduceOp op = ReduceOp::sum, bool async = false,
                              CallInfo info = {}) = 0;
  virtual Work all_reduce(const void* send, void* recv, int64_t count, DType t,
                          ReduceOp op = ReduceOp::sum, bool async = false, CallInfo info = {}) = 0;
  virtual Work broadcast(void* buf, int64_t count, DType t, int root, bool async = false,
                         CallInfo info = {}) = 0;
  virtual void barrier() = 0;

  // A new communicator over the ranks that pass the same color, ordered by (key, old rank).
  // Collective: every rank of this communicator must call it.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // split() for a caller that can name the group it asks for: `members` are the ranks of this
  // communicator that pass `color`, ascending (the mesh knows them). The real backends learn the
  // members by exchanging colours and ignore the list; the simulator, which runs one rank of N and
  // so cannot hear the others' colours, takes the group from it.
  virtual std::unique_ptr<Communicator> split_group(int color, int key,
                                                    const std::vector<int>& members) {
    (void)members;
    return split(color, key);
  }

  // Where spans go (may be null: nothing recorded). Set by the launcher.
  void set_recorder(Recorder* r) { recorder_ = r; }
  Recorder* recorder() const { return recorder_; }

  // The rank's flight recorder (its last collectives, for the watchdog), shared with the
  // communicators split from this one. Every backend sets it.
  FlightRecorder& flight() const { return *flight_; }

  // What this rank's collectives moved since construction, in the two measures of
  // core/comm/traffic.hpp (for reports and tests). "Sent per rank", by op: all_gather counts
  // count*dtype*(N-1), reduce_scatter count*dtype*(N-1), all_reduce 2*count*dtype*(N-1)/N,
  // broadcast count*dtype (ring-algorithm traffic per rank); total() sums them. `buffer`: the
  // collectives' full sizes (collective_bytes, nccl-tests' convention), summed over the calls.
  struct Traffic {
    int64_t all_gather = 0, reduce_scatter = 0, all_reduce = 0, broadcast = 0;
    int64_t buffer = 0;
    int64_t total() const { return all_gather + reduce_scatter + all_reduce + broadcast; }
  };
  Traffic traffic() const { return traffic_; }

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank_;
  int size_;
  Recorder* recorder_ = nullptr;
  std::shared_ptr<FlightRecorder> flight_;
  Traffic traffic_;
};

}  // namespace shardlab
