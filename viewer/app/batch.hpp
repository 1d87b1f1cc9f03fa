// Batch mode (--frames N, and --screenshot, which implies it): the viewer renders N frames as fast
// as it can and exits, for scripts, tests and measurements. It may first wait until every run has
// --until-steps steps (at most --timeout seconds); its frames put the mouse at --mouse or nowhere,
// so an Xvfb cursor leaves no tooltip; the frames after the first two are timed (ui: building the
// frame, render: OpenGL up to glFinish). After the last frame it prints the means and each run's
// problem line, and saves the screenshot (screenshot.hpp) before that frame is swapped away.
// Interactive (frames == 0), every call here does nothing.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <imgui.h>

#include "viewer/app/viewer_state.hpp"

struct GLFWwindow;

namespace shardlab::viewer {

struct BatchOptions {
  int frames = 0;  // 0: interactive
  int until_steps = 0;
  double timeout_s = 20;
  std::vector<float> mouse;  // x, y; empty: no mouse
  std::string screenshot;    // PNG of the last frame; empty: none
  std::string report;        // its JSON report; empty: the PNG's name with .json
};

class BatchMode {
 public:
  explicit BatchMode(BatchOptions opt) : opt_(std::move(opt)) {}
  bool active() const { return opt_.frames > 0; }

  // Each frame, after the runs are polled: frames count once every run has --until-steps steps,
  // or after --timeout (then the exit code is 4). The timeout counts from the first call.
  void wait_for_steps(const ViewerState& s);
  // Between the backends' NewFrame and ImGui::NewFrame: overrides the pointer.
  void place_mouse(ImGuiIO& io) const;
  // Around building the frame: from before the backends' NewFrame to after ImGui::Render.
  void frame_started();
  void frame_built();
  // After the draw data is rendered, before the swap: true once the last frame is done (timings
  // printed, screenshot saved); then the loop ends with exit_code().
  bool frame_rendered(const ViewerState& s, GLFWwindow* window);
  int exit_code() const { return exit_code_; }

 private:
  using Clock = std::chrono::steady_clock;
  BatchOptions opt_;
  bool ready_ = false;
  double t_first_ = -1;
  int exit_code_ = 0, frames_done_ = 0, frames_timed_ = 0;
  double ui_ms_sum_ = 0, gl_ms_sum_ = 0;
  Clock::time_point t0_, t1_;
};

}  // namespace shardlab::viewer
