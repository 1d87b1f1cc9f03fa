// The local backend: one worker thread per rank per communicator, a two-phase rendezvous per
// collective (meet: post and check the call; finish: nobody leaves while others still read its
// buffers), and the data movement cut into pieces that the ranks claim from a shared counter, so
// whichever rank threads are running do the work and none waits for a descheduled one: an
// all_gather piece is one source block's piece copied into every rank's output, an all_reduce
// piece is one element range reduced in rank order and written to every rank, a reduce_scatter
// piece one range of one rank's output block. Who does a piece never changes its bits.
// A blocking call that runs on the calling thread spins for up to 20 us at either meeting before
// it sleeps on the condition variable, where the group has no more ranks than the machine has
// cores: most waits are shorter than a futex wake-up. Async calls on the worker never spin: the
// rank's compute needs that core.
// The rendezvous also times the ranks (how long each waited for the last one: straggler
// monitoring) and is the collective watchdog: a rank that waits longer than the world's timeout
// names the ranks that did not arrive, dumps every rank's flight recorder and aborts the world.
#include "core/comm/local_comm.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/base/cpu_affinity.hpp"
#include "core/base/error.hpp"
#include "core/comm/comm_common.hpp"
#include "core/comm/flight_recorder.hpp"
#include "core/comm/reduce.hpp"
#include "core/trace/recorder.hpp"

namespace shardlab {

namespace {

// One rank's view of a call, posted at the rendezvous.
struct Desc {
  CommOp op = CommOp::barrier;
  int64_t count = 0;
  DType dtype = DType::f32;
  ReduceOp reduce = ReduceOp::sum;
  int root = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  int color = 0;  // split only
  int key = 0;
  int64_t seq = 0;  // this rank's flight-recorder number for the call
  int unit = -1;    // CallInfo::unit: ranks that pair one unit's collective with another's desync
};

struct Group;

struct SplitResult {
  std::shared_ptr<Group> group;
  int rank = -1;
};

// What the rendezvous tells each rank besides a split's result.
struct MeetResult {
  SplitResult split;
  int64_t wait_ns = 0;  // from this rank's arrival to the last rank's
  int last_rank = -1;   // world rank of the last to arrive
};

}  // namespace

// ---- the world: failure state and the groups to wake when it aborts ---------------------------

struct LocalWorld::Impl {
  int size = 0;
  std::atomic<bool> aborted{false};
  mutable std::mutex mu;
  int failed_rank = -1;
  bool failure_secondary = false;
  std::string failure;
  std::vector<std::weak_ptr<Group>> groups;
  std::shared_ptr<Group> world_group;
  std::vector<std::shared_ptr<FlightRecorder>> flights;  // by world rank
  std::atomic<double> timeout_s{kDefaultCollectiveTimeoutS};
  std::atomic<bool> watchdog_fired{false};
  std::vector<int> worker_cpus;  // set before the ranks start; read-only after

  std::string failure_text() const {
    std::lock_guard<std::mutex> lk(mu);
    return "aborted: rank " + std::to_string(failed_rank) + " failed: " + failure;
  }
};

namespace {

// The ranks of one communicator and their rendezvous state. All fields are guarded by `mu`.
struct Group {
  LocalWorld::Impl* world = nullptr;
  int size = 0;
  std::vector<int> world_ranks;  // group rank -> world rank, for messages and split

