// MpiComm: the Communicator over an MPI communicator, using MPI's collectives directly.
// Errors come back as CommError (the communicator uses MPI_ERRORS_RETURN) naming the rank and call.
#include "core/comm/mpi/mpi_comm.hpp"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>

#include "core/base/error.hpp"
#include "core/comm/comm_common.hpp"
#include "core/comm/mpi/mpi_watchdog.hpp"
#include "core/comm/traffic.hpp"

namespace shardlab {

namespace {

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
  const char* call = "";
  std::function<void()> finish;  // after completion: copy out of staging, divide for avg
  Buffer staging;
  Recorder* rec = nullptr;
  CommOp op = CommOp::barrier;
  CallInfo info;
  int64_t bytes = 0;  // collective_bytes
  int64_t sent = 0;   // sent_bytes
  DType dtype = DType::f32;
  mutable CommTimes times;
  FlightRecorder* flight = nullptr;
  MpiWatchdog* watch = nullptr;
  int64_t seq = 0;
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
    flight->ended(seq, !error, -1);
  }
  void wait() override {
    const int64_t t_wait = comm_clock(rec);
    if (!completed) complete(watch->wait(&req, seq));
    if (!reported) {
      reported = true;
      times.t_wait = t_wait;
      if (!error) record_comm_span(rec, op, info, bytes, sent, dtype, times);
    }
    if (error) std::rethrow_exception(error);
  }
  bool done() const override {
    if (!completed) {
      int flag = 0;
      int rc = MPI_Test(&const_cast<MpiWork*>(this)->req, &flag, MPI_STATUS_IGNORE);
      if (flag || rc != MPI_SUCCESS) complete(rc);
    }
    return completed;
  }
  ~MpiWork() override {
    // Dropped without wait: the buffers must not be released under MPI's feet. Unless the rank
    // is failing (an exception unwinds, or the watchdog fired): the launcher's MPI_Abort ends the
    // job next, and a peer that never arrives would make this wait for ever.
    if (!completed && !mpi_finalized() && std::uncaught_exceptions() == 0 && !watch->fired())
      complete(MPI_Wait(&req, MPI_STATUS_IGNORE));
    if (!reported && !error) record_comm_span(rec, op, info, bytes, sent, dtype, times);
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

  Work all_gather(const void* send, void* recv, int64_t count, DType t, bool async,
                  CallInfo info) override {
    begin(CommOp::all_gather, send, recv, count, t, 0);
    const int c = static_cast<int>(count);
    const bool in_place =
        send == static_cast<const char*>(recv) + rank_ * count * int64_t(dtype_size(t));
    const void* sb = in_place ? MPI_IN_PLACE : send;
    auto w = make_work(CommOp::all_gather, count, t, info, "MPI_Allgather");
    return run(w, async, [&](MPI_Request* r) {
      return MPI_Iallgather(sb, c, mpi_type(t), recv, c, mpi_type(t), comm_, r);
    });
  }

  Work reduce_scatter(const void* send, void* recv, int64_t count, DType t, ReduceOp op, bool async,
                      CallInfo info) override {
    begin(CommOp::reduce_scatter, send, recv, count, t, 0);
    const int c = static_cast<int>(count);
    const int64_t bytes = count * int64_t(dtype_size(t));
    auto w = make_work(CommOp::reduce_scatter, count, t, info, "MPI_Reduce_scatter_block");
    // In place (recv inside send) the buffers alias, which MPI forbids: reduce into staging.
    void* out = recv;
    if (send == static_cast<const char*>(recv) - rank_ * bytes && count > 0) {
      w->staging = device_.alloc(bytes, MemCategory::comm_buffers);
      out = w->staging.data();
    }
    w->finish = [w = w.get(), recv, out, bytes, count, t, op, n = size_] {
      if (out != recv) std::memcpy(recv, out, static_cast<size_t>(bytes));
      w->staging.reset();
      if (op == ReduceOp::avg) divide(recv, count, t, n);
    };
    return run(w, async, [&](MPI_Request* r) {
      return MPI_Ireduce_scatter_block(send, out, c, mpi_type(t), mpi_sum(t), comm_, r);
    });
  }

  Work all_reduce(const void* send, void* recv, int64_t count, DType t, ReduceOp op, bool async,
                  CallInfo info) override {
    begin(CommOp::all_reduce, send, recv, count, t, 0);
    const int c = static_cast<int>(count);
    const void* sb = send == recv ? MPI_IN_PLACE : send;
    auto w = make_work(CommOp::all_reduce, count, t, info, "MPI_Allreduce");
    if (op == ReduceOp::avg) w->finish = [recv, count, t, n = size_] { divide(recv, count, t, n); };
    return run(w, async, [&](MPI_Request* r) {
      return MPI_Iallreduce(sb, recv, c, mpi_type(t), mpi_sum(t), comm_, r);
    });
  }

  Work broadcast(void* buf, int64_t count, DType t, int root, bool async, CallInfo info) override {
    begin(CommOp::broadcast, buf, buf, count, t, root);
    const int c = static_cast<int>(count);
    auto w = make_work(CommOp::broadcast, count, t, info, "MPI_Bcast");
    return run(w, async,
               [&](MPI_Request* r) { return MPI_Ibcast(buf, c, mpi_type(t), root, comm_, r); });
  }

  void barrier() override {
    auto w = make_work(CommOp::barrier, 0, DType::f32, {}, "MPI_Barrier");
    run(w, false, [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    if (color < 0) SL_THROW(InvalidArgument, "mpi split: color ", color, " must be >= 0");
    MPI_Comm sub = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    auto c = make_owned(sub, device_, flight_, watch_);
    c->set_recorder(recorder_);
    return c;
  }

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
  void begin(CommOp op, const void* send, const void* recv, int64_t count, DType t, int root) {
    check_collective_args("mpi", op, send, recv, count, root, size_);
    // MPI counts are int; all_gather's receive side is size() times larger.
    const int64_t limit =
        INT_MAX / (op == CommOp::all_gather || op == CommOp::reduce_scatter ? size_ : 1);
    if (count > limit)
      SL_THROW(InvalidArgument, "mpi ", comm_op_name(op), ": count ", count,
               " exceeds what one MPI call takes (", limit, "); split the buffer");
    add_traffic(traffic_, op, count, t, size_);
  }

  std::shared_ptr<MpiWork> make_work(CommOp op, int64_t count, DType t, CallInfo info,
                                     const char* call) {
    auto w = std::make_shared<MpiWork>();
    w->call = call;
    w->rec = recorder_;
    w->op = op;
    w->info = info;
    w->bytes = collective_bytes(op, count, t, size_);
    w->sent = sent_bytes(op, count, t, size_);
    w->dtype = t;
    w->times.t_issue = comm_clock(recorder_);
    w->times.t_start = w->times.t_issue;  // MPI starts the collective at issue
    w->flight = flight_.get();
    w->watch = watch_.get();
    w->seq = flight_->issued(op, info, count, t, size_);
    return w;
  }

  // issue(&req) starts the non-blocking call. A blocking collective is the same call waited on at
  // once: the wait polls, so the watchdog can answer and time it.
  template <typename Issue>
  Work run(const std::shared_ptr<MpiWork>& w, bool async, Issue issue) {
    if (!async) {
      const int rc = issue(&w->req);
      w->complete(rc == MPI_SUCCESS ? watch_->wait(&w->req, w->seq) : rc);
      w->reported = true;
      if (w->error) std::rethrow_exception(w->error);
      record_comm_span(w->rec, w->op, w->info, w->bytes, w->sent, w->dtype, w->times);
      return Work();
    }
    check_mpi(issue(&w->req), w->call);
    return Work(w);
  }

  MPI_Comm comm_;
  Device& device_;
  std::shared_ptr<MpiWatchdog> watch_;
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
