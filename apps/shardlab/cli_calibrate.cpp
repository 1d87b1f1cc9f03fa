// `shardlab calibrate`: measure this machine, write a cluster spec (calibrate.hpp).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "apps/shardlab/calibrate.hpp"
#include "apps/shardlab/cli.hpp"
#include "core/base/file_io.hpp"
#include "core/device/cluster_spec.hpp"

namespace shardlab {

CliCommand add_calibrate_command(CLI::App& app) {
  struct Options {
    CalibrateOptions cal;
    std::string out;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "measure this machine (GEMM FLOP/s, copy bandwidth, collective alpha and beta) and write a "
      "cluster spec for `shardlab simulate --cluster FILE`");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--ranks", o->cal.ranks, "ranks the collectives run on (local threads)");
  cmd->add_option("--backend", o->cal.backend, "local | mpi (under mpirun: the MPI world)");
  cmd->add_option("--seconds", o->cal.seconds_per_point, "seconds spent on each measured size");
  cmd->add_option("--link-groups", o->cal.link_groups,
                  "time the collectives on this many groups of ranks at once (r mod G): each "
                  "rank's share of links the groups use together (calibrate.hpp)");
  cmd->add_option("--out", o->out, "write the spec here (default: print it)");
  return {cmd, [o] {
            if (o->cal.backend != "local" && o->cal.backend != "mpi")
              SL_THROW(InvalidArgument, "--backend '", o->cal.backend, "': expected local or mpi");
            // Before minutes of measuring: a destination that cannot be written is refused now.
            if (!o->out.empty()) checked_output_path(o->out, "--out");
            const nlohmann::json spec = calibrate_this_machine(o->cal, std::cerr);
            parse_cluster_spec(spec, "the measured spec");  // what simulate will check
            const std::string text = spec.dump(2) + "\n";
            if (o->out.empty()) {
              std::cout << text;
            } else {
              write_file_atomic(o->out, text, "--out");
              std::cerr << "wrote " << o->out << "\n";
            }
            return 0;
          }};
}

}  // namespace shardlab
