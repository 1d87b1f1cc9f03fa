// Cluster specs: the presets, the strict reader of a spec file, and the rank-count check.
#include "core/device/cluster_spec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/base/json_read.hpp"
#include "core/base/suggest.hpp"
#include "core/memory/tracker.hpp"

namespace shardlab {

namespace {

// ---- presets ----------------------------------------------------------------------------------
// Figures from the vendors' datasheets, named in "source". Tensor-core peaks are the dense ones
// (the datasheets print twice these, "with sparsity"). Links are per GPU and per direction: the
// datasheets give NVLink and PCIe as both directions together, InfiniBand per port and direction.
// Latencies are not datasheet figures: they are typical per-message costs, marked as such.

// The GPU presets' headroom: Headroom's defaults, whose sources cluster_spec.hpp names.
// (One line: a macro cannot hold a raw string over several lines.)
// clang-format off
#define SHARDLAB_GPU_HEADROOM R"js(  "headroom": {"context_GiB": 1.15, "nccl_GiB_per_communicator": 1, "fragmentation": 0.017, "source": "CUDA context and allocator fragmentation measured with one rank on an H100 (docs/gpu.md); NCCL's buffers from its default sizes, not measured (docs/simulate.md)"})js"
// clang-format on

const char* kH100 = R"({
  "name": "h100-sxm",
  "source": "NVIDIA H100 Tensor Core GPU datasheet (SXM5: FP32 67 TFLOPS, TF32 989 and BF16 1979 TFLOPS with sparsity, i.e. 494.5 and 989.5 dense; 80 GB HBM3 at 3.35 TB/s; NVLink 4 900 GB/s; PCIe Gen5 128 GB/s), NVIDIA DGX H100 datasheet (8 GPUs per node, 8x ConnectX-7 at 400 Gb/s, one per GPU). Latencies are assumptions (typical NCCL per-step latency), not datasheet figures.",
  "nodes": 512,
  "ranks_per_node": 8,
  "gpu": {"name": "H100 SXM5 80GB",
          "peak_tflops": {"fp32": 67, "tf32": 494.5, "bf16": 989.5},
          "memory_GiB": 80, "memory_bandwidth_GBps": 3350},
  "intra_node": {"bandwidth_GBps": 450, "latency_us": 2},
  "inter_node": {"bandwidth_GBps": 50, "latency_us": 5},
  "host_link": {"bandwidth_GBps": 64, "latency_us": 5},
  "host": {"memory_bandwidth_GBps": 76.8,
           "source": "DGX H100: 2x Xeon Platinum 8480C, 8 DDR5-4800 channels each (2 x 307 GB/s), shared by 8 GPUs"},
)" SHARDLAB_GPU_HEADROOM R"(
})";

const char* kA100 = R"({
  "name": "a100-40gb",
  "source": "NVIDIA A100 Tensor Core GPU datasheet (SXM 40GB: FP32 19.5 TFLOPS, TF32 156 and BF16 312 TFLOPS dense; 40 GB HBM2 at 1555 GB/s; NVLink 3 600 GB/s; PCIe Gen4 64 GB/s), NVIDIA DGX A100 datasheet (8 GPUs per node, 8x ConnectX-6 HDR at 200 Gb/s, one per GPU). Latencies are assumptions (typical NCCL per-step latency), not datasheet figures.",
  "nodes": 512,
  "ranks_per_node": 8,
  "gpu": {"name": "A100 SXM4 40GB",
          "peak_tflops": {"fp32": 19.5, "tf32": 156, "bf16": 312},
          "memory_GiB": 40, "memory_bandwidth_GBps": 1555},
  "intra_node": {"bandwidth_GBps": 300, "latency_us": 2},
  "inter_node": {"bandwidth_GBps": 25, "latency_us": 5},
  "host_link": {"bandwidth_GBps": 32, "latency_us": 5},
  "host": {"memory_bandwidth_GBps": 51.2,
           "source": "DGX A100: 2x AMD EPYC 7742, 8 DDR4-3200 channels each (2 x 204.8 GB/s), shared by 8 GPUs"},
)" SHARDLAB_GPU_HEADROOM R"(
})";

