// What a collective moves, in the two measures every backend and every report uses, so that the
// local, MPI, NCCL and simulated figures come from one formula (derivations in
// docs/collectives.md). Wherever bytes of collectives are printed or drawn, both are labelled:
// - "sent per rank" (sent_bytes): the bytes this rank sends with a ring algorithm. A full_shard
//   step sends 3 Psi (N-1)/N elements per rank, DDP's all-reduce 2 Psi (N-1)/N: 1.5x.
// - "buffer" (collective_bytes): the collective's full size as nccl-tests define it, the base of
//   algbw and busbw. full_shard's step is 3 Psi, DDP's Psi: 3x.
#pragma once

#include <cstdint>

#include "core/comm/comm_common.hpp"

namespace shardlab {

// "Sent per rank": the ring traffic of one call on `n` ranks, the bytes this rank sends
// (`count` is the per-rank count the Communicator call takes): all_gather and reduce_scatter
// count*size*(n-1), all_reduce 2*count*size*(n-1)/n, broadcast count*size; 0 for the rest.
int64_t sent_bytes(CommOp op, int64_t count, DType dtype, int n);
// Adds sent_bytes of one call to its operation's counter in `t`, and collective_bytes to
// t.buffer.
void add_traffic(Communicator::Traffic& t, CommOp op, int64_t count, DType dtype, int n);

// "Buffer": the collective's full size, the larger of its two buffers (all_gather: recv,
// reduce_scatter: send, all_reduce and broadcast: the buffer); 0 for the rest (barrier).
int64_t collective_bytes(CommOp op, int64_t count, DType dtype, int n);

}  // namespace shardlab
