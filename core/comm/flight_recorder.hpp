// FlightRecorder: each rank's last 64 collectives (what, for which unit and step, when, and how
// long the rank waited for the others), kept in a ring so that the collective watchdog can say
// where every rank was when a job stopped making progress, and write it to <run>/flight.json.
// One per rank, shared by the rank's communicators (the world and its splits). Thread-safe: the
// local backend's workers record while another rank's watchdog reads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/dtype.hpp"
#include "core/comm/communicator.hpp"

namespace shardlab {

enum class CommOp : uint8_t;

// How long a rank may wait in one collective before the watchdog stops the job (PyTorch's
// default for NCCL is 10 minutes; a CPU step here takes seconds at most). --collective-timeout.
constexpr double kDefaultCollectiveTimeoutS = 300.0;

struct CollectiveRecord {
  enum class State : uint8_t { issued, done, failed };
  int64_t seq = 0;  // 1, 2, ... per rank, over all its communicators
  CommOp op{};
  int unit = -1;      // CallInfo::unit
  int64_t step = 0;   // the training step it belongs to (set_step), 0 before the first
  int64_t count = 0;  // elements per rank
  DType dtype = DType::f32;
  int group_size = 0;                     // ranks of the communicator
  int64_t t_issue_ns = 0, t_end_ns = -1;  // steady clock (trace_now_ns)
  int64_t wait_ns = -1;                   // waited for the last rank to arrive (-1: unknown)
  State state = State::issued;
};

// "#57 all_gather unit 3 step 7 (4096 x f32, 2 ranks)"
std::string describe(const CollectiveRecord& r);
const char* state_name(CollectiveRecord::State s);

class FlightRecorder {
 public:
  static constexpr int kCapacity = 64;

  explicit FlightRecorder(int rank) : rank_(rank) {}
  int rank() const { return rank_; }

  // The step that collectives issued from now on belong to (the trainer sets it each step).
  void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  int64_t step() const { return step_.load(std::memory_order_relaxed); }

  // Where the watchdog writes flight.json when it fires on this rank ("" = nowhere).
  void set_dump_path(const std::string& path) {
    std::lock_guard<std::mutex> lk(mu_);
    dump_path_ = path;
  }
  std::string dump_path() const {
    std::lock_guard<std::mutex> lk(mu_);
    return dump_path_;
  }

  // A collective was issued; returns its sequence number.
  int64_t issued(CommOp op, const CallInfo& info, int64_t count, DType dtype, int group_size);
  // It ended (ok or failed), with the time this rank waited for the others (-1: unknown).
  void ended(int64_t seq, bool ok, int64_t wait_ns);

  // The kept records, oldest first.
  std::vector<CollectiveRecord> records() const;
  // The newest completed collective; seq 0 when none completed yet.
  CollectiveRecord last_completed() const;
  // The record of `seq`, if it is still kept (seq 0 otherwise).
  CollectiveRecord find(int64_t seq) const;

  nlohmann::json to_json() const;  // {"rank": R, "step": s, "collectives": [...]}

 private:
  int rank_;
  std::atomic<int64_t> step_{0};
  mutable std::mutex mu_;
  std::array<CollectiveRecord, kCapacity> ring_{};
  int64_t next_seq_ = 1;
  int64_t last_done_ = 0;
  std::string dump_path_;
};

nlohmann::json record_to_json(const CollectiveRecord& r);

// Writes <path> atomically (write_file_atomic): the watchdog's reason and every rank's records it
// could see. Returns false (after printing nothing) when the file cannot be written or `path` is
// not a regular file:
// the failure being reported matters more than its dump.
bool write_flight_file(const std::string& path, const std::string& reason,
                       const std::string& backend, double timeout_s,
                       const std::vector<nlohmann::json>& ranks);

}  // namespace shardlab