  std::mutex mu;
  std::condition_variable cv;
  // meet: a generation completes when every rank has posted its Desc.
  // (gen and end_gen change under mu; they are atomic so that a waiter may first watch them
  // without the lock: spin_until_changed.)
  std::atomic<uint64_t> gen{0};
  int arrived = 0;
  std::vector<char> here;
  std::vector<char> left;  // the rank's communicator was destroyed: it will never arrive again
  std::vector<char> left_unwinding;  // ... while an exception was in flight on that rank
  std::vector<Desc> desc;
  // The watchdog's report, written by the first rank of the group to time out: the others that
  // time out with it repeat it rather than see that rank's withdrawal as a missing arrival.
  std::string watchdog_report;
  std::vector<int64_t> arrive_ns;  // when each rank posted in the current generation
  int64_t complete_ns = 0;         // when the last rank of the completed generation arrived
  int last_arrived = 0;            // ... and which group rank that was
  std::string error;  // the completed generation's disagreement, empty when the ranks agree
  std::vector<SplitResult> split;
  // finish: a plain barrier that cannot be aborted (everyone in it has passed meet and is only
  // copying memory, which always ends).
  std::atomic<uint64_t> end_gen{0};
  int end_arrived = 0;
  // The next piece of the current collective's data movement to claim; reset when a meet
  // completes (every rank has then left the previous collective's finish).
  std::atomic<int64_t> next_piece{0};
  // Whether the group's ranks can each have a core of its own (then a blocking call may spin while
  // it waits: LocalComm::execute).
  bool spin = false;

