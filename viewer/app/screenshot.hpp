// Reading the frame just rendered and saving it as a PNG (for tests and docs): the back buffer is
// read before glfwSwapBuffers (glReadBuffer(GL_BACK) + glReadPixels), rows are flipped (GL's
// origin is bottom-left), and stb_image_write (from Debian's libstb) writes the file.
#pragma once

#include <string>

#include "viewer/app/viewer_state.hpp"

namespace shardlab::viewer {

// Returns false (and sets *error) when the pixels cannot be read or the file written.
bool save_back_buffer_png(int width, int height, const std::string& path, std::string* error);

// The JSON written next to a screenshot: window and framebuffer size, frame times, the panel and
// plot rectangles of every run (where the tests look for each panel's colours), steps, events and
// status per run, the time axes, and the colour tables.
void write_report(const std::string& path, const ViewerState& s, int win_w, int win_h, int fb_w,
                  int fb_h, int frames, double ui_ms, double gl_ms, int64_t vertices);
// "shot.png" -> "shot.json".
std::string default_report_path(const std::string& png);

}  // namespace shardlab::viewer
