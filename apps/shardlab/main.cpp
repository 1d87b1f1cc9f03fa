// `shardlab`: the command line. Subcommands (each declared in its apps/shardlab/cli_*.cpp):
//   shardlab train [options]          train a GPT on N ranks with any sharding strategy
//   shardlab demo                     DP against FSDP on 4 local ranks, side by side
//   shardlab plan [options]           per-rank memory of each strategy, before running anything
//   shardlab simulate [options]       one rank of N on a cluster: predicted time and memory
//   shardlab calibrate [--out FILE]   measure this machine, write a cluster spec for simulate
//   shardlab summary RUN_DIR          a run directory's summary as tables
//   shardlab inspect CKPT_DIR         what a checkpoint holds; verifies every checksum
//   shardlab export CKPT_DIR OUT      a checkpoint's parameters as one .safetensors file
//   shardlab data encode IN OUT       turn any file into an llm.c .bin shard (one token per byte)
//   shardlab data info FILE           what a data file holds, as the trainer would load it
// Exit codes: 0 ok; 1 failure (library errors become one line "shardlab: error: ..."); 2 usage
// (a bad command line; `plan` also returns 2 when no strategy fits --mem-limit).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "apps/shardlab/cli.hpp"
#include "core/base/error.hpp"
#include "core/base/suggest.hpp"

using namespace shardlab;

int main(int argc, char** argv) {
  CLI::App app{
      "shardlab: an observable FSDP training lab. Trains a GPT-2 style model with hand-written\n"
      "forward and backward passes and shows where every byte of memory goes.\n"};
  app.name("shardlab");
  app.require_subcommand(1);
  app.footer(
      "\nStart with `shardlab demo`, then `shardlab train --help`.\n"
      "Example: shardlab train --model small --data synthetic --steps 300\n"
      "         shardlab summary runs/<the directory train printed>");

  const std::vector<CliCommand> commands = {add_train_command(app),     add_demo_command(app),
                                            add_plan_command(app),      add_summary_command(app),
                                            add_inspect_command(app),   add_export_command(app),
                                            add_data_command(app),      add_simulate_command(app),
                                            add_calibrate_command(app), add_import_command(app)};

  // A mistyped command ("shardlab trian") gets the nearest one, not CLI11's "A subcommand is
  // required".
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CliCommand& c : commands) names.push_back(c.app->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      std::cerr << "shardlab: unknown command '" << argv[1] << "'" << did_you_mean(argv[1], names)
                << "; the commands are " << list << " (shardlab --help)\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help (rc 0) or the usage error
    return rc == 0 ? 0 : 2;
  }

  try {
    for (const CliCommand& c : commands)
      if (*c.app) return c.run();
  } catch (const std::bad_alloc&) {
    // Sizes are checked before anything large is allocated; this is the backstop (ulimit -v).
    std::cerr << "shardlab: error: out of memory: an allocation failed (std::bad_alloc); the "
                 "process may be limited (ulimit -v) below what this command needs\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "shardlab: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
