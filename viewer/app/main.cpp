// shardlab-viewer: opens one or more run directories and shows per-rank memory by category, the
// compute and communication timeline, FSDP unit states and a summary; follows runs live while
// training writes them. Structure of Dear ImGui's GLFW + OpenGL3 example: options, init, loop
// (poll, new frame, panels, render, swap), shutdown in reverse. The panels are in panels/, one file
// each; batch and screenshot modes in batch.cpp and screenshot.cpp; the aggregation and layout
// math in viewer/model/ (shardlab_viewer_core), tested without a window.
#include <climits>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <CLI/CLI.hpp>

#include "core/base/file_io.hpp"
#include "viewer/app/batch.hpp"
#include "viewer/app/marks.hpp"
#include "viewer/app/panels/panels.hpp"
#include "viewer/app/screenshot.hpp"
#include "viewer/app/view_control.hpp"
#include "viewer/app/viewer_state.hpp"

namespace shardlab::viewer {
namespace {

struct Options {
  std::vector<std::string> runs;
  int at_step = -1;
  int width = 1600, height = 1000;
  bool overlay = false;
  std::vector<Mark> marks;
  BatchOptions batch;
};

int g_glfw_error = 0;
std::string g_glfw_error_text;
void on_glfw_error(int code, const char* text) {
  g_glfw_error = code;
  g_glfw_error_text = text ? text : "";
}

int run_viewer(const Options& opt) {
  // ---- init
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit()) {
    if (g_glfw_error == GLFW_PLATFORM_ERROR)
      std::fprintf(stderr,
                   "shardlab-viewer: no display (GLFW error %d): run under xvfb-run or with "
                   "DISPLAY set\n  (%s)\n",
                   g_glfw_error, g_glfw_error_text.c_str());
    else
      std::fprintf(stderr, "shardlab-viewer: cannot start GLFW (GLFW error %d: %s)\n", g_glfw_error,
                   g_glfw_error_text.c_str());
    return 2;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GL_TRUE);
  std::string title = "shardlab-viewer: ";
  for (size_t i = 0; i < opt.runs.size(); ++i) title += (i ? " vs " : "") + opt.runs[i];
  GLFWwindow* window = glfwCreateWindow(opt.width, opt.height, title.c_str(), nullptr, nullptr);
  if (!window) {
    std::fprintf(stderr,
                 "shardlab-viewer: cannot open a window with an OpenGL 3.3 core context "
                 "(GLFW error %d: %s)\n",
                 g_glfw_error, g_glfw_error_text.c_str());
    glfwTerminate();
    return 3;
  }
  glfwMakeContextCurrent(window);
  BatchMode batch(opt.batch);
  glfwSwapInterval(batch.active() ? 0 : 1);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // the layout is computed, nothing to remember
  ImGui::StyleColorsDark();
  ImGui::GetStyle().WindowRounding = 0;
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");

  ViewerState s;
  s.time = TimeView(static_cast<int>(opt.runs.size()));
  s.overlay_ranks = opt.overlay;
  s.marks = opt.marks;
  s.requested_step = opt.at_step;
  for (const std::string& dir : opt.runs) {
    RunView rv;
    rv.run = std::make_unique<LiveRun>(dir);
    rv.run->poll_now();
    s.runs.push_back(std::move(rv));
  }

  // ---- loop
  while (!glfwWindowShouldClose(window)) {
    if (batch.active())
      glfwPollEvents();
    else
      glfwWaitEventsTimeout(LiveRun::kPollInterval);  // wakes on input, else at the next poll
    s.now = glfwGetTime();
    for (RunView& r : s.runs) r.run->poll_if_due(s.now);
    batch.wait_for_steps(s);

    batch.frame_started();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    batch.place_mouse(io);
    ImGui::NewFrame();
    s.hover_rel_x = NAN;  // the time canvases set it again while hovered
    apply_view(s, io.DisplaySize.x, io.DisplaySize.y);
    show_toolbar_panel(s);
    show_memory_panel(s);
    show_timeline_panel(s);
    show_units_panel(s);
    show_summary_panel(s);
    draw_marks(s);
    ImGui::Render();
    batch.frame_built();

    int fb_w, fb_h;
    glfwGetFramebufferSize(window, &fb_w, &fb_h);
    glViewport(0, 0, fb_w, fb_h);
    glClearColor(0.06f, 0.06f, 0.07f, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    if (batch.frame_rendered(s, window)) break;  // the last batch frame, captured before the swap
    glfwSwapBuffers(window);
  }

  // ---- shutdown, in reverse
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return batch.exit_code();
}

}  // namespace
}  // namespace shardlab::viewer