const char* kA100_80 = R"({
  "name": "a100-80gb",
  "source": "NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB: FP32 19.5 TFLOPS, TF32 156 and BF16 312 TFLOPS dense; 80 GB HBM2e at 2039 GB/s; NVLink 3 600 GB/s; PCIe Gen4 64 GB/s), NVIDIA DGX A100 datasheet (8 GPUs per node, 8x ConnectX-6 HDR at 200 Gb/s, one per GPU). Latencies are assumptions (typical NCCL per-step latency), not datasheet figures.",
  "nodes": 512,
  "ranks_per_node": 8,
  "gpu": {"name": "A100 SXM4 80GB",
          "peak_tflops": {"fp32": 19.5, "tf32": 156, "bf16": 312},
          "memory_GiB": 80, "memory_bandwidth_GBps": 2039},
  "intra_node": {"bandwidth_GBps": 300, "latency_us": 2},
  "inter_node": {"bandwidth_GBps": 25, "latency_us": 5},
  "host_link": {"bandwidth_GBps": 32, "latency_us": 5},
  "host": {"memory_bandwidth_GBps": 51.2,
           "source": "DGX A100: 2x AMD EPYC 7742, 8 DDR4-3200 channels each (2 x 204.8 GB/s), shared by 8 GPUs"},
)" SHARDLAB_GPU_HEADROOM R"(
})";

const char* kH200 = R"({
  "name": "h200",
  "source": "NVIDIA H200 Tensor Core GPU datasheet (SXM: FP32 67 TFLOPS, TF32 989 and BF16 1979 TFLOPS with sparsity, i.e. 494.5 and 989.5 dense, the H100's; 141 GB HBM3e at 4.8 TB/s; NVLink 4 900 GB/s; PCIe Gen5 128 GB/s), NVIDIA DGX H200 datasheet (8 GPUs per node, 8x ConnectX-7 at 400 Gb/s, one per GPU). Latencies are assumptions (typical NCCL per-step latency), not datasheet figures.",
  "nodes": 512,
  "ranks_per_node": 8,
  "gpu": {"name": "H200 SXM 141GB",
          "peak_tflops": {"fp32": 67, "tf32": 494.5, "bf16": 989.5},
          "memory_GiB": 141, "memory_bandwidth_GBps": 4800},
  "intra_node": {"bandwidth_GBps": 450, "latency_us": 2},
  "inter_node": {"bandwidth_GBps": 50, "latency_us": 5},
  "host_link": {"bandwidth_GBps": 64, "latency_us": 5},
  "host": {"memory_bandwidth_GBps": 76.8,
           "source": "DGX H200: 2x Xeon Platinum 8480C, 8 DDR5-4800 channels each (2 x 307 GB/s), shared by 8 GPUs"},
)" SHARDLAB_GPU_HEADROOM R"(
})";

const char* kB200 = R"({
  "name": "b200",
  "source": "NVIDIA Blackwell datasheet, HGX B200 (per GPU: FP32 75 TFLOPS, TF32 2.2 and BF16 4.5 PFLOPS with sparsity, i.e. 1100 and 2250 dense; 180 GB HBM3e at 7.7 TB/s; NVLink 5 1.8 TB/s; PCIe Gen5 128 GB/s), NVIDIA DGX B200 datasheet (8 GPUs per node, 8x ConnectX-7 at 400 Gb/s, one per GPU). Latencies are assumptions (typical NCCL per-step latency), not datasheet figures.",
  "nodes": 512,
  "ranks_per_node": 8,
  "gpu": {"name": "B200 180GB",
          "peak_tflops": {"fp32": 75, "tf32": 1100, "bf16": 2250},
          "memory_GiB": 180, "memory_bandwidth_GBps": 7700},
  "intra_node": {"bandwidth_GBps": 900, "latency_us": 2},
  "inter_node": {"bandwidth_GBps": 50, "latency_us": 5},
  "host_link": {"bandwidth_GBps": 64, "latency_us": 5},
  "host": {"memory_bandwidth_GBps": 89.6,
           "source": "DGX B200: 2x Xeon Platinum 8570, 8 DDR5-5600 channels each (2 x 358.4 GB/s), shared by 8 GPUs"},
)" SHARDLAB_GPU_HEADROOM R"(
})";

