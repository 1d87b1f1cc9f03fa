// Batch mode: waiting for steps, the pointer, frame times, the last frame (see batch.hpp).
#include "viewer/app/batch.hpp"

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <string>

#include <GLFW/glfw3.h>

#include "viewer/app/screenshot.hpp"

namespace shardlab::viewer {

namespace {
bool all_runs_have_steps(const ViewerState& s, int k) {
  for (const RunView& r : s.runs)
    if (r.run->model().summary.n_steps < k) return false;
  return true;
}
}  // namespace

void BatchMode::wait_for_steps(const ViewerState& s) {
  if (!active()) return;
  if (t_first_ < 0) t_first_ = s.now;
  ready_ = opt_.until_steps <= 0 || all_runs_have_steps(s, opt_.until_steps);
  if (!ready_ && s.now - t_first_ > opt_.timeout_s) {
    std::fprintf(stderr, "shardlab-viewer: timed out after %.0f s waiting for %d steps\n",
                 opt_.timeout_s, opt_.until_steps);
    exit_code_ = 4;
    ready_ = true;
  }
}

void BatchMode::place_mouse(ImGuiIO& io) const {
  if (!active()) return;
  io.MousePos =
      opt_.mouse.size() == 2 ? ImVec2(opt_.mouse[0], opt_.mouse[1]) : ImVec2(-FLT_MAX, -FLT_MAX);
}

void BatchMode::frame_started() { t0_ = Clock::now(); }
void BatchMode::frame_built() { t1_ = Clock::now(); }

bool BatchMode::frame_rendered(const ViewerState& s, GLFWwindow* window) {
  if (!active()) return false;
  glFinish();  // render time is OpenGL's work done, not queued
  auto t2 = Clock::now();
  if (!ready_) return false;
  ++frames_done_;
  if (frames_done_ > 2) {  // the first frames build fonts and settle the layout
    ui_ms_sum_ += std::chrono::duration<double, std::milli>(t1_ - t0_).count();
    gl_ms_sum_ += std::chrono::duration<double, std::milli>(t2 - t1_).count();
    ++frames_timed_;
  }
  if (frames_done_ < opt_.frames) return false;

  int fb_w, fb_h;
  glfwGetFramebufferSize(window, &fb_w, &fb_h);
  FrameStats stats;
  stats.frames = frames_done_;
  stats.ui_ms = frames_timed_ ? ui_ms_sum_ / frames_timed_ : 0;
  stats.gl_ms = frames_timed_ ? gl_ms_sum_ / frames_timed_ : 0;
  stats.vertices = ImGui::GetDrawData()->TotalVtxCount;
  double rebuild = 0;
  for (const RunView& r : s.runs) rebuild = std::max(rebuild, r.run->last_rebuild_ms());
  std::printf(
      "shardlab-viewer: %d frames at %dx%d: ui %.2f ms, render %.2f ms per frame "
      "(mean of the last %d), %lld vertices; model rebuild %.1f ms\n",
      stats.frames, fb_w, fb_h, stats.ui_ms, stats.gl_ms, frames_timed_,
      static_cast<long long>(stats.vertices), rebuild);
  // A script sees what the toolbar shows: a run's problem (a skipped rank file, a bad
  // world_size) goes to stderr too.
  for (const RunView& r : s.runs)
    if (!r.run->status().empty())
      std::fprintf(stderr, "shardlab-viewer: %s: %s\n", r.run->dir().c_str(),
                   r.run->status().c_str());
  // What was asked for and could not be shown is said, never left out silently.
  for (const PlacedMark& p : s.placed_marks)
    if (!p.shown)
      std::fprintf(stderr,
                   "shardlab-viewer: --mark %d:%s:%d:%lld:%d: not drawn: that point is outside "
                   "its panel (no such row, or its time is not in view)\n",
                   p.mark.number, mark_panel_name(p.mark.panel), p.mark.row,
                   static_cast<long long>(p.mark.t), p.mark.run);
  if (s.requested_step >= 0) {
    // --at-step never applied: the step is in no run (a finished run will not grow one).
    std::string have;
    for (const RunView& r : s.runs) {
      const auto& steps = r.run->model().steps;
      have += (have.empty() ? "" : "; ") + (steps.empty()
                                                ? std::string("no steps")
                                                : "steps " + std::to_string(steps.front().step) +
                                                      " to " + std::to_string(steps.back().step));
    }
    std::fprintf(stderr, "shardlab-viewer: --at-step %d: the run has %s\n", s.requested_step,
                 have.c_str());
    exit_code_ = 2;
    return true;  // no screenshot of a view that is not the one asked for
  }
  if (!opt_.screenshot.empty() && !save_screenshot(window, s, opt_.screenshot, opt_.report, stats))
    exit_code_ = 5;
  return true;
}

}  // namespace shardlab::viewer
