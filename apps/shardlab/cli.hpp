// The subcommands of `shardlab` (apps/shardlab/main.cpp), one function each in its cli_*.cpp:
// it declares the subcommand and its options on `app` and returns what to run when the command
// line chose it. run() returns the exit code; library errors (shardlab::Error) propagate and
// main() prints them as one line "shardlab: error: ...".
#pragma once

#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace shardlab {

struct CliCommand {
  CLI::App* app = nullptr;  // the subcommand; `*app` is true when it was chosen
  std::function<int()> run;
};

CliCommand add_train_command(CLI::App& app);    // cli_train.cpp
CliCommand add_demo_command(CLI::App& app);     // cli_demo.cpp
CliCommand add_plan_command(CLI::App& app);     // cli_plan.cpp
CliCommand add_data_command(CLI::App& app);     // cli_data.cpp: data encode, data info
CliCommand add_summary_command(CLI::App& app);  // cli_summary.cpp
CliCommand add_export_command(CLI::App& app);   // cli_checkpoint.cpp
CliCommand add_inspect_command(CLI::App& app);  // cli_checkpoint.cpp

// "tiny|small|medium|gpt2", for help texts.
std::string preset_list();

}  // namespace shardlab