  std::string who(int r) const {
    std::string s = "rank " + std::to_string(world_ranks[r]);
    if (size != world->size || world_ranks[r] != r)
      s += " (rank " + std::to_string(r) + " of this group)";
    return s;
  }
};

// The CPUs this process may use (its affinity mask, as taskset sets it), or the machine's count.
int usable_cpus() {
  static const int n = [] {
    const size_t allowed = allowed_cpus().size();
    return allowed > 0 ? static_cast<int>(allowed)
                       : static_cast<int>(std::thread::hardware_concurrency());
  }();
  return n;
}

std::shared_ptr<Group> make_group(LocalWorld::Impl* world, std::vector<int> world_ranks) {
  auto g = std::make_shared<Group>();
  g->world = world;
  g->size = static_cast<int>(world_ranks.size());
  g->world_ranks = std::move(world_ranks);
  g->here.assign(g->size, 0);
  g->left.assign(g->size, 0);
  g->left_unwinding.assign(g->size, 0);
  g->desc.resize(g->size);
  g->arrive_ns.assign(g->size, 0);
  g->split.resize(g->size);
  g->spin = g->size <= usable_cpus();
  std::lock_guard<std::mutex> lk(world->mu);
  g->world->groups.push_back(g);
  return g;
}

// "count: rank 0 has 100, rank 1 has 120" when the ranks disagree on a field, else "".
template <typename F>
std::string disagreement(const Group& g, const char* field, F value) {
  bool same = true;
  for (int r = 1; r < g.size; ++r) same = same && value(g.desc[r]) == value(g.desc[0]);
  if (same) return "";
  std::string s = std::string("ranks disagree on ") + field + ":";
  for (int r = 0; r < g.size; ++r) s += (r ? ", " : " ") + g.who(r) + " has " + value(g.desc[r]);
  return s;
}

std::string validate(const Group& g) {
  std::string e = disagreement(g, "the collective",
                               [](const Desc& d) { return std::string(comm_op_name(d.op)); });
  if (!e.empty()) return e;
  const CommOp op = g.desc[0].op;
  if (op == CommOp::barrier || op == CommOp::split) return "";
  e = disagreement(g, "count", [](const Desc& d) { return std::to_string(d.count); });
  if (e.empty())
    e = disagreement(g, "dtype", [](const Desc& d) { return std::string(dtype_name(d.dtype)); });
  if (e.empty() && (op == CommOp::all_reduce || op == CommOp::reduce_scatter))
    e = disagreement(g, "the reduce op",
                     [](const Desc& d) { return std::string(reduce_op_name(d.reduce)); });
  if (e.empty() && op == CommOp::broadcast)
    e = disagreement(g, "root", [](const Desc& d) { return std::to_string(d.root); });
  if (e.empty())  // same op and size for another unit: a rank skipped or reordered a collective
    e = disagreement(g, "the unit", [](const Desc& d) { return std::to_string(d.unit); });
  return e;
}

// Ranks with the same color form a group, ordered by (key, old rank). Runs under g.mu.
void compute_split(Group& g) {
  std::map<int, std::vector<std::pair<int, int>>> by_color;  // color -> (key, rank)
  for (int r = 0; r < g.size; ++r) by_color[g.desc[r].color].push_back({g.desc[r].key, r});
  for (auto& kv : by_color) {
    std::vector<std::pair<int, int>>& members = kv.second;
    std::sort(members.begin(), members.end());
    std::vector<int> world_ranks;
    for (const auto& m : members) world_ranks.push_back(g.world_ranks[m.second]);
    std::shared_ptr<Group> sub = make_group(g.world, std::move(world_ranks));
    for (size_t i = 0; i < members.size(); ++i)
      g.split[members[i].second] = {sub, static_cast<int>(i)};
  }
}

// Marks the world failed (first failure wins, see LocalWorld::abort) and wakes every waiter.
bool abort_world(LocalWorld::Impl& w, int rank, const std::string& message, bool secondary) {
  std::vector<std::shared_ptr<Group>> groups;
  {
    std::lock_guard<std::mutex> lk(w.mu);
    const bool first = w.failed_rank < 0;
    // A real failure replaces a CommError recorded before it: that error may be its consequence
    // (e.g. its communicator went away while the exception unwound, before the launcher saw it).
    if (first || (w.failure_secondary && !secondary)) {
      w.failed_rank = rank;
      w.failure = message;
      w.failure_secondary = secondary;
    }
    if (!first) return false;
    w.aborted = true;
    for (const auto& wg : w.groups)
      if (auto g = wg.lock()) groups.push_back(std::move(g));
  }
  // Lock each group so that no waiter can miss the flag between its check and its wait.
  for (const auto& g : groups) {
    std::lock_guard<std::mutex> lk(g->mu);
    g->cv.notify_all();
  }
  return true;
}

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

// The watchdog fired on world rank `rank`: every rank's flight recorder to flight.json (the first
// time only), then the world aborts with the report as the failure.
void fire_watchdog(LocalWorld::Impl& w, int rank, const std::string& report) {
  if (!w.watchdog_fired.exchange(true) && !w.aborted) {
    std::vector<nlohmann::json> ranks;
    for (const auto& f : w.flights) ranks.push_back(f->to_json());
    write_flight_file(w.flights[rank]->dump_path(), report, "local", w.timeout_s.load(), ranks);
  }
  abort_world(w, rank, report, /*secondary=*/false);
}

[[noreturn]] void throw_left(const Group& g, int j, const char* name) {
  SL_THROW(CommError, name, ": ", g.who(j), " left the communicator",
           g.left_unwinding[j] ? " (its rank is failing)" : "", " without calling ", name);
}

// The watchdog's report when rank r has waited `timeout_s` in `d`: which ranks did not arrive and
// where every rank of the world was. Runs under g.mu.
std::string watchdog_report(const Group& g, int r, const Desc& d, double timeout_s) {
  const LocalWorld::Impl& w = *g.world;
  const FlightRecorder& mine = *w.flights[g.world_ranks[r]];
  std::string s = "collective watchdog: " + describe(mine.find(d.seq)) + " on " + g.who(r) +
                  " did not complete within " + fmt_seconds(timeout_s) + ":";
  std::vector<int> missing;
  for (int j = 0; j < g.size; ++j)
    if (!g.here[j] && j != r) missing.push_back(j);
  for (size_t i = 0; i < missing.size(); ++i) {
    const int j = missing[i];
    const std::vector<CollectiveRecord> recs = w.flights[g.world_ranks[j]]->records();
    s += (i ? "; " : " ") + g.who(j) + " did not arrive";
    if (g.left[j])
      s += " (its communicator is gone)";
    else if (!recs.empty() && recs.back().state == CollectiveRecord::State::issued)
      s += " (it is waiting in " + describe(recs.back()) + ")";
    else
      s += " (busy outside collectives since " +
           describe(recs.empty() ? CollectiveRecord{} : recs.back()) + ")";
  }
  s += ". Last completed collective of each rank:";
  for (int wr = 0; wr < w.size; ++wr)
    s += (wr ? "; rank " : " rank ") + std::to_string(wr) + ": " +
         describe(w.flights[wr]->last_completed());
  return s;
}

// Waits up to kSpinNs for `gen` to leave `mine`, without the lock: the last rank to arrive is
// usually a few microseconds away, and waking a rank asleep on the condition variable costs a
// futex wake-up and a reschedule (tens of microseconds on a virtual machine) on every collective.
// The caller then waits on the condition variable as before, which returns at once if it changed.
constexpr int64_t kSpinNs = 20000;
void spin_until_changed(const std::atomic<uint64_t>& gen, uint64_t mine) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(kSpinNs);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (gen.load(std::memory_order_acquire) != mine) return;
#if defined(__SSE2__)
      _mm_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= until) return;
  }
}