struct Preset {
  const char* name;
  const char* json;
};
const Preset kPresets[] = {{"h100-sxm", kH100},
                           {"h200", kH200},
                           {"b200", kB200},
                           {"a100-40gb", kA100},
                           {"a100-80gb", kA100_80}};

constexpr int64_t kMaxClusterFileBytes = int64_t(16) << 20;

// ---- fabrics: the link between nodes, per GPU (one NIC per GPU, as the DGX nodes have) -------
// Rates are the standards' line rates per direction; latencies are assumptions: the presets'
// 5 us for InfiniBand (verbs, GPUDirect RDMA), more for RoCE's switches, and a TCP stack's tens
// of microseconds for plain Ethernet (NCCL's socket transport).
struct Fabric {
  const char* name;
  double gbps;  // Gbit/s per GPU and direction
  double latency_us;
  const char* what;
};
const Fabric kFabrics[] = {
    {"ndr400", 400, 5, "InfiniBand NDR, 400 Gb/s per GPU"},
    {"hdr200", 200, 5, "InfiniBand HDR, 200 Gb/s per GPU"},
    {"roce400", 400, 8, "RoCE v2 Ethernet, 400 Gb/s per GPU"},
    {"eth100", 100, 30, "Ethernet over TCP, 100 Gb/s per GPU"},
    {"eth25", 25, 30, "Ethernet over TCP, 25 Gb/s per GPU"},
};

// ---- strict reads -----------------------------------------------------------------------------

const nlohmann::json& field(const nlohmann::json& j, const std::string& key,
                            const std::string& path, const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    SL_THROW(InvalidArgument, where, ": field '", path, "' is missing");
  return j.at(key);
}

const nlohmann::json& object(const nlohmann::json& j, const std::string& key,
                             const std::string& where) {
  const nlohmann::json& v = field(j, key, key, where);
  if (!v.is_object())
    SL_THROW(InvalidArgument, where, ": field '", key, "' must be an object, not ", v.dump());
  return v;
}

// The physical range of a figure, in the spec's units: far beyond any device or link built, and
// far above zero, so that the cost model's times stay finite and inside the virtual clock.
struct Range {
  double lo, hi;
  const char* unit;
};
constexpr Range kFlopsRange = {1e-6, 1e6, "TFLOP/s"};         // 1 MFLOP/s .. 1 EFLOP/s
constexpr Range kMemoryRange = {1.0 / 1024, 1e6, "GiB"};      // 1 MiB .. 1 PiB per device
constexpr Range kDeviceBandwidthRange = {1e-3, 1e6, "GB/s"};  // 1 MB/s .. 1 PB/s
constexpr Range kLinkBandwidthRange = {1e-3, 1e5, "GB/s"};    // 1 MB/s .. 100 TB/s
constexpr Range kLatencyRange = {0, 1e6, "us"};               // up to 1 s per message
constexpr Range kEfficiencyRange = {1e-3, 1, "of peak"};      // a fraction
constexpr Range kHalfDimRange = {0, 1e6, "elements"};
constexpr Range kLaunchRange = {0, 1e6, "us"};
constexpr Range kTreeBytesRange = {0, 1125899906842624.0, "bytes"};  // 2^50
constexpr Range kHeadroomRange = {0, 1e6, "GiB"};                    // at most the memory's range
constexpr Range kFragmentationRange = {0, 1, "of the peak"};
constexpr int kMaxCount = 1 << 20;                      // nodes, ranks per node
constexpr int64_t kMaxClusterRanks = int64_t(1) << 24;  // nodes x ranks_per_node

