// A run the viewer follows: the run reader plus the model built from what it has read so far.
// The app calls poll_if_due() every frame; the reader is asked for new lines about every 250 ms
// and the model is rebuilt only when something arrived. Never throws: a run that has not
// started, a half-written line or a deleted directory only change status().
#pragma once

#include <cstdint>
#include <string>

#include "core/trace/run_reader.hpp"
#include "viewer/model/run_model.hpp"

namespace shardlab::viewer {

class LiveRun {
 public:
  static constexpr double kPollInterval = 0.25;  // seconds

  explicit LiveRun(std::string dir);

  // Polls when `interval` seconds have passed since the last poll (now is any monotonic clock in
  // seconds). Returns true when the model changed.
  bool poll_if_due(double now, double interval = kPollInterval);
  bool poll_now();

  const std::string& dir() const { return dir_; }
  const RunModel& model() const { return model_; }
  const RunData& data() const { return reader_.data(); }
  // The reader's latest problem, or a model error; empty when all is well.
  const std::string& status() const { return status_; }
  bool started() const { return !reader_.data().meta.empty() || !reader_.data().ranks.empty(); }
  int64_t polls() const { return polls_; }
  int64_t rebuilds() const { return rebuilds_; }
  double last_rebuild_ms() const { return last_rebuild_ms_; }

 private:
  std::string dir_;
  RunReader reader_;
  RunModel model_;
  std::string status_;
  double last_poll_ = 0;
  bool polled_ = false;
  int64_t polls_ = 0, rebuilds_ = 0;
  double last_rebuild_ms_ = 0;
};

}  // namespace shardlab::viewer
