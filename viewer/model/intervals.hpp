// Interval arithmetic on [begin, end) times in ns, and exposed communication: the time a rank's
// collectives run while none of its compute does (what overlap failed to hide).
#pragma once

#include <cstdint>
#include <vector>

#include "core/trace/run_reader.hpp"

namespace shardlab::viewer {

struct Interval {
  int64_t begin = 0, end = 0;
  bool operator==(const Interval& o) const { return begin == o.begin && end == o.end; }
};

// Sorted, disjoint, non-empty intervals covering the same time as the input.
std::vector<Interval> union_of(std::vector<Interval> v);
// a minus b, both unions (sorted, disjoint).
std::vector<Interval> subtract(const std::vector<Interval>& a, const std::vector<Interval>& b);
// The parts of a union inside [lo, hi).
std::vector<Interval> clip(const std::vector<Interval>& u, int64_t lo, int64_t hi);
int64_t total_length(const std::vector<Interval>& u);

struct ExposedComm {
  std::vector<Interval> comm;     // union of comm spans [t_start, t_end)
  std::vector<Interval> compute;  // union of compute spans
  std::vector<Interval> exposed;  // comm minus compute
  int64_t comm_ns = 0;
  int64_t exposed_ns = 0;
  // Share of communication time hidden under compute: 1 - exposed/comm (1 when there is no comm).
  double overlap() const {
    return comm_ns > 0 ? 1.0 - static_cast<double>(exposed_ns) / comm_ns : 1.0;
  }
};
ExposedComm exposed_comm(const std::vector<SpanEvent>& spans);
// The same restricted to [lo, hi) (one step).
ExposedComm exposed_comm_in(const ExposedComm& all, int64_t lo, int64_t hi);

}  // namespace shardlab::viewer
