// Interval unions and exposed communication (see intervals.hpp).
#include "viewer/model/intervals.hpp"

#include <algorithm>

namespace shardlab::viewer {

std::vector<Interval> union_of(std::vector<Interval> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](const Interval& i) { return i.end <= i.begin; }),
          v.end());
  std::sort(v.begin(), v.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.begin <= out.back().end)
      out.back().end = std::max(out.back().end, i.end);
    else
      out.push_back(i);
  }
  return out;
}

std::vector<Interval> subtract(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t j = 0;
  for (const Interval& i : a) {
    int64_t cur = i.begin;
    while (j < b.size() && b[j].end <= cur) ++j;
    size_t k = j;
    while (k < b.size() && b[k].begin < i.end) {
      if (b[k].begin > cur) out.push_back({cur, b[k].begin});
      cur = std::max(cur, b[k].end);
      if (cur >= i.end) break;
      ++k;
    }
    if (cur < i.end) out.push_back({cur, i.end});
  }
  return out;
}

std::vector<Interval> clip(const std::vector<Interval>& u, int64_t lo, int64_t hi) {
  std::vector<Interval> out;
  auto it = std::lower_bound(u.begin(), u.end(), lo,
                             [](const Interval& i, int64_t t) { return i.end <= t; });
  for (; it != u.end() && it->begin < hi; ++it) {
    Interval c{std::max(it->begin, lo), std::min(it->end, hi)};
    if (c.end > c.begin) out.push_back(c);
  }
  return out;
}

int64_t total_length(const std::vector<Interval>& u) {
  int64_t s = 0;
  for (const Interval& i : u) s += i.end - i.begin;
  return s;
}

ExposedComm exposed_comm(const std::vector<SpanEvent>& spans) {
  std::vector<Interval> comm, compute;
  for (const SpanEvent& s : spans)
    if (s.lane != Lane::copy)  // copies between host and device memory are neither
      (s.lane == Lane::comm ? comm : compute).push_back({s.t_start, s.t_end});
  ExposedComm e;
  e.comm = union_of(std::move(comm));
  e.compute = union_of(std::move(compute));
  e.exposed = subtract(e.comm, e.compute);
  e.comm_ns = total_length(e.comm);
  e.exposed_ns = total_length(e.exposed);
  return e;
}

ExposedComm exposed_comm_in(const ExposedComm& all, int64_t lo, int64_t hi) {
  ExposedComm e;
  e.comm = clip(all.comm, lo, hi);
  e.compute = clip(all.compute, lo, hi);
  e.exposed = clip(all.exposed, lo, hi);
  e.comm_ns = total_length(e.comm);
  e.exposed_ns = total_length(e.exposed);
  return e;
}

}  // namespace shardlab::viewer
