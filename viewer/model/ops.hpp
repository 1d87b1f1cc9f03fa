// Op kinds of trace spans as the viewer groups them (one colour each), and the bandwidth of a
// collective as nccl-tests define it: algbw = bytes / time, busbw = algbw * bus_factor(op, n).
#pragma once

#include <cstdint>
#include <string>

namespace shardlab::viewer {

enum class OpKind : uint8_t {
  forward = 0,
  backward,
  optimizer,
  all_gather,
  reduce_scatter,
  all_reduce,
  h2d,  // a copy up from the host tier (--offload), on the copy lane
  d2h,  // a copy down to the host tier
  other,
};
inline constexpr int kNumOpKinds = 9;

const char* op_kind_name(OpKind k);
// "forward", "all_gather", ... map to their kind; a suffix after ':' or '.' is ignored
// ("forward:attn" is forward); anything else (broadcast, loss, ...) is OpKind::other.
OpKind classify_op(const std::string& op);
bool is_collective(OpKind k);

// nccl-tests' bus factor for n ranks: 2(n-1)/n for all_reduce, (n-1)/n for all_gather and
// reduce_scatter (bytes = the full buffer), 1 for anything else; 0 when n < 1.
double bus_factor(OpKind k, int n);

struct Bandwidth {
  double algbw = 0;  // bytes per second
  double busbw = 0;  // bytes per second
};
// Bandwidth of one collective of `bytes` (the full buffer) that took `duration_ns` on `n` ranks.
// Zero when the duration is not positive.
Bandwidth collective_bandwidth(OpKind k, int64_t bytes, int64_t duration_ns, int n);

}  // namespace shardlab::viewer
