// The one reduction every local collective uses: element by element, in rank order 0..n-1,
// accumulated in f32 and rounded once to the dtype at the end (avg = sum / n). all_reduce and
// reduce_scatter both call it, which is why their results are bit-identical. It sums in registers
// and needs no staging: the local backend's collectives take no memory of their own.
#pragma once

#include <cstdint>

#include "core/base/dtype.hpp"
#include "core/comm/communicator.hpp"

namespace shardlab {

// dst[k][i] = round_t( (src[0][i] + src[1][i] + ... + src[n-1][i]) [/ n] ) for i < len, k < ndst,
// in one pass: each group of elements is read from every source, summed in f32 registers in rank
// order and written to every destination. A destination may be one of the sources at the same
// offset (in place): an element is read from every source before it is written. `stream` writes
// f32 results with non-temporal stores (for results too large to stay in cache: the stores skip
// reading the destination's lines first); the result is the same bits either way.
// The f32 loop runs at the CPU's vector width (core/base/cpu_simd.hpp; ScopedCpuSimd picks
// another, as the tests do to check that every width gives the same bits).
void reduce_rank_order(const void* const* src, int n, void* const* dst, int ndst, int64_t len,
                       DType t, ReduceOp op, bool stream = false);

}  // namespace shardlab