// Posts rank r's call and waits until every rank of the group has posted one. Throws CommError
// when the world aborted, a rank left without calling, the ranks disagree, or the wait outlasts
// the world's collective timeout (the watchdog: then this rank aborts the world).
MeetResult meet(Group& g, int r, const Desc& d, bool spin) {
  std::unique_lock<std::mutex> lk(g.mu);
  const char* name = comm_op_name(d.op);
  auto missing_left = [&]() -> int {
    for (int j = 0; j < g.size; ++j)
      if (g.left[j] && !g.here[j]) return j;
    return -1;
  };
  if (g.world->aborted) SL_THROW(CommError, g.world->failure_text(), " (released from ", name, ")");
  if (int j = missing_left(); j >= 0) throw_left(g, j, name);
  g.desc[r] = d;
  g.here[r] = 1;
  g.arrive_ns[r] = trace_now_ns();
  const uint64_t my_gen = g.gen;
  if (++g.arrived == g.size) {
    g.arrived = 0;
    g.complete_ns = g.arrive_ns[r];
    g.last_arrived = r;
    std::fill(g.here.begin(), g.here.end(), 0);
    g.error = validate(g);
    if (g.error.empty() && d.op == CommOp::split) compute_split(g);
    g.next_piece.store(0, std::memory_order_relaxed);
    ++g.gen;
    g.cv.notify_all();
  } else {
    if (spin) {
      lk.unlock();
      spin_until_changed(g.gen, my_gen);
      lk.lock();
    }
    const double timeout_s = g.world->timeout_s.load();
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_s));
    const bool ended = g.cv.wait_until(
        lk, deadline, [&] { return g.gen != my_gen || g.world->aborted || missing_left() >= 0; });
    if (!ended) {
      // The watchdog: report (while every rank that arrived is still posted), withdraw, abort
      // the world (outside g.mu: abort locks every group).
      if (g.watchdog_report.empty()) g.watchdog_report = watchdog_report(g, r, d, timeout_s);
      const std::string report = g.watchdog_report;
      g.here[r] = 0;
      --g.arrived;
      LocalWorld::Impl* world = g.world;
      lk.unlock();
      fire_watchdog(*world, g.world_ranks[r], report);
      SL_THROW(CommError, report);
    }
    if (g.gen == my_gen) {
      // Nobody has seen this rank's buffers yet: withdraw the post and fail.
      g.here[r] = 0;
      --g.arrived;
      if (g.world->aborted)
        SL_THROW(CommError, g.world->failure_text(), " (released from ", name, ")");
      throw_left(g, missing_left(), name);
    }
  }
  // The generation's results stay valid until this rank posts again: no later one can complete
  // without it.
  if (!g.error.empty()) SL_THROW(CommError, name, ": ", g.error);
  MeetResult m;
  if (d.op == CommOp::split) m.split = std::move(g.split[r]);
  m.wait_ns = std::max<int64_t>(0, g.complete_ns - g.arrive_ns[r]);
  m.last_rank = g.world_ranks[g.last_arrived];
  return m;
}

