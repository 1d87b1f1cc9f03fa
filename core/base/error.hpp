// Errors: a typed exception hierarchy and the SL_CHECK family, which name the failing expression,
// file:line and the rank of the calling thread (set by the launcher).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace shardlab {

// Every error the project throws. what() is a complete message: "rank 3: what went wrong
// (file:line)".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller broke a precondition (bad argument, bad config, bad file): the user can fix it.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Reading or writing a file failed, or its contents are malformed.
class IoError : public Error {
 public:
  using Error::Error;
};

// A collective was aborted because another rank failed, or ranks disagreed on a call.
class CommError : public Error {
 public:
  using Error::Error;
};

// The rank of the calling thread for messages; -1 outside any rank (no prefix then).
void set_thread_rank(int rank);
int thread_rank();

// "rank R: " when the thread belongs to a rank, else "".
std::string rank_prefix();

namespace detail {

template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  ((os << args), ...);
  return os.str();
}

[[noreturn]] void throw_check(const char* kind, const char* expr, const std::string& msg,
                              const char* file, int line);

}  // namespace detail
}  // namespace shardlab

// SL_CHECK(cond, msg...): throws InvalidArgument "rank R: msg: check `cond` failed (file:line)".
#define SL_CHECK(cond, ...)                                                                       \
  do {                                                                                            \
    if (!(cond))                                                                                  \
      ::shardlab::detail::throw_check(                                                            \
          "InvalidArgument", #cond, ::shardlab::detail::concat(__VA_ARGS__), __FILE__, __LINE__); \
  } while (0)

// SL_THROW(Type, msg...): throws Type with the rank prefix and file:line.
#define SL_THROW(Type, ...)                                                               \
  throw Type(::shardlab::rank_prefix() + ::shardlab::detail::concat(__VA_ARGS__) + " (" + \
             ::shardlab::detail::short_file(__FILE__) + ":" + std::to_string(__LINE__) + ")")

namespace shardlab::detail {
// "core/comm/local_comm.cpp" from an absolute path: messages stay short and stable.
std::string short_file(const char* file);
}  // namespace shardlab::detail
