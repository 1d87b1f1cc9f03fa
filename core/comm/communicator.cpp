// The bookkeeping every collective gets, whatever its backend: argument checks, the traffic count,
// the flight-recorder entry and the two byte measures of its span, then the backend's `start`.
#include "core/comm/communicator.hpp"

#include "core/base/error.hpp"
#include "core/comm/comm_common.hpp"
#include "core/comm/flight_recorder.hpp"
#include "core/comm/traffic.hpp"

namespace shardlab {

Work Communicator::all_gather(const void* send, void* recv, int64_t count, DType t, bool async,
                              CallInfo info) {
  return collective({CommOp::all_gather, send, recv, count, t, ReduceOp::sum, 0, async, info});
}

Work Communicator::reduce_scatter(const void* send, void* recv, int64_t count, DType t, ReduceOp op,
                                  bool async, CallInfo info) {
  return collective({CommOp::reduce_scatter, send, recv, count, t, op, 0, async, info});
}

Work Communicator::all_reduce(const void* send, void* recv, int64_t count, DType t, ReduceOp op,
                              bool async, CallInfo info) {
  return collective({CommOp::all_reduce, send, recv, count, t, op, 0, async, info});
}

Work Communicator::broadcast(void* buf, int64_t count, DType t, int root, bool async,
                             CallInfo info) {
  return collective({CommOp::broadcast, buf, buf, count, t, ReduceOp::sum, root, async, info});
}

void Communicator::barrier() { collective({CommOp::barrier}); }

void Communicator::check_call(const CollectiveCall&) const {}

Work Communicator::collective(CollectiveCall c) {
  check_collective_args(backend(), c.op, c.send, c.recv, c.count, c.root, size_);
  check_call(c);
  add_traffic(traffic_, c.op, c.count, c.dtype, size_);
  c.bytes = collective_bytes(c.op, c.count, c.dtype, size_);
  c.sent = sent_bytes(c.op, c.count, c.dtype, size_);
  c.seq = flight_->issued(c.op, c.info, c.count, c.dtype, size_);
  Work w;
  try {
    w = start(c);
  } catch (...) {  // it did not start: the record says so (a backend that ended it said it too)
    flight_->ended(c.seq, false, -1);
    throw;
  }
  if (!c.async) w.wait();
  return w;
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  return split_call(color, key, nullptr);
}

std::unique_ptr<Communicator> Communicator::split_group(int color, int key,
                                                        const std::vector<int>& members) {
  return split_call(color, key, &members);
}

std::unique_ptr<Communicator> Communicator::split_call(int color, int key,
                                                       const std::vector<int>* members) {
  if (color < 0) SL_THROW(InvalidArgument, backend(), " split: color ", color, " must be >= 0");
  CollectiveCall c;
  c.op = CommOp::split;
  c.seq = flight_->issued(c.op, c.info, 0, c.dtype, size_);
  std::unique_ptr<Communicator> sub;
  try {
    sub = start_split(c, color, key, members);
  } catch (...) {
    flight_->ended(c.seq, false, -1);
    throw;
  }
  sub->set_recorder(recorder_);
  return sub;
}

}  // namespace shardlab