// A finite number inside `r`; the message names the field, the value and the range.
double number(const nlohmann::json& j, const std::string& key, const std::string& path,
              const std::string& where, const Range& r) {
  const nlohmann::json& v = field(j, key, path, where);
  if (!v.is_number())
    SL_THROW(InvalidArgument, where, ": field '", path, "' must be a number, not ", v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0 || (r.lo > 0 && x == 0))
    SL_THROW(InvalidArgument, where, ": field '", path, "' = ", v.dump(), " must be ",
             r.lo > 0 ? "> 0" : ">= 0");
  if (r.hi == 1 && r.lo < 1 && x > 1)
    SL_THROW(InvalidArgument, where, ": field '", path, "' = ", v.dump(), " must be in ",
             r.lo > 0 ? "(0, 1]" : "[0, 1]");
  if (x < r.lo || x > r.hi)
    SL_THROW(InvalidArgument, where, ": field '", path, "' = ", v.dump(),
             " is outside the physical range [", r.lo, ", ", r.hi, "] ", r.unit);
  return x;
}

// Refuses a key of object `o` (at `path`, "" for the top) that is not in `known`: a typo such as
// "gemm_eficiency" would otherwise leave the default silently in place. "source" (where the
// figures come from) is welcome in every object.
void check_keys(const nlohmann::json& o, const std::string& path,
                const std::vector<std::string>& known, const std::string& where) {
  for (auto it = o.begin(); it != o.end(); ++it) {
    if (it.key() == "source" || std::find(known.begin(), known.end(), it.key()) != known.end())
      continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    SL_THROW(InvalidArgument, where, ": unknown field '", path.empty() ? "" : path + ".", it.key(),
             "'", did_you_mean(it.key(), known), " (known", path.empty() ? "" : " in ", path, ": ",
             list, ", source)");
  }
}

int count(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& v = field(j, key, key, where);
  if (!v.is_number_integer())
    SL_THROW(InvalidArgument, where, ": field '", key, "' must be an integer, not ", v.dump());
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(kMaxCount)
                        ? int64_t(kMaxCount) + 1
                        : v.get<int64_t>();
  if (x < 1 || x > kMaxCount)
    SL_THROW(InvalidArgument, where, ": field '", key, "' = ", v.dump(), " must be in [1, ",
             kMaxCount, "]");
  return static_cast<int>(x);
}

std::string text(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& v = field(j, key, key, where);
  if (!v.is_string())
    SL_THROW(InvalidArgument, where, ": field '", key, "' must be a string, not ", v.dump());
  return v.get<std::string>();
}

// One regime of a link's per-collective fit: {"bandwidth_GBps", "latency_us"[, "up_to_bytes"]}.
LinkRegime regime(const nlohmann::json& r, const std::string& path, bool bounded,
                  const std::string& where) {
  if (!r.is_object())
    SL_THROW(InvalidArgument, where, ": field '", path, "' must be an object, not ", r.dump());
  check_keys(r, path, {"bandwidth_GBps", "latency_us", "up_to_bytes"}, where);
  LinkRegime g;
  g.bandwidth =
      number(r, "bandwidth_GBps", path + ".bandwidth_GBps", where, kLinkBandwidthRange) * 1e9;
  g.latency = number(r, "latency_us", path + ".latency_us", where, kLatencyRange) * 1e-6;
  if (bounded) {
    const nlohmann::json& u = field(r, "up_to_bytes", path + ".up_to_bytes", where);
    if (!u.is_number_integer() ||
        (u.is_number_unsigned() && u.get<uint64_t>() > (uint64_t(1) << 62)) || u.get<int64_t>() < 1)
      SL_THROW(InvalidArgument, where, ": field '", path, ".up_to_bytes' = ", u.dump(),
               " must be an integer in [1, 2^62] (every regime but the last has one)");
    g.up_to_bytes = u.get<int64_t>();
  } else if (r.contains("up_to_bytes")) {
    SL_THROW(InvalidArgument, where, ": field '", path,
             ".up_to_bytes' must be absent: the last regime serves every larger buffer");
  }
  return g;
}