void finish(Group& g, bool spin) {
  std::unique_lock<std::mutex> lk(g.mu);
  const uint64_t my_gen = g.end_gen;
  if (++g.end_arrived == g.size) {
    g.end_arrived = 0;
    ++g.end_gen;
    g.cv.notify_all();
  } else {
    if (spin) {
      lk.unlock();
      spin_until_changed(g.end_gen, my_gen);
      lk.lock();
    }
    g.cv.wait(lk, [&] { return g.end_gen != my_gen; });
  }
}

// Bytes of one piece of data movement: a source piece (256 KiB) stays in L2 while it is written to
// every destination, and a 4 MiB collective still has enough pieces to share between ranks.
constexpr int64_t kPieceBytes = 256 * 1024;
// Reductions whose output per rank reaches this write it with non-temporal stores: it would not
// stay in cache anyway, and ordinary stores read each destination line before writing it.
constexpr int64_t kStreamBytes = 8 * 1024 * 1024;

const char* at(const void* p, int64_t bytes) { return static_cast<const char*>(p) + bytes; }
char* at(void* p, int64_t bytes) { return static_cast<char*>(p) + bytes; }

// ---- one rank's communicator ------------------------------------------------------------------

class LocalComm final : public Communicator {
 public:
  LocalComm(std::shared_ptr<LocalWorld> world, std::shared_ptr<Group> group, int rank,
            int world_rank)
      : Communicator(rank, group->size),
        world_(std::move(world)),
        group_(std::move(group)),
        world_rank_(world_rank) {
    flight_ = world_->impl().flights[world_rank];
    try {
      worker_ = std::thread([this] { worker_loop(); });
    } catch (const std::system_error& e) {
      // Out of threads (or of address space for their stacks): the launcher's own message for a
      // rank it cannot start, since which of the two runs out first is a race.
      SL_THROW(Error, "could not start a thread of this rank (", e.what(), "): --ranks ",
               world_->size(),
               " is more threads than this process can start (two per rank); use fewer ranks");
    }
  }

  ~LocalComm() override {
    {
      std::lock_guard<std::mutex> lk(qmu_);
      stopping_ = true;
    }
    qcv_.notify_all();
    worker_.join();  // runs what is queued first: those calls were issued and others expect them
    std::lock_guard<std::mutex> lk(group_->mu);
    group_->left[rank_] = 1;
    group_->left_unwinding[rank_] = std::uncaught_exceptions() > 0;
    group_->cv.notify_all();
  }

  const char* backend() const override { return "local"; }

 private:
  Work start(const CollectiveCall& c) override { return Work(issue(c)); }

  std::unique_ptr<Communicator> start_split(const CollectiveCall& c, int color, int key,
                                            const std::vector<int>*) override {
    std::shared_ptr<Task> t = issue(c, color, key);
    Work(t).wait();
    return std::make_unique<LocalComm>(world_, t->split.group, t->split.rank, world_rank_);
  }

  // One queued collective; also its completion handle.
  struct Task final : Work::State {
    CollectiveCall call;
    Desc d;  // what this rank posts at the rendezvous
    Recorder* rec = nullptr;
    CommTimes times;
    SplitResult split;
    bool inline_run = false;  // runs on the calling thread, not on the worker

    mutable std::mutex mu;
    std::condition_variable cv;
    bool finished = false;
    bool reported = false;
    CarriedError error;

