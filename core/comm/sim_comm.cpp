// SimCommunicator: collectives as virtual time on a per-communicator stream, bytes and spans as the
// real backends count them.
#include "core/comm/sim_comm.hpp"

#include <algorithm>
#include <deque>
#include <memory>
#include <numeric>
#include <vector>

#include "core/base/error.hpp"
#include "core/base/virtual_clock.hpp"
#include "core/comm/comm_common.hpp"
#include "core/comm/flight_recorder.hpp"
#include "core/comm/topology.hpp"

namespace shardlab {

namespace {

struct SimOp;

// A communicator's stream of collectives. With the spec's async_progress (the default) each one
// is timed when issued: it starts then, or when the previous one ends. Without it (MPI with no
// progress thread: a nonblocking collective moves only while the rank is inside the library) an
// async one stays pending until the rank waits on it or makes a blocking call on the stream;
// then the pending ones run in issue order from that moment.
struct SimStream {
  int64_t free_ns = 0;
  struct Pending {
    std::weak_ptr<SimOp> op;
    int64_t duration = 0;
  };
  std::deque<Pending> pending;
  // Runs the pending collectives from `now`, in order, up to and including `until` (all of them
  // when null).
  void progress(int64_t now, const SimOp* until);
};

// One simulated collective; also its completion handle. Its span is recorded when it is waited
// on (t_wait known) or, if nobody waits, when the handle goes away.
struct SimOp final : Work::State {
  VirtualClock* clock = nullptr;
  Recorder* rec = nullptr;
  CollectiveCall call;
  CommTimes times;
  bool reported = false;
  bool pending = false;  // not timed yet: waits for the rank to enter the library (SimStream)
  std::shared_ptr<SimStream> stream;

  void wait() override {
    if (reported) return;
    if (call.async) times.t_wait = clock->now_ns;
    if (pending) stream->progress(clock->now_ns, this);
    clock->join(times.t_end);
    report();
  }
  bool done() const override { return !pending && clock->now_ns >= times.t_end; }
  ~SimOp() override {
    if (pending) stream->progress(clock->now_ns, this);
    if (!reported) report();
  }
  void report() {
    reported = true;
    record_comm_span(rec, call, times);
  }
};

void SimStream::progress(int64_t now, const SimOp* until) {
  int64_t t = std::max(now, free_ns);
  while (!pending.empty()) {
    const Pending p = pending.front();
    pending.pop_front();
    const std::shared_ptr<SimOp> op = p.op.lock();
    if (op) {
      op->times.t_start = t;
      op->times.t_end = virtual_add_saturated(t, p.duration);  // may run in ~SimOp: no throw
      op->pending = false;
    }
    t = virtual_add_saturated(t, p.duration);
    free_ns = t;
    if (until != nullptr && op.get() == until) break;
  }
}

class SimComm final : public Communicator {
 public:
  SimComm(std::shared_ptr<const ClusterSpec> spec, std::vector<int> members, int rank,
          VirtualClock& clock, std::shared_ptr<FlightRecorder> flight)
      : Communicator(rank, static_cast<int>(members.size())),
        spec_(std::move(spec)),
        members_(std::move(members)),
        placement_(place_group(*spec_, members_)),
        clock_(clock) {
    flight_ = std::move(flight);
  }

  const char* backend() const override { return "sim"; }

 private:
  Work start(const CollectiveCall& c) override {
    auto w = std::make_shared<SimOp>();
    w->clock = &clock_;
    w->rec = recorder_;
    w->call = c;
    const int64_t duration = collective_ns(*spec_, placement_, c.op, c.bytes);
    w->times.t_issue = clock_.now_ns;
    w->stream = stream_;
    if (c.async && !spec_->async_progress) {
      w->pending = true;  // timed when the rank next waits or calls in blocking (SimStream)
      stream_->pending.push_back({w, duration});
    } else {
      stream_->progress(clock_.now_ns, nullptr);  // a blocking call progresses the pending ones
      w->times.t_start = std::max(clock_.now_ns, stream_->free_ns);
      w->times.t_end = virtual_add(w->times.t_start, duration, comm_op_name(c.op));
      stream_->free_ns = w->times.t_end;
    }
    flight_->ended(c.seq, true, -1);
    return Work(w);
  }

  // Only split_group: a simulated rank cannot hear the other ranks' colours.
  std::unique_ptr<Communicator> start_split(const CollectiveCall& c, int color, int,
                                            const std::vector<int>* members) override {
    if (members == nullptr)
      SL_THROW(InvalidArgument, "sim split (colour ", color,
               "): a simulated rank cannot hear the other ranks' colours; use split_group with "
               "the members");
    const auto me = std::find(members->begin(), members->end(), rank_);
    if (me == members->end() || !std::is_sorted(members->begin(), members->end()) ||
        std::adjacent_find(members->begin(), members->end()) != members->end() ||
        members->front() < 0 || members->back() >= size_)
      SL_THROW(InvalidArgument, "sim split: members must be distinct ranks of [0, ", size_,
               "), ascending, and include this rank ", rank_);
    // The same cost as the real split's rendezvous, then the members as world ranks.
    start(c).wait();
    std::vector<int> world;
    world.reserve(members->size());
    for (int m : *members) world.push_back(members_[static_cast<size_t>(m)]);
    return std::make_unique<SimComm>(spec_, std::move(world),
                                     static_cast<int>(me - members->begin()), clock_, flight_);
  }

  std::shared_ptr<const ClusterSpec> spec_;
  std::vector<int> members_;  // world ranks, by rank in this communicator
  GroupPlacement placement_;
  VirtualClock& clock_;
  std::shared_ptr<SimStream> stream_ = std::make_shared<SimStream>();
};

}  // namespace

std::unique_ptr<Communicator> make_sim_communicator(std::shared_ptr<const ClusterSpec> spec,
                                                    int world, int rank, VirtualClock& clock) {
  SL_CHECK(spec != nullptr, "sim communicator: no cluster spec");
  spec->check_ranks(world);
  if (rank < 0 || rank >= world)
    SL_THROW(InvalidArgument, "sim: rank ", rank, " outside a world of ", world);
  std::vector<int> members(static_cast<size_t>(world));
  std::iota(members.begin(), members.end(), 0);
  return std::make_unique<SimComm>(std::move(spec), std::move(members), rank, clock,
                                   std::make_shared<FlightRecorder>(rank));
}

}  // namespace shardlab