// A link's optional "collectives": per collective one regime (an object) or several (an array,
// ascending up_to_bytes, the last unbounded).
void link_collectives(const nlohmann::json& o, const std::string& k, Link& l,
                      const std::string& where) {
  const std::string path = k + ".collectives";
  const nlohmann::json& c = o.at("collectives");
  if (!c.is_object())
    SL_THROW(InvalidArgument, where, ": field '", path, "' must be an object, not ", c.dump());
  for (auto it = c.begin(); it != c.end(); ++it) {
    int op = -1;
    for (int i = 0; i < 3; ++i)
      if (it.key() == Link::kLinkOps[i]) op = i;
    if (op < 0)
      SL_THROW(InvalidArgument, where, ": field '", path, ".", it.key(),
               "': unknown collective (known: all_gather, reduce_scatter, all_reduce)");
    const std::string p = path + "." + it.key();
    std::vector<LinkRegime>& out = l.per_op[op];
    if (it->is_object()) {
      out.push_back(regime(*it, p, false, where));
    } else if (it->is_array() && !it->empty()) {
      for (size_t i = 0; i < it->size(); ++i) {
        const std::string pi = p + "[" + std::to_string(i) + "]";
        out.push_back(regime(it->at(i), pi, i + 1 < it->size(), where));
        if (i > 0 && i + 1 < it->size() && out[i].up_to_bytes <= out[i - 1].up_to_bytes)
          SL_THROW(InvalidArgument, where, ": field '", pi, ".up_to_bytes' = ", out[i].up_to_bytes,
                   " must exceed the previous regime's ", out[i - 1].up_to_bytes);
      }
    } else {
      SL_THROW(InvalidArgument, where, ": field '", p,
               "' must be an object or a non-empty array of regimes, not ", it->dump());
    }
  }
}

Link link(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& o = object(j, key, where);
  const std::string k(key);
  check_keys(o, k, {"bandwidth_GBps", "latency_us", "collectives"}, where);
  Link l;
  l.bandwidth =
      number(o, "bandwidth_GBps", k + ".bandwidth_GBps", where, kLinkBandwidthRange) * 1e9;
  l.latency = number(o, "latency_us", k + ".latency_us", where, kLatencyRange) * 1e-6;
  if (o.contains("collectives")) link_collectives(o, k, l, where);
  return l;
}

}  // namespace

bool Link::has_op(const char* op) const {
  for (int i = 0; i < 3; ++i)
    if (std::strcmp(op, kLinkOps[i]) == 0) return !per_op[i].empty();
  return false;
}

Link Link::for_op(const char* op, double bytes) const {
  for (int i = 0; i < 3; ++i) {
    if (std::strcmp(op, kLinkOps[i]) != 0 || per_op[i].empty()) continue;
    for (const LinkRegime& r : per_op[i])
      if (r.up_to_bytes == 0 || bytes <= static_cast<double>(r.up_to_bytes)) {
        Link l;
        l.bandwidth = r.bandwidth;
        l.latency = r.latency;
        return l;
      }
  }
  Link l;
  l.bandwidth = bandwidth;
  l.latency = latency;
  return l;
}

const char* gemm_math_name(GemmMath m) {
  switch (m) {
    case GemmMath::fp32: return "fp32";
    case GemmMath::tf32: return "tf32";
    default: return "bf16";
  }
}

GemmMath parse_gemm_math(const std::string& s) {
  if (s == "fp32") return GemmMath::fp32;
  if (s == "tf32") return GemmMath::tf32;
  if (s == "bf16") return GemmMath::bf16;
  SL_THROW(InvalidArgument, "unknown GEMM math '", s, "' (known: fp32, tf32, bf16)");
}

