// Op kinds and nccl-tests bandwidth (see ops.hpp).
#include "viewer/model/ops.hpp"

namespace shardlab::viewer {

namespace {
constexpr const char* kOpNames[kNumOpKinds] = {
    "forward",    "backward", "optimizer", "all_gather", "reduce_scatter",
    "all_reduce", "h2d",      "d2h",       "other"};
}

const char* op_kind_name(OpKind k) { return kOpNames[static_cast<int>(k)]; }

OpKind classify_op(const std::string& op) {
  std::string base = op.substr(0, op.find_first_of(":."));
  for (int i = 0; i < kNumOpKinds - 1; ++i)
    if (base == kOpNames[i]) return static_cast<OpKind>(i);
  return OpKind::other;
}

bool is_collective(OpKind k) {
  return k == OpKind::all_gather || k == OpKind::reduce_scatter || k == OpKind::all_reduce;
}

double bus_factor(OpKind k, int n) {
  if (n < 1) return 0;
  switch (k) {
    case OpKind::all_reduce: return 2.0 * (n - 1) / n;
    case OpKind::all_gather:
    case OpKind::reduce_scatter: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

Bandwidth collective_bandwidth(OpKind k, int64_t bytes, int64_t duration_ns, int n) {
  Bandwidth b;
  if (duration_ns <= 0) return b;
  b.algbw = static_cast<double>(bytes) / (static_cast<double>(duration_ns) * 1e-9);
  b.busbw = b.algbw * bus_factor(k, n);
  return b;
}

}  // namespace shardlab::viewer
