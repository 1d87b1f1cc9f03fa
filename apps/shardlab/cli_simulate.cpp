// `shardlab simulate`: `train`'s options plus --cluster and --math; runs run_simulation.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/shardlab/calibrate.hpp"
#include "apps/shardlab/cli.hpp"
#include "apps/shardlab/simulate_command.hpp"
#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/comm/topology.hpp"
#include "core/device/cluster_spec.hpp"

namespace shardlab {

namespace {

std::string cluster_list() {
  std::string s;
  for (const std::string& n : cluster_preset_names()) s += (s.empty() ? "" : " | ") + n;
  return s;
}

const char* kSimulateFooter =
    "\nOne rank of --ranks runs the real engine on a device that holds no memory and does no\n"
    "arithmetic: allocations are tracked exactly, kernels and collectives advance a virtual clock\n"
    "by what the cluster's GPUs and links would take (docs/simulate.md). The run directory has\n"
    "virtual times: `shardlab summary` and the viewer read it as any run.\n"
    "\nExamples:\n"
    "  shardlab simulate --cluster h100-sxm --model gpt2 --ranks 64 --batch 64 --seq 1024\n"
    "  shardlab simulate --cluster h100-sxm --model 7b --ranks 64 --batch 64 --seq 2048 \\\n"
    "      --param-dtype bf16 --reduce-dtype bf16 --act-ckpt\n"
    "  shardlab simulate --cluster a100-40gb --model gpt2 --ranks 32 --batch 32 \\\n"
    "      --strategy hybrid_shard --hybrid-group 8\n"
    "  shardlab simulate --cluster my_cluster.json ...   (format: --print-cluster h100-sxm)\n";

// One JSON line per collective and buffer size: what the simulator charges a group of world
// ranks 0 .. ranks-1 (docs/simulate-validation.md compares these with measured times).
void print_collective_times(const ClusterSpec& spec, int ranks, std::ostream& out) {
  spec.check_ranks(ranks);
  std::vector<int> members(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) members[static_cast<size_t>(r)] = r;
  const GroupPlacement g = place_group(spec, members);
  for (CommOp op : {CommOp::all_gather, CommOp::reduce_scatter, CommOp::all_reduce})
    for (int64_t bytes = 1024; bytes <= (int64_t{256} << 20); bytes *= 4)
      out << nlohmann::json{{"op", comm_op_name(op)},
                            {"bytes", bytes},
                            {"ranks", ranks},
                            {"algorithm", collective_algorithm(spec, g, op, bytes)},
                            {"seconds",
                             1e-9 * static_cast<double>(collective_ns(spec, g, op, bytes))}}
                 .dump()
          << "\n";
}

// The spec `--cluster this-machine` stands for: measured now, briefly, on as many local ranks as
// --ranks asks (at least 2). Progress goes to `log`.
nlohmann::json measure_this_machine(int ranks, std::ostream& log) {
  CalibrateOptions cal;
  cal.quick = true;
  cal.seconds_per_point = 0.05;
  cal.ranks = std::max(2, ranks);
  return calibrate_this_machine(cal, log);
}

// --print-cluster NAME: a preset's JSON as written; a file's spec once it reads as a cluster spec
// (so the printout is a spec simulate accepts); this-machine measured now (progress on stderr).
void print_cluster(const std::string& name, int ranks, std::ostream& out) {
  if (name.empty())
    SL_THROW(InvalidArgument, "--print-cluster '': name a preset (", cluster_list(),
             "), this-machine or a cluster file");
  for (const std::string& p : cluster_preset_names())
    if (name == p) {
      out << cluster_preset_json(name) << "\n";
      return;
    }
  if (name == "this-machine") {
    const nlohmann::json spec = measure_this_machine(ranks, std::cerr);
    parse_cluster_spec(spec, "the measured spec");
    out << spec.dump(2) << "\n";
    return;
  }
  if (!path_exists(name))
    SL_THROW(InvalidArgument, "--print-cluster '", name, "': unknown preset and no such file ",
             "(presets: ", cluster_list(), ", this-machine; or a cluster file)");
  out << load_cluster_spec(name).json.dump(2) << "\n";
}

}  // namespace

void add_cluster_overrides(CLI::App* cmd, ClusterOverrides& ov) {
  cmd->add_option("--nodes", ov.nodes, "change --cluster's node count (0: the spec's)");
  cmd->add_option("--gpus-per-node", ov.gpus_per_node,
                  "change --cluster's GPUs (ranks) per node (0: the spec's)");
  cmd->add_option("--inter-node-gbps", ov.inter_node_gbps,
                  "change --cluster's link between nodes, per GPU, in Gbit/s (400: InfiniBand "
                  "NDR, 200: HDR, 100 or 25: Ethernet; 0: the spec's)");
  std::string fabrics;
  for (const std::string& f : fabric_names()) fabrics += (fabrics.empty() ? "" : " | ") + f;
  cmd->add_option(
      "--fabric", ov.fabric,
      "change --cluster's link between nodes to a fabric: " + fabrics +
          " (InfiniBand NDR / HDR, RoCE, Ethernet over TCP; per GPU; docs/simulate.md)");
  cmd->add_option("--headroom", ov.headroom,
                  "what a GPU holds beyond the tracked peak, for \"fits\": none, or any of "
                  "context=SIZE,nccl=SIZE,fragmentation=FRACTION (NCCL per communicator, "
                  "fragmentation of the peak; default the spec's: presets 1.15GiB, 1GiB, 1.7%)");
}

CliCommand add_simulate_command(CLI::App& app) {
  struct Options {
    TrainConfig cfg;
    TrainOptionStrings str;
    std::string math;
    std::string print_cluster;
    bool collective_times = false;
    ClusterOverrides overrides;
  };
  auto o = std::make_shared<Options>();
  o->cfg.run_dir = "auto";
  o->cfg.steps = 3;
  o->cfg.warmup = 0;
  o->cfg.cluster = "h100-sxm";
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "predict a training step of any model on any cluster: step time, tokens/s, MFU, exposed "
      "communication, peak memory per rank");
  add_train_options(cmd, o->cfg, o->str, true);
  cmd->option_defaults()->group("Cluster");
  cmd->add_option("--cluster", o->cfg.cluster,
                  "a preset (" + cluster_list() +
                      "), this-machine (measured now, as shardlab calibrate does) or a JSON "
                      "cluster spec file");
  cmd->add_option("--math", o->math,
                  "fp32 | tf32 | bf16: the GEMM peak charged (default: bf16 with 16-bit "
                  "parameters, else fp32)");
  add_cluster_overrides(cmd, o->overrides);
  cmd->add_option("--print-cluster", o->print_cluster,
                  "print a cluster's JSON and exit: a preset's (the format of a cluster file), "
                  "a cluster file's once it reads as one, or this-machine's, measured now");
  cmd->add_flag("--collective-times", o->collective_times,
                "print the topology model's time of all_gather, reduce_scatter and all_reduce on "
                "--ranks ranks of --cluster, 1 KiB to 256 MiB, as JSON lines, and exit "
                "(bench/sim_validate.py compares them with bench_collectives)");
  cmd->footer(kSimulateFooter);
  return {cmd, [o, cmd] {
            if (cmd->count("--print-cluster") > 0) {
              print_cluster(o->print_cluster, o->cfg.ranks, std::cout);
              return 0;
            }
            apply_train_options(o->cfg, o->str);
            const EngineConfig& e = o->cfg.engine;
            if (cmd->count("--hybrid-group") > 0 && e.strategy != Strategy::hybrid_shard)
              SL_THROW(InvalidArgument, hybrid_group_unused_message(e.hybrid_group, e.strategy));
            o->cfg.gemm_math = o->math.empty() ? default_gemm_math(e) : parse_gemm_math(o->math);
            if (o->cfg.cluster == "this-machine") {
              if (!o->overrides.empty())
                SL_THROW(InvalidArgument,
                         "--cluster this-machine is measured as it is: --nodes, --gpus-per-node, "
                         "--inter-node-gbps, --fabric and --headroom change a preset or a "
                         "cluster file");
              o->cfg.cluster_spec = std::make_shared<const ClusterSpec>(parse_cluster_spec(
                  measure_this_machine(o->cfg.ranks, std::cout), "this-machine"));
            } else if (!o->overrides.empty()) {
              o->cfg.cluster_spec = std::make_shared<const ClusterSpec>(
                  load_cluster_spec(o->cfg.cluster, o->overrides));
            }
            if (o->collective_times) {
              const ClusterSpec spec =
                  o->cfg.cluster_spec ? *o->cfg.cluster_spec : load_cluster_spec(o->cfg.cluster);
              print_collective_times(spec, o->cfg.ranks, std::cout);
              return 0;
            }
            run_simulation(o->cfg, std::cout);
            return 0;
          }};
}

}  // namespace shardlab