ClusterSpec parse_cluster_spec(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) SL_THROW(InvalidArgument, where, ": not a JSON object");
  check_keys(
      j, "",
      {"name", "nodes", "ranks_per_node", "devices_per_node", "gpu", "intra_node", "inter_node",
       "host_link", "host", "async_progress", "attention_causal_block", "headroom", "efficiency"},
      where);
  ClusterSpec c;
  c.json = j;
  c.name = text(j, "name", where);
  c.source = text(j, "source", where);
  c.nodes = count(j, "nodes", where);
  c.ranks_per_node = count(j, "ranks_per_node", where);
  if (int64_t(c.nodes) * c.ranks_per_node > kMaxClusterRanks)
    SL_THROW(InvalidArgument, where, ": nodes ", c.nodes, " x ranks_per_node ", c.ranks_per_node,
             " = ", int64_t(c.nodes) * c.ranks_per_node, " ranks, more than the ", kMaxClusterRanks,
             " (2^24) a simulated cluster may have");
  if (j.contains("devices_per_node")) c.devices_per_node = count(j, "devices_per_node", where);
  const nlohmann::json& gpu = object(j, "gpu", where);
  check_keys(gpu, "gpu", {"name", "peak_tflops", "memory_GiB", "memory_bandwidth_GBps"}, where);
  c.gpu_name = gpu.contains("name") && gpu.at("name").is_string()
                   ? gpu.at("name").get<std::string>()
                   : std::string("gpu");
  const nlohmann::json& peak = field(gpu, "peak_tflops", "gpu.peak_tflops", where);
  if (!peak.is_object())
    SL_THROW(InvalidArgument, where, ": field 'gpu.peak_tflops' must be an object, not ",
             peak.dump());
  check_keys(peak, "gpu.peak_tflops", {"fp32", "tf32", "bf16"}, where);
  for (GemmMath m : {GemmMath::fp32, GemmMath::tf32, GemmMath::bf16}) {
    const std::string k = gemm_math_name(m);
    c.peak_flops[static_cast<int>(m)] =
        number(peak, k, "gpu.peak_tflops." + k, where, kFlopsRange) * 1e12;
  }
  const double gib = number(gpu, "memory_GiB", "gpu.memory_GiB", where, kMemoryRange);
  c.memory_bytes = static_cast<int64_t>(gib * 1024.0 * 1024.0 * 1024.0);
  c.memory_bandwidth = number(gpu, "memory_bandwidth_GBps", "gpu.memory_bandwidth_GBps", where,
                              kDeviceBandwidthRange) *
                       1e9;
  c.intra_node = link(j, "intra_node", where);
  c.inter_node = link(j, "inter_node", where);
  c.host_link = link(j, "host_link", where);
  if (j.contains("host")) {
    const nlohmann::json& host = object(j, "host", where);
    check_keys(host, "host", {"memory_bandwidth_GBps"}, where);
    c.host_memory_bandwidth = number(host, "memory_bandwidth_GBps", "host.memory_bandwidth_GBps",
                                     where, kDeviceBandwidthRange) *
                              1e9;
  }
  if (j.contains("async_progress")) {
    const nlohmann::json& v = j.at("async_progress");
    if (!v.is_boolean())
      SL_THROW(InvalidArgument, where, ": field 'async_progress' must be true or false, not ",
               v.dump());
    c.async_progress = v.get<bool>();
  }
  if (j.contains("attention_causal_block")) {
    const nlohmann::json& v = j.at("attention_causal_block");
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 20))
      SL_THROW(InvalidArgument, where,
               ": field 'attention_causal_block' must be a whole number of positions >= 0, not ",
               v.dump());
    c.attention_causal_block = v.get<int>();
  }
  if (j.contains("headroom")) {
    const nlohmann::json& h = object(j, "headroom", where);
    check_keys(h, "headroom", {"context_GiB", "nccl_GiB_per_communicator", "fragmentation"}, where);
    const auto gib = [&](const char* key, int64_t& out) {
      if (h.contains(key))
        out = Headroom::gib(number(h, key, std::string("headroom.") + key, where, kHeadroomRange));
    };
    gib("context_GiB", c.headroom.context_bytes);
    gib("nccl_GiB_per_communicator", c.headroom.nccl_bytes_per_communicator);
    if (h.contains("fragmentation"))
      c.headroom.fragmentation =
          number(h, "fragmentation", "headroom.fragmentation", where, kFragmentationRange);
    if (c.headroom.context_bytes + c.headroom.nccl_bytes_per_communicator >= c.memory_bytes)
      SL_THROW(InvalidArgument, where,
               ": fields 'headroom.context_GiB' + "
               "'headroom.nccl_GiB_per_communicator' (",
               format_bytes(c.headroom.context_bytes), " + ",
               format_bytes(c.headroom.nccl_bytes_per_communicator),
               ") leave nothing of gpu.memory_GiB (", format_bytes(c.memory_bytes), ")");
  }
  if (j.contains("efficiency")) {
    const nlohmann::json& e = object(j, "efficiency", where);
    check_keys(e, "efficiency",
               {"gemm_efficiency", "gemm_half_dim", "memory_efficiency", "kernel_launch_us",
                "tree_allreduce_max_bytes", "lockstep_compute_efficiency", "kernel_efficiency"},
               where);
    CostModel& m = c.cost;
    const auto opt = [&](const char* key, double& out, const Range& r) {
      if (e.contains(key)) out = number(e, key, std::string("efficiency.") + key, where, r);
    };
    opt("gemm_efficiency", m.gemm_efficiency, kEfficiencyRange);
    opt("gemm_half_dim", m.gemm_half_dim, kHalfDimRange);
    opt("memory_efficiency", m.memory_efficiency, kEfficiencyRange);
    opt("kernel_launch_us", m.kernel_launch_us, kLaunchRange);
    opt("tree_allreduce_max_bytes", m.tree_allreduce_max_bytes, kTreeBytesRange);
    opt("lockstep_compute_efficiency", m.lockstep_compute_efficiency, kEfficiencyRange);
    if (e.contains("kernel_efficiency")) {
      const nlohmann::json& k = object(e, "kernel_efficiency", where);
      for (auto it = k.begin(); it != k.end(); ++it)
        m.kernel_efficiency[it.key()] = number(
            k, it.key(), "efficiency.kernel_efficiency." + it.key(), where, kEfficiencyRange);
    }
  }
  return c;
}

