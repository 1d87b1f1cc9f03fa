// SIGTERM from mpirun's teardown: the handler writes one byte to a pipe, a thread does the rest
// (mpi_termination.hpp).
#include "core/comm/mpi/mpi_termination.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <string>

#include "core/comm/flight_file.hpp"

namespace shardlab {

namespace {

// One watch per process (one rank per MPI process): the pipe the handler writes to.
int g_pipe[2] = {-1, -1};
struct sigaction g_previous[2];
constexpr int kSignals[2] = {SIGTERM, SIGINT};

extern "C" void on_termination_signal(int sig) {
  const int saved = errno;
  const char c = static_cast<char>(sig);
  if (g_pipe[1] >= 0) (void)!::write(g_pipe[1], &c, 1);
  errno = saved;
}

}  // namespace

MpiTerminationWatch::MpiTerminationWatch(int rank, FlightRecorder& flight)
    : rank_(rank), flight_(flight) {
  if (g_pipe[0] >= 0 || ::pipe(g_pipe) != 0) return;  // one watch at a time; or no pipe: no watch
  struct sigaction sa {};
  sa.sa_handler = on_termination_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < 2; ++i) ::sigaction(kSignals[i], &sa, &g_previous[i]);
  thread_ = std::thread([this] { wait_for_signal(); });
}

MpiTerminationWatch::~MpiTerminationWatch() {
  if (!thread_.joinable()) return;
  for (int i = 0; i < 2; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  const char stop = 0;
  (void)!::write(g_pipe[1], &stop, 1);
  thread_.join();
  ::close(g_pipe[0]);
  ::close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
}

void MpiTerminationWatch::wait_for_signal() {
  char c = 0;
  for (;;) {
    const ssize_t n = ::read(g_pipe[0], &c, 1);
    if (n == 1) break;
    if (n < 0 && errno == EINTR) continue;
    return;
  }
  if (c == 0) return;  // the watch ends with the rank
  const int sig = c;
  const std::string doing = what_the_rank_was_doing(flight_);
  const std::string path = flight_.dump_path();
  // Said first: mpirun sends SIGKILL soon after SIGTERM (odls_base_sigkill_timeout, 1 s by
  // default), and the line is the part a user reads.
  std::fprintf(stderr,
               "shardlab: rank %d: terminated by %s (mpirun ends the job when a rank fails or is "
               "killed) while %s%s%s\n",
               rank_, sig == SIGTERM ? "SIGTERM" : "SIGINT", doing.c_str(),
               path.empty() ? "" : "; adding its flight record to ", path.c_str());
  std::fflush(stderr);
  if (!path.empty() && !add_terminated_rank_to_flight_file(path, sig, flight_)) {
    std::fprintf(stderr, "shardlab: rank %d: could not write %s\n", rank_, path.c_str());
    std::fflush(stderr);
  }
  ::_exit(128 + sig);
}

}  // namespace shardlab
