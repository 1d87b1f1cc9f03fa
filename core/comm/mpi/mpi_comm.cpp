// MpiComm: the Communicator over an MPI communicator: MPI's collectives directly, except
// reduce_scatter, a ring of point-to-point messages (Ring below).
// Errors come back as CommError (the communicator uses MPI_ERRORS_RETURN) naming the rank and call.
#include "core/comm/mpi/mpi_comm.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

#include "core/base/error.hpp"
#include "core/comm/comm_common.hpp"
#include "core/comm/mpi/mpi_watchdog.hpp"

namespace shardlab {

namespace {

int64_t es(DType t) { return static_cast<int64_t>(dtype_size(t)); }

// ---- datatypes and the half-precision sum -----------------------------------------------------

struct HalfTypes {
  MPI_Datatype bf16 = MPI_DATATYPE_NULL;
  MPI_Datatype f16 = MPI_DATATYPE_NULL;
  MPI_Op sum = MPI_OP_NULL;
};
HalfTypes g_half;
std::once_flag g_half_once;

// inout[i] = round(in[i] + inout[i]) through f32. MPI may combine partial results in any order,
// so half-precision MPI sums round at each step (unlike the local backend's single rounding).
void half_sum(void* in, void* inout, int* len, MPI_Datatype* type) {
  const DType t = (*type == g_half.bf16) ? DType::bf16 : DType::f16;
  for (int i = 0; i < *len; ++i)
    store_from_f32(inout, i, t, load_as_f32(in, i, t) + load_as_f32(inout, i, t));
}

const HalfTypes& half_types() {
  std::call_once(g_half_once, [] {
    MPI_Type_contiguous(2, MPI_BYTE, &g_half.bf16);
    MPI_Type_commit(&g_half.bf16);
    MPI_Type_contiguous(2, MPI_BYTE, &g_half.f16);
    MPI_Type_commit(&g_half.f16);
    MPI_Op_create(&half_sum, /*commute=*/1, &g_half.sum);
  });
  return g_half;
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::bf16: return half_types().bf16;
    default: return half_types().f16;
  }
}

MPI_Op mpi_sum(DType t) { return t == DType::f32 ? MPI_SUM : half_types().sum; }

// avg = sum / n, in place, rounded once more to the dtype.
void divide(void* buf, int64_t count, DType t, int n) {
  const float fn = static_cast<float>(n);
  if (t == DType::f32) {
    float* p = static_cast<float*>(buf);
    for (int64_t i = 0; i < count; ++i) p[i] = p[i] / fn;
    return;
  }
  for (int64_t i = 0; i < count; ++i)
    store_from_f32(buf, size_t(i), t, load_as_f32(buf, size_t(i), t) / fn);
}

// ---- reduce_scatter as a ring of point-to-point messages ----------------------------------------

// Open MPI 4.1's reduce_scatter (MPI_Ireduce_scatter_block, and the blocking form as well) took
// 13.8-14.8 ms at 2 ranks and 16 MiB on the development machine, where this ring takes 2.3-2.7 and
// Open MPI's own all_gather of the same buffer about 1 (docs/collectives.md, "MPI's
// reduce_scatter"). So the backend runs the ring itself, as NCCL does: N - 1 steps; in step s
// rank r receives from its left the partial sum of block (r - s - 2) mod N, adds its own block of
// it, and at the same time sends its right the partial of block (r - s - 1) mod N (in step 0 its
// own block). After the last step the sum of block r is complete on rank r.
// Each call has its own tag, so two calls in flight on one communicator (an async reduce_scatter
// behind another) never take each other's messages: every rank issues the same calls in the same
// order, so the tags agree.
struct Ring {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1, tag = 0;
  DType dtype = DType::f32;
  int count = 0;  // elements per block
  const char* send = nullptr;
  char* recv = nullptr;
  Buffer staging;  // the blocks in flight that recv cannot hold (inbox)
  int step = 0;
  MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};

  size_t block_bytes() const { return size_t(count) * dtype_size(dtype); }
  const char* own_block(int k) const { return send + size_t(k) * block_bytes(); }
  bool in_place() const { return recv == own_block(rank); }
  bool finished() const { return step == size - 1; }

