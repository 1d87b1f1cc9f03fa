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

struct CollectiveCall;

// The interface every backend shares. The public calls are not virtual: they check the arguments,
// count the traffic and enter the call in the flight recorder the same way for every backend
// (communicator.cpp), then hand the checked call to the backend's private `start`.
class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual const char* backend() const = 0;

  Work all_gather(const void* send, void* recv, int64_t count, DType t, bool async = false,
                  CallInfo info = {});
  Work reduce_scatter(const void* send, void* recv, int64_t count, DType t,
                      ReduceOp op = ReduceOp::sum, bool async = false, CallInfo info = {});
  Work all_reduce(const void* send, void* recv, int64_t count, DType t, ReduceOp op = ReduceOp::sum,
                  bool async = false, CallInfo info = {});
  Work broadcast(void* buf, int64_t count, DType t, int root, bool async = false,
                 CallInfo info = {});
  void barrier();

  // A new communicator over the ranks that pass the same color (>= 0), ordered by (key, old
  // rank). Collective: every rank of this communicator must call it.
  std::unique_ptr<Communicator> split(int color, int key);
  // split() for a caller that can name the group it asks for: `members` are the ranks of this
  // communicator that pass `color`, ascending (the mesh knows them). The real backends learn the
  // members by exchanging colours and ignore the list; the simulator, which runs one rank of N and
  // so cannot hear the others' colours, takes the group from it (and refuses split()).
  std::unique_ptr<Communicator> split_group(int color, int key, const std::vector<int>& members);

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

 private:
  // What a backend implements (comm_common.hpp describes the call it receives).
  // Checks of its own, after the shared ones and before anything is counted (MPI's int counts,
  // NCCL's device pointers). The default has none.
  virtual void check_call(const CollectiveCall& call) const;
  // Runs one collective or barrier, already checked, counted and in the flight recorder as
  // call.seq: marks the flight record ended when it completes and records the span. Returns at
  // once with the call's Work; for a blocking call the caller (collective) waits on it.
  virtual Work start(const CollectiveCall& call) = 0;
  // The sub-communicator of a split (call.op == CommOp::split, color already checked); `members`
  // is null for split(). Marks the flight record ended.
  virtual std::unique_ptr<Communicator> start_split(const CollectiveCall& call, int color, int key,
                                                    const std::vector<int>* members) = 0;

  Work collective(CollectiveCall call);
  std::unique_ptr<Communicator> split_call(int color, int key, const std::vector<int>* members);

  Traffic traffic_;
};

}  // namespace shardlab
