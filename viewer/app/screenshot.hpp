// Screenshot mode (--screenshot, at the end of batch mode): the frame just rendered saved as a PNG
// (for tests and docs) with a JSON report beside it. The back buffer is read before
// glfwSwapBuffers (glReadBuffer(GL_BACK) + glReadPixels), rows are flipped (GL's origin is
// bottom-left), stb_image_write (from Debian's libstb) encodes it, and write_file_atomic writes
// it (a destination that is not a regular file, or one of the runs' files, is refused).
#pragma once

#include <cstdint>
#include <string>

#include "viewer/app/viewer_state.hpp"

struct GLFWwindow;

namespace shardlab::viewer {

// What batch mode measured, for the report.
struct FrameStats {
  int frames = 0;
  double ui_ms = 0, gl_ms = 0;  // mean per timed frame
  int64_t vertices = 0;         // of the last frame
};

// The PNG of the window's back buffer at `png`, and its report at `report` (empty: next to the
// PNG); says where on stdout. False, after saying why on stderr, when the PNG cannot be written.
bool save_screenshot(GLFWwindow* window, const ViewerState& s, const std::string& png,
                     const std::string& report, const FrameStats& stats);

// Returns false (and sets *error) when the pixels cannot be read or the file written.
bool save_back_buffer_png(int width, int height, const std::string& path, std::string* error);

// The JSON written next to a screenshot: window and framebuffer size, frame times, the panel and
// plot rectangles of every run (where the tests look for each panel's colours), steps, events and
// status per run, the time axes, and the colour tables.
void write_report(const std::string& path, const ViewerState& s, int win_w, int win_h, int fb_w,
                  int fb_h, const FrameStats& stats);
// "shot.png" -> "shot.json".
std::string default_report_path(const std::string& png);

}  // namespace shardlab::viewer