  // Where step s receives. Out of place the steps take turns between recv and one staging block,
  // the last one recv itself; in place recv holds this rank's own block until the last sum, so the
  // steps take turns between two staging blocks.
  char* inbox(int s) const {
    char* st = static_cast<char*>(staging.data());
    if (!in_place()) return (size - 2 - s) % 2 == 0 ? recv : st;
    return st + size_t(s % 2) * block_bytes();
  }
  const void* outbox(int s) const {
    return s == 0 ? static_cast<const void*>(own_block((rank - 1 + size) % size)) : inbox(s - 1);
  }

  int post() {
    const MPI_Datatype t = mpi_type(dtype);
    const int left = (rank - 1 + size) % size, right = (rank + 1) % size;
    int rc = MPI_Irecv(inbox(step), count, t, left, tag, comm, &reqs[0]);
    if (rc == MPI_SUCCESS) rc = MPI_Isend(outbox(step), count, t, right, tag, comm, &reqs[1]);
    return rc;
  }

  // Both messages of the step are done: add this rank's block to what came in, start the next.
  int advance() {
    const int k = ((rank - step - 2) % size + 2 * size) % size;
    char* in = inbox(step);
    void* out = step == size - 2 ? static_cast<void*>(recv) : static_cast<void*>(in);
    const char* mine = own_block(k);
    if (dtype == DType::f32) {
      const float* a = reinterpret_cast<const float*>(in);
      const float* b = reinterpret_cast<const float*>(mine);
      float* o = static_cast<float*>(out);
      for (int i = 0; i < count; ++i) o[i] = a[i] + b[i];
    } else {  // through f32, rounded at each step as the half-precision MPI_Op does
      for (int i = 0; i < count; ++i)
        store_from_f32(out, size_t(i), dtype,
                       load_as_f32(in, size_t(i), dtype) + load_as_f32(mine, size_t(i), dtype));
    }
    ++step;
    return finished() ? MPI_SUCCESS : post();
  }
};

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  SL_THROW(CommError, "mpi ", call, " failed: ", std::string(text, len));
}

bool mpi_finalized() {
  int f = 0;
  MPI_Finalized(&f);
  return f != 0;
}

// ---- completion handle of an async MPI collective ---------------------------------------------

struct MpiWork final : Work::State {
  MPI_Request req = MPI_REQUEST_NULL;
  std::unique_ptr<Ring> ring;  // instead of req: a collective of several steps (reduce_scatter)
  const char* call = "";
  std::function<void()> finish;  // after completion: free the ring's staging, divide for avg
  Recorder* rec = nullptr;
  CollectiveCall c;
  mutable CommTimes times;
  FlightRecorder* flight = nullptr;
  MpiWatchdog* watch = nullptr;
  mutable bool completed = false;
  bool reported = false;
  mutable std::exception_ptr error;

  void complete(int rc) const {
    times.t_end = comm_clock(rec);
    completed = true;
    try {
      check_mpi(rc, call);
      if (finish) finish();
    } catch (...) {
      error = std::current_exception();
    }
    flight->ended(c.seq, !error, -1);
  }
  // Waits for the collective (polling, so the watchdog can answer) and completes it.
  void finish_waiting() const {
    if (!ring) return complete(watch->wait(&const_cast<MpiWork*>(this)->req, c.seq));
    int rc = MPI_SUCCESS;
    while (rc == MPI_SUCCESS && !ring->finished()) {
      rc = watch->wait(&ring->reqs[0], c.seq);
      if (rc == MPI_SUCCESS) rc = watch->wait(&ring->reqs[1], c.seq);
      if (rc == MPI_SUCCESS) rc = ring->advance();
    }
    complete(rc);
  }
  // A blocking call's wait is its own: no t_wait in its span.
  void wait() override {
    const int64_t t_wait = c.async ? comm_clock(rec) : -1;
    if (!completed) finish_waiting();
    if (!reported) {
      reported = true;
      times.t_wait = t_wait;
      if (!error) record_comm_span(rec, c, times);
    }
    if (error) std::rethrow_exception(error);
  }
  bool done() const override {
    if (completed) return true;
    int flag = 0, rc = MPI_SUCCESS;
    if (!ring) {
      rc = MPI_Test(&const_cast<MpiWork*>(this)->req, &flag, MPI_STATUS_IGNORE);
    } else {  // as many steps as have arrived
      while (rc == MPI_SUCCESS && !ring->finished()) {
        rc = MPI_Testall(2, ring->reqs, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS || !flag) break;
        rc = ring->advance();
      }
      flag = ring->finished();
    }
    if (flag || rc != MPI_SUCCESS) complete(rc);
    return completed;
  }
  ~MpiWork() override {
    // Dropped without wait: the buffers must not be released under MPI's feet. Unless the rank
    // is failing (an exception unwinds, or the watchdog fired): the launcher's MPI_Abort ends the
    // job next, and a peer that never arrives would make this wait for ever.
    if (!completed && !mpi_finalized() && std::uncaught_exceptions() == 0 && !watch->fired()) {
      int rc = MPI_SUCCESS;
      if (!ring) rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
      while (ring && rc == MPI_SUCCESS && !ring->finished()) {
        rc = MPI_Waitall(2, ring->reqs, MPI_STATUSES_IGNORE);
        if (rc == MPI_SUCCESS) rc = ring->advance();
      }
      complete(rc);
    }
    if (!reported && !error) record_comm_span(rec, c, times);
  }
};

