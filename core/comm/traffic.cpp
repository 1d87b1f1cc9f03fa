// Sent per rank (ring traffic) and buffer (nccl-tests' size) of a collective, shared by every
// communicator backend.
#include "core/comm/traffic.hpp"

namespace shardlab {

int64_t sent_bytes(CommOp op, int64_t count, DType dtype, int n) {
  const int64_t b = count * static_cast<int64_t>(dtype_size(dtype));
  switch (op) {
    case CommOp::all_gather:
    case CommOp::reduce_scatter: return b * (n - 1);
    case CommOp::all_reduce: return 2 * b * (n - 1) / n;
    case CommOp::broadcast: return b;
    default: return 0;
  }
}

void add_traffic(Communicator::Traffic& t, CommOp op, int64_t count, DType dtype, int n) {
  const int64_t s = sent_bytes(op, count, dtype, n);
  switch (op) {
    case CommOp::all_gather: t.all_gather += s; break;
    case CommOp::reduce_scatter: t.reduce_scatter += s; break;
    case CommOp::all_reduce: t.all_reduce += s; break;
    case CommOp::broadcast: t.broadcast += s; break;
    default: break;
  }
  t.buffer += collective_bytes(op, count, dtype, n);
}

int64_t collective_bytes(CommOp op, int64_t count, DType dtype, int n) {
  const int64_t b = count * static_cast<int64_t>(dtype_size(dtype));
  switch (op) {
    case CommOp::all_gather:
    case CommOp::reduce_scatter: return b * n;
    case CommOp::all_reduce:
    case CommOp::broadcast: return b;
    default: return 0;
  }
}

}  // namespace shardlab
