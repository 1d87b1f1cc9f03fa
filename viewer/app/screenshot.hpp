// Reading the frame just rendered and saving it as a PNG (for tests and docs): the back buffer is
// read before glfwSwapBuffers (glReadBuffer(GL_BACK) + glReadPixels), rows are flipped (GL's
// origin is bottom-left), and stb_image_write (from Debian's libstb) writes the file.
#pragma once

#include <string>

namespace shardlab::viewer {

// Returns false (and sets *error) when the pixels cannot be read or the file written.
bool save_back_buffer_png(int width, int height, const std::string& path, std::string* error);

}  // namespace shardlab::viewer
