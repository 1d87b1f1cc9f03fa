// Error helpers: the thread's rank and the message format shared by every check.
#include "core/base/error.hpp"

#include <cstring>

namespace shardlab {

namespace {
thread_local int t_rank = -1;
}

void set_thread_rank(int rank) { t_rank = rank; }
int thread_rank() { return t_rank; }

std::string rank_prefix() {
  return t_rank >= 0 ? "rank " + std::to_string(t_rank) + ": " : std::string();
}

namespace detail {

std::string short_file(const char* file) {
  // Keep the path from the first project folder on; absolute build paths say nothing useful.
  for (const char* root : {"core/", "apps/", "lessons/", "bench/", "viewer/", "tests/"}) {
    if (const char* p = std::strstr(file, root)) return p;
  }
  return file;
}

void throw_check(const char* kind, const char* expr, const std::string& msg, const char* file,
                 int line) {
  std::string text = rank_prefix();
  if (!msg.empty()) text += msg + ": ";
  text += "check `" + std::string(expr) + "` failed (" + short_file(file) + ":" +
          std::to_string(line) + ")";
  (void)kind;
  throw InvalidArgument(text);
}

}  // namespace detail
}  // namespace shardlab
