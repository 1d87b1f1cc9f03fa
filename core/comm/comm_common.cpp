// Names, argument checks, carried errors and trace spans shared by the communicator backends.
#include "core/comm/comm_common.hpp"

#include <exception>

#include "core/base/error.hpp"
#include "core/memory/tracker.hpp"
#include "core/trace/recorder.hpp"

namespace shardlab {

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "avg"; }

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_gather: return "all_gather";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::broadcast: return "broadcast";
    case CommOp::barrier: return "barrier";
    case CommOp::split: return "split";
  }
  return "?";
}

void check_collective_args(const char* backend, CommOp op, const void* send, const void* recv,
                           int64_t count, int root, int n) {
  const char* name = comm_op_name(op);
  if (count < 0) SL_THROW(InvalidArgument, backend, " ", name, ": count ", count, " is negative");
  if (count > 0 && (!send || !recv))
    SL_THROW(InvalidArgument, backend, " ", name, ": null buffer with count ", count);
  if (op == CommOp::broadcast && (root < 0 || root >= n))
    SL_THROW(InvalidArgument, backend, " broadcast: root ", root, " outside the ", n,
             " ranks of the communicator");
}

void CarriedError::capture() {
  try {
    throw;
  } catch (const CommError& e) {
    kind_ = Kind::comm;
    what_ = e.what();
  } catch (const InvalidArgument& e) {
    kind_ = Kind::invalid_argument;
    what_ = e.what();
  } catch (const OutOfMemory& e) {
    kind_ = Kind::out_of_memory;
    what_ = e.what();
  } catch (const std::exception& e) {
    kind_ = Kind::other;
    what_ = e.what();
  } catch (...) {
    kind_ = Kind::other;
    what_ = rank_prefix() + "unknown exception in a collective";
  }
}

void CarriedError::rethrow() const {
  switch (kind_) {
    case Kind::comm: throw CommError(what_);
    case Kind::invalid_argument: throw InvalidArgument(what_);
    case Kind::out_of_memory: throw OutOfMemory(what_);
    default: throw Error(what_);
  }
}

bool tracing(Recorder* rec) { return rec && rec->enabled(); }

int64_t comm_clock(Recorder* rec) { return tracing(rec) ? trace_now_ns() : 0; }

void record_comm_span(Recorder* rec, const CollectiveCall& call, const CommTimes& t) {
  if (!tracing(rec) || call.op == CommOp::split) return;
  rec->span(Lane::comm, comm_op_name(call.op), call.info.unit, call.bytes, call.dtype, t.t_issue,
            t.t_start, t.t_end, t.t_wait, t.wait_ns, t.last_rank, call.sent);
}

}  // namespace shardlab
