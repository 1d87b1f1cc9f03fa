// The per-rank ring of recent collectives and the flight.json dump of the collective watchdog.
#include "core/comm/flight_recorder.hpp"

#include <cstdio>

#include "core/base/file_io.hpp"
#include "core/comm/comm_common.hpp"
#include "core/trace/recorder.hpp"

namespace shardlab {

const char* state_name(CollectiveRecord::State s) {
  switch (s) {
    case CollectiveRecord::State::issued: return "issued";
    case CollectiveRecord::State::done: return "done";
    case CollectiveRecord::State::failed: return "failed";
  }
  return "?";
}

std::string describe(const CollectiveRecord& r) {
  if (r.seq == 0) return "none yet";
  std::string s = "#" + std::to_string(r.seq) + " " + comm_op_name(r.op);
  if (r.unit >= 0) s += " unit " + std::to_string(r.unit);
  s += " step " + std::to_string(r.step);
  if (r.op != CommOp::barrier && r.op != CommOp::split && r.group_size > 0)
    s += " (" + std::to_string(r.count) + " x " + dtype_name(r.dtype) + ", " +
         std::to_string(r.group_size) + " ranks)";
  return s;
}

int64_t FlightRecorder::issued(CommOp op, const CallInfo& info, int64_t count, DType dtype,
                               int group_size) {
  std::lock_guard<std::mutex> lk(mu_);
  CollectiveRecord& r = ring_[static_cast<size_t>(next_seq_ % kCapacity)];
  r = CollectiveRecord{};
  r.seq = next_seq_++;
  r.op = op;
  r.unit = info.unit;
  r.step = step();
  r.count = count;
  r.dtype = dtype;
  r.group_size = group_size;
  r.t_issue_ns = trace_now_ns();
  return r.seq;
}

void FlightRecorder::ended(int64_t seq, bool ok, int64_t wait_ns) {
  std::lock_guard<std::mutex> lk(mu_);
  CollectiveRecord& r = ring_[static_cast<size_t>(seq % kCapacity)];
  if (r.seq != seq) return;  // overwritten: 64 newer collectives were issued meanwhile
  r.state = ok ? CollectiveRecord::State::done : CollectiveRecord::State::failed;
  r.t_end_ns = trace_now_ns();
  r.wait_ns = wait_ns;
  if (ok && seq > last_done_) last_done_ = seq;
}

std::vector<CollectiveRecord> FlightRecorder::records() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<CollectiveRecord> out;
  const int64_t first = std::max<int64_t>(1, next_seq_ - kCapacity);
  for (int64_t s = first; s < next_seq_; ++s)
    out.push_back(ring_[static_cast<size_t>(s % kCapacity)]);
  return out;
}

CollectiveRecord FlightRecorder::find(int64_t seq) const {
  std::lock_guard<std::mutex> lk(mu_);
  const CollectiveRecord& r = ring_[static_cast<size_t>(seq % kCapacity)];
  return r.seq == seq && seq > 0 ? r : CollectiveRecord{};
}

CollectiveRecord FlightRecorder::last_completed() const {
  int64_t seq = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    seq = last_done_;
  }
  return find(seq);
}

nlohmann::json record_to_json(const CollectiveRecord& r) {
  return {{"seq", r.seq},
          {"op", comm_op_name(r.op)},
          {"unit", r.unit},
          {"step", r.step},
          {"count", r.count},
          {"dtype", dtype_name(r.dtype)},
          {"group_size", r.group_size},
          {"t_issue", r.t_issue_ns},
          {"t_end", r.t_end_ns},
          {"wait_ns", r.wait_ns},
          {"state", state_name(r.state)}};
}

nlohmann::json FlightRecorder::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const CollectiveRecord& r : records()) list.push_back(record_to_json(r));
  return {{"rank", rank_}, {"step", step()}, {"collectives", std::move(list)}};
}

bool write_flight_file(const std::string& path, const std::string& reason,
                       const std::string& backend, double timeout_s,
                       const std::vector<nlohmann::json>& ranks) {
  if (path.empty()) return false;
  const nlohmann::json j = {{"reason", reason},
                            {"backend", backend},
                            {"collective_timeout_s", timeout_s},
                            {"time_ns", trace_now_ns()},
                            {"ranks", ranks}};
  try {
    write_file_atomic(path, j.dump(1) + "\n", "flight record");
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

}  // namespace shardlab
