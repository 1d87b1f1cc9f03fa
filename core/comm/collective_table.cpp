// The rows of the collective table: sizes, bus factors (derived in docs/collectives.md),
// initial values, closed-form checks and the calls themselves.
#include "core/comm/collective_table.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/base/error.hpp"

namespace shardlab {

namespace {

// Never a collective_value: any element a collective forgot to write shows up.
constexpr float kSentinel = -99.0f;

int64_t es(DType t) { return static_cast<int64_t>(dtype_size(t)); }

void fill_values(void* p, int64_t len, DType t, int rank, int64_t first) {
  for (int64_t i = 0; i < len; ++i) store_from_f32(p, i, t, collective_value(rank, first + i));
}
void fill_sentinel(void* p, int64_t len, DType t) {
  for (int64_t i = 0; i < len; ++i) store_from_f32(p, i, t, kSentinel);
}

// The exact sum over ranks of element i, then what the collective stores: avg divides in f32,
// and the result is rounded once to the dtype.
float reduced(int n, int64_t i, DType t, ReduceOp op) {
  double s = 0;
  for (int r = 0; r < n; ++r) s += collective_value(r, i);
  float v = static_cast<float>(s);  // exact: see collective_value
  if (op == ReduceOp::avg) v = v / static_cast<float>(n);
  return round_to(t, v);
}

std::string describe(const char* name, int rank, const CollectiveBuffers& b) {
  std::ostringstream os;
  os << name << " " << dtype_name(b.dtype) << " count " << b.count
     << (b.in_place ? " in place" : " out of place") << ": rank " << rank;
  return os.str();
}

// Compares len elements of p with expect(i); reports the first difference (bitwise: -0 != +0).
template <typename F>
std::string compare(const char* name, int rank, const CollectiveBuffers& b, const char* which,
                    const void* p, int64_t len, F expect) {
  for (int64_t i = 0; i < len; ++i) {
    const float want = round_to(b.dtype, expect(i));
    const float got = load_as_f32(p, i, b.dtype);
    if (std::memcmp(&want, &got, sizeof(float)) != 0) {
      std::ostringstream os;
      os << describe(name, rank, b) << ": " << which << "[" << i << "] is " << got << ", expected "
         << want;
      return os.str();
    }
  }
  return "";
}

// ---- all_gather: recv[j*count + i] = value(j, i) ----------------------------------------------

void init_all_gather(int rank, int, CollectiveBuffers& b) {
  fill_sentinel(b.recv, b.recv_count, b.dtype);
  fill_values(b.send, b.count, b.dtype, rank, 0);
}
std::string check_all_gather(int rank, int, const CollectiveBuffers& b) {
  const int64_t c = b.count;
  std::string e = compare("all_gather", rank, b, "recv", b.recv, b.recv_count,
                          [c](int64_t i) { return collective_value(int(i / c), i % c); });
  if (e.empty() && !b.in_place)
    e = compare("all_gather", rank, b, "send", b.send, c,
                [rank](int64_t i) { return collective_value(rank, i); });
  return e;
}

// ---- reduce_scatter: recv[i] = reduce_j value(j, rank*count + i) ------------------------------

void init_reduce_scatter(int rank, int n, CollectiveBuffers& b) {
  if (!b.in_place) fill_sentinel(b.recv, b.recv_count, b.dtype);
  fill_values(b.send, b.count * n, b.dtype, rank, 0);
}
std::string check_reduce_scatter(int rank, int n, const CollectiveBuffers& b) {
  const int64_t off = rank * b.count;
  std::string e = compare("reduce_scatter", rank, b, "recv", b.recv, b.count,
                          [&](int64_t i) { return reduced(n, off + i, b.dtype, b.op); });
  // The other blocks of the send buffer are untouched, in place as well.
  for (int64_t i = 0; e.empty() && i < b.count * n; ++i) {
    if (b.in_place && i >= off && i < off + b.count) continue;
    const float want = round_to(b.dtype, collective_value(rank, i));
    if (load_as_f32(b.send, i, b.dtype) != want)
      e = describe("reduce_scatter", rank, b) + ": send[" + std::to_string(i) + "] was modified";
  }
  return e;
}

// ---- all_reduce: recv[i] = reduce_j value(j, i) -----------------------------------------------

void init_all_reduce(int rank, int, CollectiveBuffers& b) {
  if (!b.in_place) fill_sentinel(b.recv, b.recv_count, b.dtype);
  fill_values(b.send, b.count, b.dtype, rank, 0);
}
std::string check_all_reduce(int rank, int n, const CollectiveBuffers& b) {
  std::string e = compare("all_reduce", rank, b, "recv", b.recv, b.count,
                          [&](int64_t i) { return reduced(n, i, b.dtype, b.op); });
  if (e.empty() && !b.in_place)
    e = compare("all_reduce", rank, b, "send", b.send, b.count,
                [rank](int64_t i) { return collective_value(rank, i); });
  return e;
}

// ---- broadcast: buf[i] = value(root, i) -------------------------------------------------------

void init_broadcast(int rank, int, CollectiveBuffers& b) {
  fill_values(b.recv, b.count, b.dtype, rank, 0);
}
std::string check_broadcast(int rank, int, const CollectiveBuffers& b) {
  const int root = b.root;
  return compare("broadcast", rank, b, "buf", b.recv, b.count,
                 [root](int64_t i) { return collective_value(root, i); });
}

int64_t same(int64_t count, int) { return count; }
int64_t times_n(int64_t count, int n) { return count * n; }

std::vector<CollectiveRow> build_table() {
  std::vector<CollectiveRow> t;
  t.push_back({"all_gather", false, true, same, times_n,
               [](int64_t c, int n, DType d) { return c * n * es(d); },
               [](int n) { return double(n - 1) / n; }, init_all_gather, check_all_gather,
               [](Communicator& comm, CollectiveBuffers& b, bool async) {
                 return comm.all_gather(b.send, b.recv, b.count, b.dtype, async);
               }});
  t.push_back({"reduce_scatter", true, true, times_n, same,
               [](int64_t c, int n, DType d) { return c * n * es(d); },
               [](int n) { return double(n - 1) / n; }, init_reduce_scatter, check_reduce_scatter,
               [](Communicator& comm, CollectiveBuffers& b, bool async) {
                 return comm.reduce_scatter(b.send, b.recv, b.count, b.dtype, b.op, async);
               }});
  t.push_back({"all_reduce", true, true, same, same,
               [](int64_t c, int, DType d) { return c * es(d); },
               [](int n) { return 2.0 * (n - 1) / n; }, init_all_reduce, check_all_reduce,
               [](Communicator& comm, CollectiveBuffers& b, bool async) {
                 return comm.all_reduce(b.send, b.recv, b.count, b.dtype, b.op, async);
               }});
  t.push_back({"broadcast", false, false, same, same,
               [](int64_t c, int, DType d) { return c * es(d); }, [](int) { return 1.0; },
               init_broadcast, check_broadcast,
               [](Communicator& comm, CollectiveBuffers& b, bool async) {
                 return comm.broadcast(b.recv, b.count, b.dtype, b.root, async);
               }});
  return t;
}

}  // namespace

float collective_value(int rank, int64_t i) {
  return static_cast<float>((i * 7 + int64_t(rank) * 3) % 17 - 8) * 0.25f;
}

const std::vector<CollectiveRow>& collective_table() {
  static const std::vector<CollectiveRow> table = build_table();
  return table;
}

CollectiveBuffers make_collective_buffers(const CollectiveRow& row, Device& device, int n, int rank,
                                          int64_t count, DType t, bool in_place, ReduceOp op,
                                          int root) {
  SL_CHECK(in_place || row.out_of_place, row.name, " is always in place");
  CollectiveBuffers b;
  b.dtype = t;
  b.count = count;
  b.in_place = in_place;
  b.op = op;
  b.root = root;
  b.send_count = row.send_count(count, n);
  b.recv_count = row.recv_count(count, n);
  const std::string name = row.name;
  if (in_place) {
    // The larger buffer holds the smaller one at block `rank` (or is the same buffer).
    const int64_t big = std::max(b.send_count, b.recv_count);
    b.recv_storage = device.alloc(big * es(t), MemCategory::workspace);
    char* base = b.recv_storage.as<char>();
    if (name == "all_gather") {
      b.recv = base;
      b.send = base + rank * count * es(t);
    } else if (name == "reduce_scatter") {
      b.send = base;
      b.recv = base + rank * count * es(t);
    } else {
      b.send = b.recv = base;
    }
  } else {
    b.send_storage = device.alloc(b.send_count * es(t), MemCategory::workspace);
    b.recv_storage = device.alloc(b.recv_count * es(t), MemCategory::workspace);
    b.send = b.send_storage.data();
    b.recv = b.recv_storage.data();
  }
  return b;
}

int64_t count_for_bytes(const CollectiveRow& row, int64_t bytes, int n, DType t) {
  const int64_t unit = row.bytes(1, n, t);  // every row's size is linear in count
  return bytes / unit;
}

TableCheck check_collective_table(Communicator& comm, Device& device,
                                  const std::vector<int64_t>& counts) {
  TableCheck out;
  const int n = comm.size(), rank = comm.rank();
  int call = 0;
  for (const CollectiveRow& row : collective_table()) {
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      for (int64_t count : counts) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
          if (op == ReduceOp::avg && !row.reduces) continue;
          for (bool in_place : {false, true}) {
            if (!in_place && !row.out_of_place) continue;
            for (bool async : {false, true}) {
              const int root = call++ % n;
              CollectiveBuffers b =
                  make_collective_buffers(row, device, n, rank, count, t, in_place, op, root);
              row.init(rank, n, b);
              Work w = row.run(comm, b, async);
              w.wait();
              ++out.calls;
              std::string e = row.check(rank, n, b);
              if (!e.empty())
                out.failures.push_back(e + " (" + reduce_op_name(op) + (async ? ", async" : "") +
                                       ", root " + std::to_string(root) + ", " + std::to_string(n) +
                                       " ranks, " + comm.backend() + ")");
            }
          }
        }
      }
    }
  }
  return out;
}

Bandwidth collective_bandwidth(const CollectiveRow& row, int64_t bytes, int n, double seconds) {
  Bandwidth b;
  if (seconds <= 0) return b;
  b.algbw = static_cast<double>(bytes) / seconds;
  b.busbw = b.algbw * row.bus_factor(n);
  return b;
}

}  // namespace shardlab
