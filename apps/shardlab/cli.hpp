// The subcommands of `shardlab` (apps/shardlab/main.cpp), one function each in its cli_*.cpp:
// it declares the subcommand and its options on `app` and returns what to run when the command
// line chose it. run() returns the exit code; library errors (shardlab::Error) propagate and
// main() prints them as one line "shardlab: error: ...".
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/device/cluster_spec.hpp"
#include "core/fsdp/engine_config.hpp"

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
CliCommand add_import_command(CLI::App& app);   // cli_import.cpp
CliCommand add_export_command(CLI::App& app);   // cli_checkpoint.cpp
CliCommand add_inspect_command(CLI::App& app);  // cli_checkpoint.cpp

CliCommand add_simulate_command(CLI::App& app);   // cli_simulate.cpp
CliCommand add_calibrate_command(CLI::App& app);  // cli_calibrate.cpp

// "tiny|small|medium|gpt2", for help texts.
std::string preset_list();

// --nodes, --gpus-per-node and --inter-node-gbps, the changes to --cluster's spec
// (core/device/cluster_spec.hpp), bound to `ov` (cli_simulate.cpp).
void add_cluster_overrides(CLI::App* cmd, ClusterOverrides& ov);

// A subcommand whose one argument is a directory (`shardlab summary RUN_DIR`, `shardlab inspect
// CKPT_DIR`): declares it with its help and runs run(dir) when chosen (cli_summary.cpp).
CliCommand add_directory_command(CLI::App& app, const std::string& name,
                                 const std::string& description, const std::string& dir_name,
                                 const std::string& dir_help,
                                 std::function<int(const std::string&)> run);

// ---- the options `train` and `plan` share (cli_engine_options.cpp) ----------------------------
// --wrap, --hybrid-group, --prefetch, --param-dtype, --reduce-dtype, --accum, --act-ckpt,
// --keep-root, --mem-limit, --offload and --host-mem-limit,
// bound to the one EngineConfig both commands fill: one registration and one parse, so `plan`
// reads them exactly as `train` does; EngineConfig::validate checks them for both. Each command
// words the help for its own use (`plan` plans what `train` runs).
struct EngineOptionHelp {
  std::string group;  // the help's section ("Options": CLI11's default)
  std::string hybrid_group, prefetch, param_dtype, reduce_dtype, accum, act_ckpt, mem_limit;
  std::string wrap;
  std::string offload, host_mem_limit;
  std::string keep_root;
};
// The string-valued options, parsed after CLI11 is done so their errors read like every other one.
struct EngineOptionStrings {
  std::string param_dtype = "f32";
  std::string reduce_dtype = "f32";
  std::string mem_limit = "0";
  std::string offload = "none";
  std::string host_mem_limit = "0";
};
void add_engine_options(CLI::App* cmd, EngineConfig& engine, int& accum, EngineOptionStrings& s,
                        const EngineOptionHelp& help);
// The strings into `engine` (dtypes, --offload, --host-mem-limit) and `mem_limit` (bytes); throws
// InvalidArgument naming the option.
void apply_engine_options(const EngineOptionStrings& s, EngineConfig& engine, int64_t& mem_limit);

// ---- the options of `train`, which `simulate` shares (cli_train.cpp) ----------------------------
struct TrainConfig;
// String options parsed after CLI11 is done, so their errors read like every other one.
struct TrainOptionStrings {
  std::string attention = "naive";
  std::string optimizer = "adamw";
  std::string schedule = "cosine";
  std::string strategy = "full_shard";
  std::string accum_mode = "reduce_each";
  EngineOptionStrings engine;  // --param-dtype, --reduce-dtype, --mem-limit
  std::string slow_rank;
  std::string hang_rank;
  std::string kill_rank;
  std::string on_divergence = "stop";
  std::string trace = "on";
  std::string bind_to = "core";
};
// Every option of `train` bound to `c` (simulate: those a simulation uses).
void add_train_options(CLI::App* cmd, TrainConfig& c, TrainOptionStrings& s, bool simulate);
// The strings into `c`; throws InvalidArgument naming the option.
void apply_train_options(TrainConfig& c, const TrainOptionStrings& s);

}  // namespace shardlab
