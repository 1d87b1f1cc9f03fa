// One table drives every collective, as in nccl-tests: each row says how big the buffers are, how
// to fill them on rank r, how to check the result against a closed form, how busbw relates to
// algbw, and how to run it. The correctness tests and bench/bench_collectives.cpp both iterate it,
// so adding a collective is adding a row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/comm/communicator.hpp"
#include "core/device/device.hpp"

namespace shardlab {

// The buffers of one collective call on one rank. In place, `send` points into `recv` (all_gather,
// reduce_scatter: block rank(); all_reduce and broadcast: the same buffer).
struct CollectiveBuffers {
  DType dtype = DType::f32;
  int64_t count = 0;  // the call's `count` argument
  bool in_place = false;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  Buffer send_storage;  // empty in place
  Buffer recv_storage;
  void* send = nullptr;
  void* recv = nullptr;
  int64_t send_count = 0;  // elements
  int64_t recv_count = 0;
};

struct CollectiveRow {
  const char* name;
  bool reduces;                                     // takes a ReduceOp
  bool out_of_place;                                // false: always in place (broadcast)
  int64_t (*send_count)(int64_t count, int n);      // elements of the send buffer
  int64_t (*recv_count)(int64_t count, int n);      // elements of the receive buffer
  int64_t (*bytes)(int64_t count, int n, DType t);  // nccl-tests size: the full buffer
  double (*bus_factor)(int n);                      // busbw = algbw * bus_factor(n)
  // Fills rank's input with known values and its output with a sentinel.
  void (*init)(int rank, int n, CollectiveBuffers& b);
  // "" when rank's result equals the closed form, else the first wrong element.
  std::string (*check)(int rank, int n, const CollectiveBuffers& b);
  Work (*run)(Communicator& comm, CollectiveBuffers& b, bool async);
};

// all_gather, reduce_scatter, all_reduce, broadcast.
const std::vector<CollectiveRow>& collective_table();

// Buffers for one call of `row` on `device` (category workspace), not yet initialised.
CollectiveBuffers make_collective_buffers(const CollectiveRow& row, Device& device, int n, int rank,
                                          int64_t count, DType t, bool in_place,
                                          ReduceOp op = ReduceOp::sum, int root = 0);

// The largest count whose full buffer (row.bytes) is at most `bytes`.
int64_t count_for_bytes(const CollectiveRow& row, int64_t bytes, int n, DType t);

// nccl-tests bandwidths in bytes per second: algbw = bytes / seconds, busbw = algbw * factor.
struct Bandwidth {
  double algbw = 0;
  double busbw = 0;
};
Bandwidth collective_bandwidth(const CollectiveRow& row, int64_t bytes, int n, double seconds);

// Runs every row on `comm` for every count, dtype, reduce op, in place and out of place, blocking
// and async (broadcast roots rotate), checking each result. Every rank of `comm` must call it with
// the same counts: the calls match across ranks whatever the results. Buffers come from `device`.
struct TableCheck {
  int64_t calls = 0;                  // collectives run and checked on this rank
  std::vector<std::string> failures;  // one line per wrong result
};
TableCheck check_collective_table(Communicator& comm, Device& device,
                                  const std::vector<int64_t>& counts);

// The value rank r contributes at element i: multiples of 1/4 in [-2, 2], distinct across ranks
// (up to 17) at one element, so that sums of up to 32 ranks are exact in f32, bf16 and f16.
float collective_value(int rank, int64_t i);

}  // namespace shardlab
