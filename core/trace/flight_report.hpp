// What a run directory's flight.json says about how the run ended, for `shardlab summary`. The
// file is written when a run does not end by itself: by the watchdog when a collective waits past
// --collective-timeout (every rank's recent collectives, with the report naming the ranks that did
// not arrive), or by the survivors of a rank that died under mpirun (each adds what it was doing
// when the job was torn down; core/comm/flight_file.hpp). A rank missing from the file is the one
// that ended first, or one that could not write before it was killed.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace shardlab {

struct FlightRank {
  int rank = -1;
  int step = -1;         // -1 when not recorded
  std::string doing;     // "waiting in #25 all_gather unit 1 step 3 (...)", or derived
  std::string ended_by;  // "SIGTERM" for a rank ended with the job, "" for the watchdog's
  bool answered = true;  // false: under MPI, a rank that did not answer the watchdog's probe
};

struct FlightReport {
  std::string path;
  std::string reason;  // the file's "reason": the watchdog's report or the tear-down's
  std::string backend;
  std::vector<FlightRank> ranks;  // in rank order
};

// Reads DIR/flight.json; nullopt when the run has none. Throws IoError naming the file (and the
// field) when it is there but unreadable or malformed.
std::optional<FlightReport> read_flight_report(const std::string& run_dir);

// "how the run ended" lines: the reason's first line, then one line per rank of `world_size`
// (ranks absent from the file named as such). Ranks outside [0, world_size) are listed as found.
void print_flight_report(const FlightReport& f, int world_size, std::ostream& os);

}  // namespace shardlab
