// Back buffer to PNG (see screenshot.hpp).
#include "viewer/app/screenshot.hpp"

#include <cstring>
#include <vector>

#include <GLFW/glfw3.h>
#include <stb_image_write.h>

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
  if (!stbi_write_png(path.c_str(), width, height, 3, flipped.data(), static_cast<int>(row))) {
    *error = path + ": cannot write PNG";
    return false;
  }
  return true;
}

}  // namespace shardlab::viewer