double ClusterSpec::compute_share(int ranks) const {
  const int on_node = std::min(std::max(ranks, 1), ranks_per_node);
  if (devices_per_node <= 0 || devices_per_node >= on_node) return 1.0;
  return static_cast<double>(devices_per_node) / on_node;
}

void ClusterSpec::check_ranks(int ranks) const {
  if (ranks < 1) SL_THROW(InvalidArgument, "--ranks ", ranks, ": must be >= 1");
  if (ranks > total_ranks())
    SL_THROW(InvalidArgument, "--ranks ", ranks, " exceeds cluster '", name, "': ", nodes,
             " nodes x ranks_per_node ", ranks_per_node, " = ", total_ranks(), " ranks");
  if (ranks > ranks_per_node && ranks % ranks_per_node != 0)
    SL_THROW(InvalidArgument, "--ranks ", ranks, " is not a multiple of cluster '", name,
             "' ranks_per_node ", ranks_per_node, " (beyond one node a job uses whole nodes)");
}

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

std::string cluster_preset_json(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return p.json;
  std::string known;
  for (const Preset& p : kPresets) known += std::string(known.empty() ? "" : ", ") + p.name;
  SL_THROW(InvalidArgument, "--cluster '", name,
           "': unknown preset and no such file (presets: ", known,
           ", this-machine; or a JSON file)");
}

std::vector<std::string> fabric_names() {
  std::vector<std::string> names;
  for (const Fabric& f : kFabrics) names.push_back(f.name);
  return names;
}

namespace {

// The spec's JSON and what messages call it.
std::pair<nlohmann::json, std::string> cluster_json(const std::string& name_or_path) {
  for (const Preset& p : kPresets)
    if (name_or_path == p.name)
      return {nlohmann::json::parse(p.json), "cluster preset " + name_or_path};
  if (!path_exists(name_or_path)) cluster_preset_json(name_or_path);  // throws: unknown preset
  const std::string where = "cluster file " + name_or_path;
  try {
    // A FIFO or a device is refused without blocking; a spec is a few KiB, 16 MiB is damage.
    return {parse_json_strict(read_text_file(name_or_path, kMaxClusterFileBytes), where), where};
  } catch (const IoError& e) {
    throw InvalidArgument(e.what());  // already names the file, and where it was thrown
  }
}

}  // namespace

