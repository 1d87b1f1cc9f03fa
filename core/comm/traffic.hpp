// What a collective moves, in the two measures every backend reports, so that the local, MPI and
// NCCL figures come from one formula (derivations in docs/collectives.md):
// - ring traffic: the bytes this rank sends with a ring algorithm (Communicator::traffic);
// - the collective's size as nccl-tests define it: the full buffer (trace spans, busbw).
#pragma once

#include <cstdint>

#include "core/comm/comm_common.hpp"

namespace shardlab {

// The ring traffic of one call on `n` ranks, the bytes this rank sends: all_gather and
// reduce_scatter count*size*(n-1), all_reduce 2*count*size*(n-1)/n, broadcast count*size;
// 0 for the rest. "Bytes" without a qualifier means this everywhere the project prints them.
int64_t sent_bytes(CommOp op, int64_t count, DType dtype, int n);
// Adds sent_bytes of one call to its operation's counter in `t`.
void add_traffic(Communicator::Traffic& t, CommOp op, int64_t count, DType dtype, int n);

// The larger of the two buffers (all_gather: recv, reduce_scatter: send, all_reduce and
// broadcast: the buffer).
int64_t collective_bytes(CommOp op, int64_t count, DType dtype, int n);

}  // namespace shardlab