// ---- the communicator -------------------------------------------------------------------------

class MpiComm final : public Communicator {
 public:
  MpiComm(MPI_Comm comm, int rank, int size, Device& device, std::shared_ptr<FlightRecorder> flight,
          std::shared_ptr<MpiWatchdog> watch)
      : Communicator(rank, size), comm_(comm), device_(device), watch_(std::move(watch)) {
    flight_ = std::move(flight);
  }
  ~MpiComm() override {
    if (!mpi_finalized()) MPI_Comm_free(&comm_);
  }

  const char* backend() const override { return "mpi"; }

  // Takes ownership of `comm` (freed with the communicator).
  static std::unique_ptr<Communicator> make_owned(MPI_Comm comm, Device& device,
                                                  std::shared_ptr<FlightRecorder> flight,
                                                  std::shared_ptr<MpiWatchdog> watch) {
    check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    return std::make_unique<MpiComm>(comm, rank, size, device, std::move(flight), std::move(watch));
  }

 private:
  // MPI counts are int; all_gather's receive side and reduce_scatter's send side are size() times
  // larger.
  void check_call(const CollectiveCall& c) const override {
    const int64_t limit =
        INT_MAX / (c.op == CommOp::all_gather || c.op == CommOp::reduce_scatter ? size_ : 1);
    if (c.count > limit)
      SL_THROW(InvalidArgument, "mpi ", comm_op_name(c.op), ": count ", c.count,
               " exceeds what one MPI call takes (", limit, "); split the buffer");
  }

