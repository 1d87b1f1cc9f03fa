// Hover tooltips: a rank's memory by category at a time, and one span's details (op, unit, bytes,
// dtype, duration, queueing, algbw and busbw, exposed part).
#pragma once

#include <cstdint>

#include "viewer/model/run_model.hpp"

namespace shardlab::viewer {

// host: the rank's host tier (--offload) instead of its device memory.
void memory_tooltip(const RunModel& m, int rank, int64_t t, bool host = false);
void span_tooltip(const RunModel& m, const RunData& data, int rank, const Bar& bar);

}  // namespace shardlab::viewer
