// libFuzzer: a cluster spec's text, read as `simulate --cluster FILE` reads it (the strict parse,
// then every field against its range), and the cost model on every spec that is accepted.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/error.hpp"
#include "core/base/json_read.hpp"
#include "core/comm/topology.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/device/device_model.hpp"

using namespace shardlab;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const ClusterSpec s = parse_cluster_spec(parse_json_strict(text, "fuzz"), "fuzz");
    // An accepted spec must price anything without wrapping: each answer is a time, or a refusal.
    const int ranks = s.total_ranks() < 64 ? s.total_ranks() : 64;
    std::vector<int> world(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) world[static_cast<size_t>(r)] = r;
    const GroupPlacement g = place_group(s, world);
    for (CommOp op : {CommOp::all_gather, CommOp::reduce_scatter, CommOp::all_reduce,
                      CommOp::broadcast, CommOp::barrier})
      for (int64_t bytes : {int64_t(0), int64_t(4096), int64_t(1) << 30}) try {
          if (collective_ns(s, g, op, bytes) < 0) __builtin_trap();
        } catch (const InvalidArgument&) {
        }
    try {
      if (gemm_ns(s, GemmMath::bf16, 4096, 4096, 4096) < 0) __builtin_trap();
      if (memory_ns(s, int64_t(1) << 30) < 0) __builtin_trap();
    } catch (const InvalidArgument&) {
    }
    s.compute_share(ranks);
    try {
      s.check_ranks(ranks);
    } catch (const InvalidArgument&) {
    }
  } catch (const Error&) {
    // A clear refusal is the right answer to a bad spec.
  }
  return 0;
}
