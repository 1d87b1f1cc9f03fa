// MpiWatchdog: polling waits, probes and answers between ranks, the report and flight.json.
#include "core/comm/mpi/mpi_watchdog.hpp"

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/base/error.hpp"
#include "core/comm/comm_common.hpp"

namespace shardlab {

namespace {

constexpr int kProbeTag = 1;
constexpr int kAnswerTag = 2;

// One collective on the wire: enough of a CollectiveRecord to describe it.
struct WireRecord {
  int64_t seq, op, unit, step, count, dtype, group;  // seq 0: none
};

WireRecord to_wire(const CollectiveRecord& r) {
  return {r.seq, int64_t(r.op), r.unit, r.step, r.count, int64_t(r.dtype), r.group_size};
}

CollectiveRecord from_wire(const WireRecord& w, CollectiveRecord::State state) {
  CollectiveRecord r;
  r.seq = w.seq;
  r.op = static_cast<CommOp>(w.op);
  r.unit = static_cast<int>(w.unit);
  r.step = w.step;
  r.count = w.count;
  r.dtype = static_cast<DType>(w.dtype);
  r.group_size = static_cast<int>(w.group);
  r.state = state;
  return r;
}

// A rank's whereabouts: the collective it waits in, and its last completed one.
struct Whereabouts {
  WireRecord waiting, done;
};
constexpr int kWords = sizeof(Whereabouts) / sizeof(int64_t);

Whereabouts whereabouts(const FlightRecorder& f, int64_t seq) {
  return {to_wire(f.find(seq)), to_wire(f.last_completed())};
}

CollectiveRecord waiting_record(const Whereabouts& w) {
  return from_wire(w.waiting, CollectiveRecord::State::issued);
}

CollectiveRecord done_record(const Whereabouts& w) {
  return from_wire(w.done, CollectiveRecord::State::done);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

MpiWatchdog::MpiWatchdog(MPI_Comm world, std::shared_ptr<FlightRecorder> flight)
    : flight_(std::move(flight)) {
  MPI_Comm_dup(world, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiWatchdog::~MpiWatchdog() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiWatchdog::answer_probes(int64_t seq) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kProbeTag, comm_, &flag, &st);
    if (!flag) return;
    Whereabouts theirs;
    MPI_Recv(&theirs, kWords, MPI_INT64_T, st.MPI_SOURCE, kProbeTag, comm_, MPI_STATUS_IGNORE);
    Whereabouts mine = whereabouts(*flight_, seq);
    // Small and eager: completes without the prober receiving it first.
    MPI_Request r;
    MPI_Isend(&mine, kWords, MPI_INT64_T, st.MPI_SOURCE, kAnswerTag, comm_, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
}

int MpiWatchdog::wait(MPI_Request* req, int64_t seq) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int spins = 0;; ++spins) {
    int flag = 0;
    const int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || flag) return rc;
    // Spin like MPI_Wait does (each test also advances non-blocking collectives); now and then
    // answer probes, look at the clock and let another process have the core.
    if ((spins & 255) == 255) {
      answer_probes(seq);
      if (seconds_since(t0) > timeout_s_) fire(seq);
      std::this_thread::yield();
    }
  }
}

void MpiWatchdog::fire(int64_t seq) {
  fired_ = true;
  const Whereabouts mine = whereabouts(*flight_, seq);
  std::vector<Whereabouts> probes(size_, mine);
  std::vector<MPI_Request> sent;
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    sent.emplace_back();
    MPI_Isend(&probes[j], kWords, MPI_INT64_T, j, kProbeTag, comm_, &sent.back());
  }
  // Listen for a grace period: ranks waiting in a collective answer within milliseconds.
  std::vector<char> heard(size_, 0);
  std::vector<Whereabouts> where(size_);
  heard[rank_] = 1;
  where[rank_] = mine;
  const double grace = timeout_s_ < 2.0 ? timeout_s_ : 2.0;
  const auto t0 = std::chrono::steady_clock::now();
  int answers = 0;
  while (answers < size_ - 1 && seconds_since(t0) < grace) {
    answer_probes(seq);
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, comm_, &flag, &st);
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    Whereabouts w;
    MPI_Recv(&w, kWords, MPI_INT64_T, st.MPI_SOURCE, kAnswerTag, comm_, MPI_STATUS_IGNORE);
    if (!heard[st.MPI_SOURCE]) ++answers;
    heard[st.MPI_SOURCE] = 1;
    where[st.MPI_SOURCE] = w;
  }
  for (MPI_Request& r : sent) MPI_Request_free(&r);

  const CollectiveRecord waiting = waiting_record(mine);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g s", timeout_s_);
  std::string s = "collective watchdog: " + describe(waiting) + " on rank " +
                  std::to_string(rank_) + " did not complete within " + secs + ":";
  int missing = 0;
  for (int j = 0; j < size_; ++j)
    if (!heard[j]) s += (missing++ ? ", rank " : " rank ") + std::to_string(j);
  if (missing) s += " did not arrive (no answer: busy outside any collective)";
  for (int j = 0; j < size_; ++j) {
    if (!heard[j] || j == rank_) continue;
    const Whereabouts& w = where[j];
    if (w.waiting.op != mine.waiting.op || w.waiting.count != mine.waiting.count ||
        w.waiting.unit != mine.waiting.unit)
      s += "; rank " + std::to_string(j) + " is waiting in " + describe(waiting_record(w)) +
           " instead";
  }
  s += ". Last completed collective of each rank:";
  std::vector<nlohmann::json> ranks;
  for (int j = 0; j < size_; ++j) {
    s += (j ? "; rank " : " rank ") + std::to_string(j) + ": " +
         (heard[j] ? describe(done_record(where[j])) : std::string("unknown (no answer)"));
    if (j == rank_) {
      ranks.push_back(flight_->to_json());
    } else if (heard[j]) {
      ranks.push_back({{"rank", j},
                       {"waiting_in", record_to_json(waiting_record(where[j]))},
                       {"last_completed", record_to_json(done_record(where[j]))}});
    } else {
      ranks.push_back({{"rank", j}, {"answered", false}});
    }
  }
  write_flight_file(flight_->dump_path(), s, "mpi", timeout_s_, ranks);
  SL_THROW(CommError, s);
}

}  // namespace shardlab
