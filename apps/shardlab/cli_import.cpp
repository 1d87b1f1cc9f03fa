// `shardlab import`: torch.profiler traces of a PyTorch job as a run directory
// (core/import/torch_trace.hpp), for `shardlab summary` and `shardlab-viewer`.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/shardlab/cli.hpp"
#include "core/import/torch_trace.hpp"

namespace shardlab {

CliCommand add_import_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> traces;
    std::string out;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "import",
      "turn torch.profiler traces of a PyTorch job (one per rank; DDP, FSDP1, FSDP2 on gloo or "
      "NCCL, CPU or GPU) "
      "into a run directory that `shardlab summary` and `shardlab-viewer` read");
  cmd->add_option("traces", o->traces,
                  "the ranks' Chrome traces (export_chrome_trace: .json or .json.gz), or "
                  "directories of them; a subset of the job's ranks is imported as such")
      ->required();
  cmd->add_option("--out", o->out, "the run directory to write (new, or an empty directory)")
      ->required();
  cmd->footer(
      "\nExample: shardlab import traces/ --out runs/my_job && shardlab summary runs/my_job\n"
      "What is read, inferred and left out: docs/import.md.\n");
  return {cmd, [o] {
            const std::vector<int> ranks = import_torch_traces(o->traces, o->out);
            std::cout << "imported " << ranks.size() << " rank" << (ranks.size() == 1 ? "" : "s")
                      << " into " << o->out << " (shardlab summary " << o->out << ")\n";
            return 0;
          }};
}

}  // namespace shardlab
