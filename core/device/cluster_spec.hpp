// Cluster specs: what the simulator needs to know about a cluster (docs/simulate.md). A JSON file,
// or a named preset whose figures come from published datasheets, the source named in the spec.
// The device layer owns it so that the MetaDevice (compute, memory, host link) and, above it, the
// SimCommunicator (links inside and between nodes) read the same spec.
//
//   {"name": "h100-sxm", "source": "...",
//    "nodes": 128, "ranks_per_node": 8,
//    ("devices_per_node": 2, optional: fewer devices than ranks, which then share them)
//    "gpu": {"name": "...", "peak_tflops": {"fp32": 67, "tf32": 494.7, "bf16": 989.4},
//            "memory_GiB": 80, "memory_bandwidth_GBps": 3350},
//    "intra_node": {"bandwidth_GBps": 450, "latency_us": 3},   // per GPU, one direction
//    "inter_node": {"bandwidth_GBps": 50, "latency_us": 6},    // per GPU, one direction
//    (a link may carry "collectives": {"all_gather": [{"up_to_bytes": 2097152,
//     "bandwidth_GBps": 9, "latency_us": 12}, {"bandwidth_GBps": 1.2, "latency_us": 0}], ...}:
//     per-collective alpha-beta regimes, optional; see Link)
//    "host_link":  {"bandwidth_GBps": 64, "latency_us": 10},
//    "host": {"memory_bandwidth_GBps": 76.8},                  // optional: per GPU's share
//    "headroom": {"context_GiB": 1.15, "nccl_GiB_per_communicator": 1,
//                 "fragmentation": 0.017},                     // optional, see Headroom
//    "efficiency": {...}}                                      // optional, see CostModel
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardlab {

// How GEMMs are charged: the device's peak for this math mode.
enum class GemmMath : uint8_t { fp32, tf32, bf16 };
const char* gemm_math_name(GemmMath m);
GemmMath parse_gemm_math(const std::string& s);  // "fp32" | "tf32" | "bf16"; throws InvalidArgument

// One alpha-beta regime of a collective measured on a link: buffers up to `up_to_bytes` (the
// collective's full buffer, as collective_bytes counts it; 0 = no bound, the last regime).
struct LinkRegime {
  double bandwidth = 0;     // bytes/s
  double latency = 0;       // seconds per ring step
  int64_t up_to_bytes = 0;  // this regime serves buffers <= this; 0: every larger buffer
};

struct Link {
  Link() = default;
  Link(double bandwidth_, double latency_) : bandwidth(bandwidth_), latency(latency_) {}
  double bandwidth = 0;  // bytes/s, one direction, per GPU
  double latency = 0;    // seconds per message (alpha)
  // Optional per collective ("collectives": {"all_gather": ..., "reduce_scatter": ...,
  // "all_reduce": ...} in the spec's link), as `shardlab calibrate` fits them: the alpha and beta
  // of the ring formula that reproduce that collective's measured times on this link, in one or
  // more regimes by buffer size (a buffer that stays in the caches copies faster than one from
  // memory). Empty: the link's own alpha and beta. Index: kLinkOps.
  std::vector<LinkRegime> per_op[3];
  static constexpr const char* kLinkOps[3] = {"all_gather", "reduce_scatter", "all_reduce"};
  // The alpha-beta the collective `op` (one of kLinkOps; any other name: the link's own) sees for
  // a buffer of `bytes`.
  Link for_op(const char* op, double bytes) const;
  bool has_op(const char* op) const;
};

// The assumptions of the cost model that are not datasheet figures. Defaults are documented in
// docs/simulate.md; `shardlab calibrate` measures them for this machine.
struct CostModel {
  double gemm_efficiency = 0.8;    // the fraction of peak a large GEMM reaches
  double gemm_half_dim = 64;       // a GEMM dimension d runs at d / (d + this) of that
  double memory_efficiency = 0.8;  // the fraction of memory bandwidth a streaming kernel reaches
  double kernel_launch_us = 4;     // fixed cost of every kernel and GEMM
  // Per kernel (the meta kernel table's names: "adamw", "gelu_forward", ...), the fraction of
  // memory bandwidth that kernel reaches, in place of memory_efficiency. `shardlab calibrate`
  // measures it for each CPU kernel: on a CPU they differ by 2x and more (AdamW streams, GELU
  // computes a tanh per element), so one median misses each of them.
  // A kernel the map lacks takes its stand-in's figure where it has that (device_model.cpp:
  // "adamw_checked", the engine's fused step, takes "adamw"'s in specs calibrated before it).
  std::map<std::string, double> kernel_efficiency;
  // The fraction of this speed (GEMMs and kernels) each rank keeps in a job of more than one
  // rank, where every collective waits for the slowest: `shardlab calibrate` runs an sgemm on all
  // its ranks at once and takes, per 100 ms window, the slowest rank's rate, averaged, over the
  // best window's (0.8 to 0.9 on this project's 2-vCPU machine, whose vCPUs slow down
  // independently). 1: ranks as steady as one (GPUs; the presets).
  double lockstep_compute_efficiency = 1.0;
  double tree_allreduce_max_bytes = 256 * 1024;  // all-reduces up to this size may use a tree
};

// What a GPU holds beyond the bytes the engine's tracker counts, for "fits" (docs/simulate.md,
// "Fits: the GPU's headroom"): the CUDA context with cuBLAS loaded, NCCL's buffers for each
// communicator a rank uses, and the caching allocator's rounding and cached blocks, a fraction of
// the tracked peak. Optional in a spec ("headroom": {"context_GiB", "nccl_GiB_per_communicator",
// "fragmentation"}); a spec without it gets the defaults, a GPU's. `shardlab calibrate` writes
// zeros: the CPU device allocates what the tracker counts, and train's --mem-limit compares the
// tracker's bytes. Sources of the defaults:
//   context 1.15 GiB: docs/gpu.md, one rank on an H100 80GB HBM3 (CUDA 13.0): the driver's used
//     memory minus the pool's reserved bytes, 15.42 - 14.27 GiB.
//   NCCL 1 GiB per communicator: NCCL's default buffers are 9.19 MiB per connection and channel
//     (NCCL_BUFFSIZE 4 MiB + LL128 4.69 MiB + LL 0.5 MiB, src/init.cc), a ring holds 2
//     connections per channel and a tree up to 4, at up to 32 channels on NVLink; NVIDIA/nccl#1685
//     reports 1.06 GB per GPU on 8 x H100 after init. Not measured here (no multi-GPU machine).
//   fragmentation 1.7%: docs/gpu.md, the pool's reserved over the tracker's peak on the H100
//     (14.27 / 14.05 GiB in fp32, 14.68 / 14.43 in bf16: 1.6% and 1.7%).
struct Headroom {
  static constexpr double kDefaultContextGiB = 1.15;
  static constexpr double kDefaultNcclGiB = 1.0;
  static constexpr double kDefaultFragmentation = 0.017;
  int64_t context_bytes = gib(kDefaultContextGiB);
  int64_t nccl_bytes_per_communicator = gib(kDefaultNcclGiB);
  double fragmentation = kDefaultFragmentation;  // of the tracked peak
  static constexpr int64_t gib(double g) {
    return static_cast<int64_t>(g * 1024.0 * 1024.0 * 1024.0 + 0.5);
  }
};

struct ClusterSpec {
  std::string name;
  std::string source;  // where the figures come from
  int nodes = 1;
  int ranks_per_node = 1;
  // The devices a node's ranks compute on (GPUs; for a spec of CPU ranks, the CPUs they may use).
  // Optional ("devices_per_node"); 0: one per rank. A job that puts more ranks on a node than it
  // has devices time-shares them: each rank computes at devices / ranks of its speed (the local
  // backend's N = 4 on 2 cores). The links' figures stay as measured.
  int devices_per_node = 0;
  std::string gpu_name;
  double peak_flops[3] = {0, 0, 0};  // by GemmMath, FLOP/s
  int64_t memory_bytes = 0;          // per GPU
  double memory_bandwidth = 0;       // bytes/s
  Link intra_node, inter_node, host_link;
  // The host memory bandwidth one GPU's share of the host gets (bytes/s): what the host tier's
  // kernels under --offload (the optimizer step on the host) are charged at. Optional in a spec
  // ("host": {"memory_bandwidth_GBps": ...}); without it kDefaultHostMemoryBandwidth.
  double host_memory_bandwidth = kDefaultHostMemoryBandwidth;
  static constexpr double kDefaultHostMemoryBandwidth = 50e9;
  // Whether a nonblocking collective advances while the rank computes (NCCL, the local backend's
  // worker) or only while the rank is inside the library, waiting on it (Open MPI with no progress
  // thread). Optional in a spec ("async_progress": true | false); `shardlab calibrate` measures it.
  bool async_progress = true;
  // Positions per causal block of the attention products the device runs (kernels/attention.hpp):
  // 0, whole sequences, as a GPU runs them; the CPU's blocks for a spec of CPU ranks, which
  // `shardlab calibrate` writes. Optional ("attention_causal_block": an integer >= 0).
  int attention_causal_block = 0;
  Headroom headroom;
  CostModel cost;
  nlohmann::json json;  // the spec as read (written into a simulated run's meta.json)

  double peak(GemmMath m) const { return peak_flops[static_cast<int>(m)]; }
  // The fraction of a device each of a job's `ranks` computes with: 1 unless its node holds more
  // ranks (min(ranks, ranks_per_node)) than devices_per_node.
  double compute_share(int ranks) const;
  int total_ranks() const { return nodes * ranks_per_node; }
  // Checks that `ranks` fits this cluster: >= 1, at most nodes x ranks_per_node, and whole nodes
  // beyond one node. Throws InvalidArgument naming --ranks and the spec.
  void check_ranks(int ranks) const;
};

// Parses a spec; `where` names it in errors ("cluster file x.json"). Every required field must be
// present and every bandwidth, latency-free figure and count positive; throws InvalidArgument
// "WHERE: field 'inter_node.bandwidth_GBps' ..." naming the field.
ClusterSpec parse_cluster_spec(const nlohmann::json& j, const std::string& where);
// A preset name (cluster_preset_names) or a path to a JSON file. "this-machine" is resolved by the
// command line (it measures), not here. Throws InvalidArgument for an unknown name that is not a
// file, IoError / InvalidArgument for a bad file.
ClusterSpec load_cluster_spec(const std::string& name_or_path);

// Changes to a spec from the command line, instead of an edited copy of its JSON: applied to the
// JSON before it is parsed, so each is checked against the same physical range as in a file
// (naming the option) and a simulated run's meta.json records the spec as used. 0: keep.
struct ClusterOverrides {
  int nodes = 0;               // --nodes
  int gpus_per_node = 0;       // --gpus-per-node: ranks_per_node (and devices_per_node if set)
  double inter_node_gbps = 0;  // --inter-node-gbps: the inter-node link per GPU, Gbit/s
  std::string fabric;          // --fabric: the inter-node link by name (fabric_names); "" = keep
  // --headroom: "none" (all zero) or comma-separated changes of the spec's headroom,
  // "context=1GiB,nccl=512MiB,fragmentation=0.05" (parse_headroom_option); "" = keep.
  std::string headroom;
  bool empty() const {
    return nodes == 0 && gpus_per_node == 0 && inter_node_gbps == 0 && fabric.empty() &&
           headroom.empty();
  }
};
// Applies --headroom's text to a spec's JSON ("headroom" object, in the spec's units), so that
// the values are checked as a file's would be; throws InvalidArgument naming --headroom.
void apply_headroom_option(const std::string& text, nlohmann::json& spec);
ClusterSpec load_cluster_spec(const std::string& name_or_path, const ClusterOverrides& ov);
std::vector<std::string> cluster_preset_names();
// The fabrics --fabric names (ndr400, hdr200, roce400, eth100, eth25), each the link between
// nodes per GPU: its rate, and a per-message latency that is an assumption (docs/simulate.md).
std::vector<std::string> fabric_names();
// The preset's JSON text; throws InvalidArgument for an unknown name.
std::string cluster_preset_json(const std::string& name);

}  // namespace shardlab
