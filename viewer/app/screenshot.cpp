// Screenshot mode: back buffer to PNG, and the JSON report (see screenshot.hpp).
#include "viewer/app/screenshot.hpp"

#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include <GLFW/glfw3.h>
#include <stb_image_write.h>
#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"
#include "viewer/model/colors.hpp"

namespace shardlab::viewer {

bool save_back_buffer_png(int width, int height, const std::string& path, std::string* error) {
  if (width <= 0 || height <= 0) {
    *error = "empty framebuffer";
    return false;
  }
  const size_t row = static_cast<size_t>(width) * 3;
  std::vector<unsigned char> pixels(row * height), flipped(row * height);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, width, height, GL_RGB, GL_UNSIGNED_BYTE, pixels.data());
  if (GLenum e = glGetError(); e != GL_NO_ERROR) {
    *error = "glReadPixels failed with GL error " + std::to_string(e);
    return false;
  }
  for (int y = 0; y < height; ++y)
    std::memcpy(&flipped[row * y], &pixels[row * (height - 1 - y)], row);
  // Encoded in memory, then written as every output of the project is (core/base/file_io.hpp):
  // beside the destination, renamed over it only if it is absent or a regular file.
  std::string png;
  auto append = [](void* ctx, void* data, int size) {
    static_cast<std::string*>(ctx)->append(static_cast<const char*>(data),
                                           static_cast<size_t>(size));
  };
  if (!stbi_write_png_to_func(append, &png, width, height, 3, flipped.data(),
                              static_cast<int>(row))) {
    *error = path + ": cannot encode the PNG";
    return false;
  }
  try {
    write_file_atomic(path, png, "--screenshot");
  } catch (const std::exception& e) {
    *error = e.what();
    return false;
  }
  return true;
}

namespace {
nlohmann::json rgb(Rgba c) { return {c.r, c.g, c.b}; }
}  // namespace

void write_report(const std::string& path, const ViewerState& s, int win_w, int win_h, int fb_w,
                  int fb_h, const FrameStats& stats) {
  nlohmann::json j;
  j["window"] = {win_w, win_h};
  j["framebuffer"] = {fb_w, fb_h};
  j["frames"] = stats.frames;
  j["mean_ui_ms"] = stats.ui_ms;
  j["mean_render_ms"] = stats.gl_ms;
  j["vertices"] = stats.vertices;
  j["selected_step"] = s.selected_step;
  j["ns_per_px"] = s.time.ns_per_px();
  j["panels"]["toolbar"] = rect_json(s.layout.toolbar);
  j["panels"]["summary"] = rect_json(s.layout.summary);
  j["panels"]["summary_plot"] = rect_json(s.summary_plot);
  for (size_t i = 0; i < s.runs.size(); ++i) {
    const RunView& r = s.runs[i];
    const RunModel& m = r.run->model();
    nlohmann::json pr = {{"dir", r.run->dir()},
                         {"name", m.info.name},
                         {"memory", rect_json(s.layout.runs[i].memory)},
                         {"timeline", rect_json(s.layout.runs[i].timeline)},
                         {"units", rect_json(s.layout.runs[i].units)},
                         {"memory_plot", rect_json(r.memory_plot)},
                         {"timeline_plot", rect_json(r.timeline_plot)},
                         {"units_plot", rect_json(r.units_plot)},
                         {"ranks", m.ranks.size()},
                         {"steps", m.steps.size()},
                         {"events", m.n_events},
                         {"finished", m.finished},
                         {"status", r.run->status()},
                         {"rebuild_ms", r.run->last_rebuild_ms()},
                         {"axis_t_begin", s.time.axis(static_cast<int>(i)).t_begin()},
                         {"axis_t_end", s.time.axis(static_cast<int>(i)).t_end()}};
    pr["host_rows"] = nlohmann::json::array();
    for (const Rect& h : r.host_rows) pr["host_rows"].push_back(rect_json(h));
    pr["copy_lanes"] = nlohmann::json::array();
    for (const Rect& l : r.copy_lanes) pr["copy_lanes"].push_back(rect_json(l));
    j["panels"]["runs"].push_back(pr);
  }
  for (int k = 0; k < kNumMemCategories; ++k)
    j["colors"]["categories"][mem_category_name(static_cast<MemCategory>(k))] =
        rgb(category_color(static_cast<MemCategory>(k)));
  for (int k = 0; k < kNumOpKinds; ++k)
    j["colors"]["ops"][op_kind_name(static_cast<OpKind>(k))] =
        rgb(op_color(static_cast<OpKind>(k)));
  for (UnitState st :
       {UnitState::sharded, UnitState::gathering, UnitState::unsharded, UnitState::resharded})
    j["colors"]["unit_states"][unit_state_name(st)] = rgb(unit_state_color(st));
  j["colors"]["exposed"] = rgb(kExposedColor);
  j["marks"] = marks_json(s.placed_marks);
  j["summary_rows"] = nlohmann::json::array();
  for (const ViewerState::SummaryRow& r : s.summary_rows)
    j["summary_rows"].push_back(
        {{"name", r.name}, {"cells", r.cells}, {"rect", rect_json(r.rect)}});
  write_file_atomic(path, j.dump(2) + "\n", "--report");
}

std::string default_report_path(const std::string& png) {
  std::string base = png;
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".png") == 0)
    base.resize(base.size() - 4);
  return base + ".json";
}

bool save_screenshot(GLFWwindow* window, const ViewerState& s, const std::string& png,
                     const std::string& report, const FrameStats& stats) {
  int fb_w, fb_h, win_w, win_h;
  glfwGetFramebufferSize(window, &fb_w, &fb_h);
  std::string err;
  if (!save_back_buffer_png(fb_w, fb_h, png, &err)) {
    std::fprintf(stderr, "shardlab-viewer: screenshot: %s\n", err.c_str());
    return false;
  }
  glfwGetWindowSize(window, &win_w, &win_h);
  std::string path = report.empty() ? default_report_path(png) : report;
  try {
    write_report(path, s, win_w, win_h, fb_w, fb_h, stats);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardlab-viewer: report: %s\n", e.what());
    return false;
  }
  std::printf("shardlab-viewer: wrote %s and %s\n", png.c_str(), path.c_str());
  return true;
}

}  // namespace shardlab::viewer
