// Following a run directory (see live_run.hpp).
#include "viewer/model/live_run.hpp"

#include <chrono>

namespace shardlab::viewer {

LiveRun::LiveRun(std::string dir) : dir_(dir), reader_(std::move(dir), /*wait_for_start=*/true) {
  model_.info.dir = dir_;
  model_.info.name = read_run_info(reader_.data()).name;
}

bool LiveRun::poll_if_due(double now, double interval) {
  if (polled_ && now - last_poll_ < interval) return false;
  polled_ = true;
  last_poll_ = now;
  return poll_now();
}

bool LiveRun::poll_now() {
  ++polls_;
  bool changed = false;
  try {
    changed = reader_.poll();
    status_ = reader_.status();
    if (changed) {
      auto t0 = std::chrono::steady_clock::now();
      model_ = build_run_model(reader_.data());
      last_rebuild_ms_ =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      ++rebuilds_;
    }
  } catch (const std::exception& e) {
    status_ = std::string("viewer: ") + e.what();
  }
  // Shown flagged, never left out silently: events far beyond the run (run_model.hpp).
  const std::string beyond = beyond_note(model_);
  if (!beyond.empty()) status_ += (status_.empty() ? "" : "; ") + beyond;
  return changed;
}

}  // namespace shardlab::viewer