    void wait() override {
      const int64_t t_wait = call.async ? comm_clock(rec) : -1;
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return finished; });
      if (!reported) {
        reported = true;
        if (call.async) times.t_wait = t_wait;
        if (!error) report();
      }
      if (error) error.rethrow();
    }
    bool done() const override {
      std::lock_guard<std::mutex> lk(mu);
      return finished;
    }
    ~Task() override {
      if (finished && !reported && !error) report();
    }
    void report() const { record_comm_span(rec, call, times); }
  };

  // Runs the call: on the calling thread when it is blocking and nothing is queued or running
  // (no thread hand-off, and issue order holds since everything earlier has finished), else on
  // the worker, in issue order.
  std::shared_ptr<Task> issue(const CollectiveCall& c, int color = 0, int key = 0) {
    auto t = std::make_shared<Task>();
    t->call = c;
    t->d = {c.op,   c.count, c.dtype, c.reduce, c.root,     c.send,
            c.recv, color,   key,     c.seq,    c.info.unit};
    t->rec = recorder_;
    t->times.t_issue = comm_clock(recorder_);
    bool here = false;
    {
      std::lock_guard<std::mutex> lk(qmu_);
      if (!c.async && queue_.empty() && !busy_) {
        busy_ = true;
        here = true;
      } else {
        queue_.push_back(t);
      }
    }
    if (here) {
      t->inline_run = true;
      run(*t);
      std::lock_guard<std::mutex> lk(qmu_);
      busy_ = false;
    }
    qcv_.notify_one();
    return t;
  }

  void run(Task& t) {
    t.times.t_start = comm_clock(t.rec);
    CarriedError error;
    try {
      execute(t);
    } catch (...) {
      error.capture();
    }
    t.times.t_end = comm_clock(t.rec);
    flight_->ended(t.d.seq, !error, t.times.wait_ns);
    {
      std::lock_guard<std::mutex> lk(t.mu);
      t.error = error;
      t.finished = true;
    }
    t.cv.notify_all();
  }

  void worker_loop() {
    set_thread_rank(world_rank_);
    bind_this_thread(world_->impl().worker_cpus);  // empty: stays on its rank's CPUs
    for (;;) {
      std::shared_ptr<Task> t;
      {
        std::unique_lock<std::mutex> lk(qmu_);
        qcv_.wait(lk, [&] { return (!queue_.empty() && !busy_) || (queue_.empty() && stopping_); });
        if (queue_.empty()) return;
        t = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      run(*t);
      std::lock_guard<std::mutex> lk(qmu_);
      busy_ = false;
    }
  }

  void execute(Task& t) {
    const Desc& d = t.d;
    const int n = size_;
    const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
    // A blocking call on the calling thread spins while it waits (the rank has nothing else to
    // run); the worker, which runs async calls beside the rank's compute, sleeps at once.
    const bool spin = group_->spin && t.inline_run;
    MeetResult met = meet(*group_, rank_, d, spin);
    t.split = std::move(met.split);
    t.times.wait_ns = met.wait_ns;
    t.times.last_rank = met.last_rank;
    if (d.op == CommOp::barrier || d.op == CommOp::split) return;

    // Between meet and finish every rank's Desc is stable and its buffers are ours to read and
    // write. Each rank claims pieces until none is left, then waits in finish for the others.
    const std::vector<Desc>& all = group_->desc;
    std::atomic<int64_t>& next = group_->next_piece;
    auto claim = [&next] { return next.fetch_add(1, std::memory_order_relaxed); };
    const int64_t per_piece = std::max<int64_t>(1, kPieceBytes / es);
    const int64_t pieces = (d.count + per_piece - 1) / per_piece;  // of one block or buffer
    switch (d.op) {
      case CommOp::all_gather:
      case CommOp::broadcast: {
        // all_gather: piece p of block j, copied into every rank's output (skipping a rank whose
        // block is already there, in place); broadcast: piece p of the root's buffer into every
        // other rank's.
        const bool gather = d.op == CommOp::all_gather;
        const int64_t block_bytes = d.count * es;
        const int64_t blocks = gather ? n : 1;
        for (int64_t u = claim(); u < blocks * pieces; u = claim()) {
          const int j = gather ? static_cast<int>(u / pieces) : d.root;
          const int64_t lo = (u % pieces) * per_piece * es;
          const int64_t len = std::min(per_piece * es, block_bytes - lo);
          const char* src = at(all[j].send, lo);
          for (int k = 0; k < n; ++k) {
            char* dst = gather ? at(all[k].recv, j * block_bytes + lo) : at(all[k].recv, lo);
            if (dst != src) std::memcpy(dst, src, static_cast<size_t>(len));
          }
        }
        break;
      }
      case CommOp::reduce_scatter: {
        // Piece p of rank k's block: rank order over every rank's block k, into k's output.
        const bool stream = d.count * es >= kStreamBytes;
        std::vector<const void*> src(n);
        for (int64_t u = claim(); u < n * pieces; u = claim()) {
          const int k = static_cast<int>(u / pieces);
          const int64_t lo = (u % pieces) * per_piece;
          const int64_t len = std::min(per_piece, d.count - lo);
          for (int j = 0; j < n; ++j) src[j] = at(all[j].send, (k * d.count + lo) * es);
          void* dst = at(all[k].recv, lo * es);
          reduce_rank_order(src.data(), n, &dst, 1, len, d.dtype, d.reduce, stream);
        }
        break;
      }
      case CommOp::all_reduce: {
        // Piece p of the buffer: rank order over every rank's piece, written to every rank.
        const bool stream = d.count * es >= kStreamBytes;
        std::vector<const void*> src(n);
        std::vector<void*> dst(n);
        for (int64_t u = claim(); u < pieces; u = claim()) {
          const int64_t lo = u * per_piece;
          const int64_t len = std::min(per_piece, d.count - lo);
          for (int j = 0; j < n; ++j) {
            src[j] = at(all[j].send, lo * es);
            dst[j] = at(all[j].recv, lo * es);
          }
          reduce_rank_order(src.data(), n, dst.data(), n, len, d.dtype, d.reduce, stream);
        }
        break;
      }
      default: break;
    }
    finish(*group_, spin);
  }

  std::shared_ptr<LocalWorld> world_;
  std::shared_ptr<Group> group_;
  int world_rank_;

  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool busy_ = false;  // a call of this communicator is running (on the worker or inline)
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace

// ---- LocalWorld -------------------------------------------------------------------------------

LocalWorld::LocalWorld(int size) : impl_(std::make_unique<Impl>()) {
  if (size < 1) SL_THROW(InvalidArgument, "local backend: world size ", size, " must be >= 1");
  impl_->size = size;
  for (int r = 0; r < size; ++r) impl_->flights.push_back(std::make_shared<FlightRecorder>(r));
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  impl_->world_group = make_group(impl_.get(), std::move(ranks));
}

LocalWorld::~LocalWorld() = default;

int LocalWorld::size() const { return impl_->size; }

bool LocalWorld::abort(int rank, const std::string& message, bool secondary) {
  return abort_world(*impl_, rank, message, secondary);
}

void LocalWorld::set_worker_cpus(std::vector<int> cpus) { impl_->worker_cpus = std::move(cpus); }

void LocalWorld::set_collective_timeout(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds))
    SL_THROW(InvalidArgument, "collective timeout ", seconds, " s must be a positive number");
  impl_->timeout_s = seconds;
}

double LocalWorld::collective_timeout() const { return impl_->timeout_s.load(); }

bool LocalWorld::watchdog_fired() const { return impl_->watchdog_fired; }

FlightRecorder& LocalWorld::flight(int rank) {
  SL_CHECK(rank >= 0 && rank < impl_->size, "local backend: no rank ", rank);
  return *impl_->flights[rank];
}

bool LocalWorld::aborted() const { return impl_->aborted; }

int LocalWorld::failed_rank() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->failed_rank;
}

std::string LocalWorld::failure_message() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->failure;
}

std::unique_ptr<Communicator> make_local_communicator(const std::shared_ptr<LocalWorld>& world,
                                                      int rank, Device& device) {
  if (rank < 0 || rank >= world->size())
    SL_THROW(InvalidArgument, "local backend: rank ", rank, " outside a world of ", world->size());
  if (device.kind() != DeviceKind::cpu)
    SL_THROW(InvalidArgument, "local backend: device ", device_kind_name(device.kind()),
             " is not supported: ranks exchange host memory directly (use backend nccl for GPUs)");
  return std::make_unique<LocalComm>(world, world->impl().world_group, rank, rank);
}

}  // namespace shardlab