  Work start(const CollectiveCall& c) override {
    const int n = static_cast<int>(c.count);
    const MPI_Datatype t = mpi_type(c.dtype);
    switch (c.op) {
      case CommOp::all_gather: {
        const bool in_place =
            c.send == static_cast<const char*>(c.recv) + rank_ * c.count * es(c.dtype);
        const void* sb = in_place ? MPI_IN_PLACE : c.send;
        return run(make_work(c, "MPI_Allgather"), [&](MPI_Request* r) {
          return MPI_Iallgather(sb, n, t, c.recv, n, t, comm_, r);
        });
      }
      case CommOp::reduce_scatter: return start_ring(c);
      case CommOp::all_reduce: {
        const void* sb = c.send == c.recv ? MPI_IN_PLACE : c.send;
        auto w = make_work(c, "MPI_Allreduce");
        if (c.reduce == ReduceOp::avg)
          w->finish = [recv = c.recv, count = c.count, dt = c.dtype, size = size_] {
            divide(recv, count, dt, size);
          };
        return run(w, [&](MPI_Request* r) {
          return MPI_Iallreduce(sb, c.recv, n, t, mpi_sum(c.dtype), comm_, r);
        });
      }
      case CommOp::broadcast:
        return run(make_work(c, "MPI_Bcast"),
                   [&](MPI_Request* r) { return MPI_Ibcast(c.recv, n, t, c.root, comm_, r); });
      default:
        return run(make_work(c, "MPI_Barrier"),
                   [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
    }
  }

  // reduce_scatter: the ring of point-to-point steps (Ring above), with its staging.
  Work start_ring(const CollectiveCall& c) {
    auto w = make_work(c, "reduce_scatter ring (MPI_Isend, MPI_Irecv)");
    auto ring = std::make_unique<Ring>();
    ring->comm = comm_;
    ring->rank = rank_;
    ring->size = size_;
    ring->tag = next_tag();
    ring->dtype = c.dtype;
    ring->count = static_cast<int>(c.count);
    ring->send = static_cast<const char*>(c.send);
    ring->recv = static_cast<char*>(c.recv);
    // Staging for the blocks in flight (comm_buffers, Ring::inbox): none out of place at N = 2.
    int blocks = 0;
    if (size_ > 1) blocks = ring->in_place() ? std::min(size_ - 1, 2) : (size_ > 2 ? 1 : 0);
    if (blocks > 0 && c.count > 0)
      ring->staging = device_.alloc(blocks * c.count * es(c.dtype), MemCategory::comm_buffers);
    if (size_ == 1 || c.count == 0) {  // nothing to exchange: the sum is this rank's block
      if (!ring->in_place() && c.count > 0) std::memcpy(c.recv, c.send, ring->block_bytes());
      ring->step = size_ - 1;
    }
    Ring* r = ring.get();
    w->ring = std::move(ring);
    w->finish = [w = w.get(), recv = c.recv, count = c.count, dt = c.dtype, op = c.reduce,
                 size = size_] {
      w->ring->staging.reset();
      if (op == ReduceOp::avg) divide(recv, count, dt, size);
    };
    return run(w, [r](MPI_Request*) { return r->finished() ? MPI_SUCCESS : r->post(); });
  }

  std::unique_ptr<Communicator> start_split(const CollectiveCall& c, int color, int key,
                                            const std::vector<int>*) override {
    MPI_Comm sub = MPI_COMM_NULL;
    const int rc = MPI_Comm_split(comm_, color, key, &sub);
    flight_->ended(c.seq, rc == MPI_SUCCESS, -1);
    check_mpi(rc, "MPI_Comm_split");
    return make_owned(sub, device_, flight_, watch_);
  }

  std::shared_ptr<MpiWork> make_work(const CollectiveCall& c, const char* call) {
    auto w = std::make_shared<MpiWork>();
    w->call = call;
    w->rec = recorder_;
    w->c = c;
    w->times.t_issue = comm_clock(recorder_);
    w->times.t_start = w->times.t_issue;  // MPI starts the collective at issue
    w->flight = flight_.get();
    w->watch = watch_.get();
    return w;
  }

  // issue(&req) starts the non-blocking call (or the ring's first step). A blocking collective is
  // the same call waited on at once (by Communicator): the wait polls, so the watchdog can answer
  // and time it. A call MPI refuses to start completes with its error: thrown here when async,
  // from the wait when blocking.
  template <typename Issue>
  Work run(const std::shared_ptr<MpiWork>& w, Issue issue) {
    const int rc = issue(&w->req);
    if (rc != MPI_SUCCESS) {
      w->complete(rc);
      if (w->c.async) std::rethrow_exception(w->error);
    }
    return Work(w);
  }

  // The tag of the next point-to-point collective on this communicator (Ring): 1 to 32000 in turn
  // (MPI guarantees tags up to 32767), the same sequence on every rank.
  int next_tag() {
    ring_calls_ = ring_calls_ % 32000 + 1;
    return ring_calls_;
  }

  MPI_Comm comm_;
  Device& device_;
  std::shared_ptr<MpiWatchdog> watch_;
  int ring_calls_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, Device& device,
                                                    double timeout_s) {
  if (!(timeout_s > 0))
    SL_THROW(InvalidArgument, "mpi: collective timeout ", timeout_s, " s must be positive");
  MPI_Comm dup = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto flight = std::make_shared<FlightRecorder>(rank);
  auto watch = std::make_shared<MpiWatchdog>(MPI_COMM_WORLD, flight);
  watch->set_timeout(timeout_s);
  return MpiComm::make_owned(dup, device, std::move(flight), std::move(watch));
}

void mpi_ensure_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    if (mpi_finalized())
      SL_THROW(Error, "mpi: MPI was already finalized in this process; it cannot start again");
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
              "MPI_Init_thread");
    std::atexit([] {
      if (!mpi_finalized()) MPI_Finalize();
    });
  }
  // Collectives are called from the rank's own thread only: FUNNELED suffices on the main thread,
  // SERIALIZED anywhere.
  int provided = 0, is_main = 0;
  MPI_Query_thread(&provided);
  MPI_Is_thread_main(&is_main);
  if (provided < MPI_THREAD_FUNNELED || (provided < MPI_THREAD_SERIALIZED && !is_main))
    SL_THROW(Error, "mpi: the MPI library provides thread level ", provided,
             "; shardlab needs MPI_THREAD_SERIALIZED (or FUNNELED on the main thread)");
}

}  // namespace shardlab