int main(int argc, char** argv) {
  shardlab::viewer::Options opt;
  shardlab::viewer::BatchOptions& batch = opt.batch;
  CLI::App app{
      "shardlab-viewer: per-rank memory by category, compute/communication timelines and FSDP "
      "unit states of ShardLab run directories, live while training writes them or replayed.\n"
      "Two or more directories are shown side by side on the same scales (compare mode)."};
  app.add_option("runs", opt.runs, "run directories (e.g. runs/dp runs/fsdp)")->required();
  app.add_option("--screenshot", batch.screenshot,
                 "render --frames frames, save the last as this PNG (with a .json of panel "
                 "rectangles next to it) and exit");
  app.add_option("--report", batch.report, "where to write the screenshot's JSON report");
  // Every number is range-checked: --frames -1 used to mean "interactive", an endless loop under
  // a script; a zero or huge window fails deep inside GLFW.
  app.add_option("--frames", batch.frames,
                 "render this many frames and exit (prints the mean frame time); default 3 with "
                 "--screenshot")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--at-step", opt.at_step, "show this step (zoomed to it) instead of the whole run")
      ->check(CLI::Range(0, INT_MAX));
  app.add_option("--until-steps", batch.until_steps,
                 "with --frames: start counting frames once every run has this many steps")
      ->check(CLI::Range(0, INT_MAX));
  app.add_option("--timeout", batch.timeout_s, "seconds to wait for --until-steps")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--width", opt.width, "window width")
      ->check(CLI::Range(64, 16384))
      ->capture_default_str();
  app.add_option("--height", opt.height, "window height")
      ->check(CLI::Range(64, 16384))
      ->capture_default_str();
  app.add_flag("--overlay", opt.overlay, "memory of all ranks overlaid in one plot (totals)");
  std::vector<std::string> mark_specs;
  app.add_option("--mark", mark_specs,
                 "draw a numbered callout N on PANEL (memory, compute, comm, units) at ROW (a "
                 "rank, or a unit of the units panel's rank) and trace time T_NS (the events' "
                 "ns clock), in run RUN (0 = the first directory): N:PANEL:ROW:T_NS[:RUN]; "
                 "repeatable");
  app.add_option("--mouse", batch.mouse, "with --frames: put the mouse at X Y (shows that tooltip)")
      ->expected(2);
  CLI11_PARSE(app, argc, argv);
  if (!batch.screenshot.empty() && batch.frames <= 0) batch.frames = 3;
  for (const std::string& spec : mark_specs) {
    shardlab::viewer::Mark m;
    std::string err;
    if (!shardlab::viewer::parse_mark(spec, &m, &err)) {
      std::fprintf(stderr, "shardlab-viewer: %s\n", err.c_str());
      return 2;
    }
    if (m.run >= static_cast<int>(opt.runs.size())) {
      std::fprintf(stderr, "shardlab-viewer: --mark '%s': run %d, but only %zu run directories\n",
                   spec.c_str(), m.run, opt.runs.size());
      return 2;
    }
    opt.marks.push_back(m);
  }
  try {
    // The run directories' files are this command's inputs: no output may land on one of them.
    shardlab::InputScope inputs;
    // Checked before a window opens; checked again when written (file_io.hpp).
    if (!batch.screenshot.empty()) {
      shardlab::checked_output_path(batch.screenshot, "--screenshot");
      shardlab::checked_output_path(batch.report.empty()
                                        ? shardlab::viewer::default_report_path(batch.screenshot)
                                        : batch.report,
                                    "--report");
    } else if (!batch.report.empty()) {
      std::fprintf(stderr,
                   "shardlab-viewer: --report needs --screenshot (the report describes it)\n");
      return 2;
    }
    return shardlab::viewer::run_viewer(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardlab-viewer: %s\n", e.what());
    return 1;
  }
}
