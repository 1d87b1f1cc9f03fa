// The flight.json entries of ranks ended with the job (flight_file.hpp).
#include "core/comm/flight_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <exception>

#include "core/base/file_io.hpp"
#include "core/base/json_read.hpp"
#include "core/trace/recorder.hpp"

namespace shardlab {

namespace {

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

// Holds an exclusive flock on a directory while alive (nothing when it cannot be opened).
class DirLock {
 public:
  explicit DirLock(const std::string& dir)
      : fd_(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~DirLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_;
};

}  // namespace

std::string what_the_rank_was_doing(const FlightRecorder& flight) {
  const std::vector<CollectiveRecord> records = flight.records();
  // The oldest still in flight is the one the rank waits on: with prefetch, later all-gathers are
  // issued before it, and collectives complete in order.
  for (const CollectiveRecord& r : records)
    if (r.state == CollectiveRecord::State::issued) return "waiting in " + describe(r);
  const CollectiveRecord done = flight.last_completed();
  return done.seq == 0 ? std::string("busy before its first collective")
                       : "busy outside collectives since " + describe(done);
}

bool add_terminated_rank_to_flight_file(const std::string& path, int signal,
                                        const FlightRecorder& flight) {
  if (path.empty()) return false;
  try {
    nlohmann::json entry = flight.to_json();
    entry["terminated_by"] = signal_name(signal);
    entry["doing"] = what_the_rank_was_doing(flight);
    DirLock lock(parent_dir(path));
    nlohmann::json file;
    if (path_exists(path)) {
      try {
        file = parse_json_strict(read_text_file(path, int64_t(64) << 20), path);
      } catch (const std::exception&) {
        file = nlohmann::json();  // damaged or half-written by someone else: start over
      }
    }
    if (!file.is_object() || !file.contains("ranks") || !file.at("ranks").is_array()) {
      file = {{"reason", std::string("the job was torn down (") + signal_name(signal) +
                             "): another rank failed or was killed, or the job was stopped; "
                             "the ranks listed were alive until then, a rank missing from the "
                             "list is the one that ended first"},
              {"backend", "mpi"},
              {"time_ns", trace_now_ns()},
              {"ranks", nlohmann::json::array()}};
    }
    for (const nlohmann::json& r : file.at("ranks"))
      if (r.is_object() && r.contains("rank") && r.at("rank") == flight.rank()) return true;
    file["ranks"].push_back(std::move(entry));
    write_file_atomic(path, file.dump(1) + "\n", "flight record");
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace shardlab