void apply_headroom_option(const std::string& text, nlohmann::json& spec) {
  const std::string usage =
      " (--headroom none, or any of context=SIZE,nccl=SIZE,fragmentation=FRACTION, e.g. "
      "context=1GiB,nccl=512MiB,fragmentation=0.02)";
  nlohmann::json& h = spec["headroom"];
  if (!h.is_object()) h = nlohmann::json::object();
  if (text == "none") {
    h = {{"context_GiB", 0}, {"nccl_GiB_per_communicator", 0}, {"fragmentation", 0}};
    return;
  }
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq),
                      value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (eq == std::string::npos || value.empty())
      SL_THROW(InvalidArgument, "--headroom '", text, "': '", item, "' is not KEY=VALUE", usage);
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    if (key == "context" || key == "nccl") {
      const double bytes = static_cast<double>(parse_bytes(value, "--headroom " + key));
      h[key == "context" ? "context_GiB" : "nccl_GiB_per_communicator"] = bytes / kGiB;
    } else if (key == "fragmentation") {
      char* end = nullptr;
      double f = std::strtod(value.c_str(), &end);
      if (end != value.c_str() && *end == '%' && end[1] == '\0') {
        f /= 100;
      } else if (end == value.c_str() || *end != '\0') {
        SL_THROW(InvalidArgument, "--headroom fragmentation '", value,
                 "': not a number (a fraction of the peak, 0.02, or a percentage, 2%)");
      }
      h["fragmentation"] = f;
    } else {
      SL_THROW(InvalidArgument, "--headroom '", text, "': unknown key '", key, "'",
               did_you_mean(key, {"context", "nccl", "fragmentation"}), usage);
    }
  }
}

ClusterSpec load_cluster_spec(const std::string& name_or_path) {
  return load_cluster_spec(name_or_path, ClusterOverrides{});
}

ClusterSpec load_cluster_spec(const std::string& name_or_path, const ClusterOverrides& ov) {
  auto [j, where] = cluster_json(name_or_path);
  if (ov.empty()) return parse_cluster_spec(j, where);
  if (ov.nodes < 0 || ov.gpus_per_node < 0 || !(ov.inter_node_gbps >= 0))
    SL_THROW(InvalidArgument, "--nodes, --gpus-per-node and --inter-node-gbps must be positive");
  std::string changed;
  if (ov.nodes > 0) {
    j["nodes"] = ov.nodes;
    changed += " --nodes " + std::to_string(ov.nodes);
  }
  if (ov.gpus_per_node > 0) {
    j["ranks_per_node"] = ov.gpus_per_node;
    if (j.contains("devices_per_node")) j["devices_per_node"] = ov.gpus_per_node;
    changed += " --gpus-per-node " + std::to_string(ov.gpus_per_node);
  }
  if (ov.inter_node_gbps > 0) {
    if (!j.contains("inter_node") || !j["inter_node"].is_object())
      SL_THROW(InvalidArgument, where, ": no inter_node link for --inter-node-gbps to change");
    j["inter_node"]["bandwidth_GBps"] = ov.inter_node_gbps / 8.0;  // Gbit/s -> GB/s
    std::ostringstream g;
    g << ov.inter_node_gbps;
    changed += " --inter-node-gbps " + g.str();
  }
  if (!ov.fabric.empty()) {
    if (ov.inter_node_gbps > 0)
      SL_THROW(InvalidArgument, "--fabric ", ov.fabric,
               " with --inter-node-gbps: both set the link between nodes; give one");
    const Fabric* f = nullptr;
    for (const Fabric& k : kFabrics)
      if (ov.fabric == k.name) f = &k;
    if (!f) {
      std::string known;
      for (const Fabric& k : kFabrics) known += std::string(known.empty() ? "" : ", ") + k.name;
      SL_THROW(InvalidArgument, "--fabric '", ov.fabric, "': unknown",
               did_you_mean(ov.fabric, fabric_names()), " (known: ", known, ")");
    }
    // A fresh link: per-collective regimes measured on another link would not hold on this one.
    j["inter_node"] = {
        {"bandwidth_GBps", f->gbps / 8.0},
        {"latency_us", f->latency_us},
        {"source", std::string(f->what) + " (--fabric; the latency is an assumption)"}};
    changed += std::string(" --fabric ") + f->name;
  }
  if (!ov.headroom.empty()) {
    apply_headroom_option(ov.headroom, j);
    changed += " --headroom " + ov.headroom;
  }
  if (j.contains("name") && j["name"].is_string())
    j["name"] = j["name"].get<std::string>() + " with" + changed;
  return parse_cluster_spec(j, where + " with" + changed);
}

}  // namespace shardlab
