// The one reduction every local collective uses: element by element, in rank order 0..n-1,
// accumulated in f32 and rounded once to the dtype at the end (avg = sum / n). all_reduce and
// reduce_scatter both call it, which is why their results are bit-identical.
#pragma once

#include <cstdint>

#include "core/base/dtype.hpp"
#include "core/comm/communicator.hpp"

namespace shardlab {

// Elements reduced per pass: the f32 accumulator (32 KiB) stays in cache while n sources stream.
inline constexpr int64_t kReduceBlock = 8192;

// Scratch that reduce_rank_order needs for `len` elements of `t` (the comm staging buffer).
int64_t reduce_staging_bytes(int64_t len, DType t);

// dst[k][i] = round_t( (src[0][i] + src[1][i] + ... + src[n-1][i]) [/ n] ) for i < len, k < ndst.
// A destination may be one of the sources (in place): each block is read in full before it is
// written. `staging` holds reduce_staging_bytes(len, t) bytes.
void reduce_rank_order(const void* const* src, int n, void* const* dst, int ndst, int64_t len,
                       DType t, ReduceOp op, void* staging);

}  // namespace shardlab
