// What every Communicator backend shares: the collective kinds and their names, the checked call a
// backend receives, argument checks with rank-naming messages, errors carried between threads,
// and the trace span a collective reports. The byte formulas are in traffic.hpp. Backends include
// both; users of a communicator need only communicator.hpp.
#pragma once

#include <cstdint>
#include <string>

#include "core/comm/communicator.hpp"

namespace shardlab {

enum class CommOp : uint8_t { all_gather, reduce_scatter, all_reduce, broadcast, barrier, split };
const char* comm_op_name(CommOp op);

// One call as Communicator's public methods hand it to a backend's `start`: the arguments, already
// checked (check_collective_args, the backend's check_call), counted in traffic(), entered in the
// flight recorder as `seq`, with the two byte measures of traffic.hpp for its span.
struct CollectiveCall {
  CommOp op = CommOp::barrier;
  const void* send = nullptr;
  void* recv = nullptr;  // broadcast: the buffer (send == recv)
  int64_t count = 0;
  DType dtype = DType::f32;
  ReduceOp reduce = ReduceOp::sum;
  int root = 0;
  bool async = false;
  CallInfo info{};
  int64_t seq = 0;    // the flight recorder's number for the call
  int64_t bytes = 0;  // collective_bytes: the span's `bytes`
  int64_t sent = 0;   // sent_bytes: the span's `sent`
};

// Throws InvalidArgument naming the rank and op when count < 0 or a buffer is null with count > 0.
void check_collective_args(const char* backend, CommOp op, const void* send, const void* recv,
                           int64_t count, int root, int n);

// An error carried from a communication worker to the thread that waits: captured as its kind and
// text, thrown there as a fresh exception of the same kind, so no exception object is shared
// between threads.
class CarriedError {
 public:
  void capture();  // call inside a catch block
  explicit operator bool() const { return kind_ != Kind::none; }
  [[noreturn]] void rethrow() const;

 private:
  enum class Kind : uint8_t { none, comm, invalid_argument, out_of_memory, other };
  Kind kind_ = Kind::none;
  std::string what_;
};

// Nanoseconds on the trace clock, or 0 when `rec` is null or disabled (no clock read then).
int64_t comm_clock(Recorder* rec);
bool tracing(Recorder* rec);

// When a collective was issued, ran, and (async only) waited on; -1 where it does not apply.
struct CommTimes {
  int64_t t_issue = -1;
  int64_t t_start = -1;
  int64_t t_end = -1;
  int64_t t_wait = -1;
  int64_t wait_ns = -1;  // how long this rank waited for the last rank to arrive (local backend)
  int last_rank = -1;    // the world rank that arrived last
};

// Reports the comm-lane span of `call`: its op, unit, dtype, buffer (bytes) and what this rank sent
// (sent), at times `t`; does nothing when `rec` is null or disabled. Splits have no span.
void record_comm_span(Recorder* rec, const CollectiveCall& call, const CommTimes& t);

}  // namespace shardlab
