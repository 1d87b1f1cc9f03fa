// Cluster specs at the edges (core/device/cluster_spec.cpp): every figure inside a physical
// range, named with the range when not; unknown and repeated keys refused; the rank count's
// product bounded; and the cost model's times never wrap (core/base/virtual_clock.hpp).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/comm/topology.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/device/device_model.hpp"

using namespace shardlab;

namespace {

nlohmann::json h100() { return nlohmann::json::parse(cluster_preset_json("h100-sxm")); }

std::string error_of(const nlohmann::json& j) {
  try {
    parse_cluster_spec(j, "spec x.json");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(accepted)";
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

}  // namespace

TEST(SimClusterLimits, FiguresOutsideTheirPhysicalRangeAreNamed) {
  struct Case {
    std::vector<std::string> path;
    double value;
    const char* want;
  };
  const Case cases[] = {
      {{"gpu", "peak_tflops", "fp32"},
       1e-300,
       "field 'gpu.peak_tflops.fp32' = 1e-300 is outside the physical range [1e-06, 1e+06] "
       "TFLOP/s"},
      {{"gpu", "peak_tflops", "bf16"}, 1e300, "field 'gpu.peak_tflops.bf16' = 1e+300 is outside"},
      {{"inter_node", "bandwidth_GBps"},
       1e-300,
       "field 'inter_node.bandwidth_GBps' = 1e-300 is outside the physical range [0.001, 100000] "
       "GB/s"},
      {{"intra_node", "latency_us"}, 1e300, "field 'intra_node.latency_us' = 1e+300 is outside"},
      {{"gpu", "memory_GiB"}, 1e12, "field 'gpu.memory_GiB' = 1000000000000.0 is outside"},
      {{"gpu", "memory_bandwidth_GBps"}, 1e-9, "'gpu.memory_bandwidth_GBps' = 1e-09 is outside"},
      {{"host_link", "bandwidth_GBps"}, 1e300, "'host_link.bandwidth_GBps' = 1e+300 is outside"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = h100();
    nlohmann::json* v = &j;
    for (const std::string& k : c.path) v = &(*v)[k];
    *v = c.value;
    EXPECT_HAS(error_of(j), c.want);
  }
  nlohmann::json j = h100();
  j["efficiency"] = {{"gemm_efficiency", 1e-300}};
  EXPECT_HAS(error_of(j), "field 'efficiency.gemm_efficiency' = 1e-300 is outside the physical");
  j["efficiency"] = {{"kernel_efficiency", {{"adamw", 1e-200}}}};
  EXPECT_HAS(error_of(j), "'efficiency.kernel_efficiency.adamw' = 1e-200 is outside");
  // The edges themselves are figures some device could have.
  j = h100();
  j["gpu"]["peak_tflops"]["fp32"] = 1e-6;
  j["inter_node"]["bandwidth_GBps"] = 1e-3;
  EXPECT_EQ(error_of(j), "(accepted)");
}

TEST(SimClusterLimits, UnknownAndRepeatedKeysAreRefused) {
  nlohmann::json j = h100();
  j["efficiency"] = {{"gemm_eficiency", 0.5}};
  EXPECT_HAS(error_of(j),
             "spec x.json: unknown field 'efficiency.gemm_eficiency' (did you mean "
             "'gemm_efficiency'?)");
  j = h100();
  j["devices_per_nod"] = 4;
  EXPECT_HAS(error_of(j), "unknown field 'devices_per_nod' (did you mean 'devices_per_node'?)");
  j = h100();
  j["gpu"]["peak_tflops"]["fp8"] = 2000;
  EXPECT_HAS(error_of(j), "unknown field 'gpu.peak_tflops.fp8'");
  j = h100();
  j["inter_node"]["collectives"] = {{"all_gather", {{"bandwidth_GBps", 9}, {"latency", 1}}}};
  EXPECT_HAS(error_of(j), "unknown field 'inter_node.collectives.all_gather.latency'");
  // "source" (where figures come from) is welcome in every object.
  j = h100();
  j["gpu"]["source"] = "a datasheet";
  j["inter_node"]["source"] = "a measurement";
  EXPECT_EQ(error_of(j), "(accepted)");

  // A file with a key twice: the last one used to win silently.
  const std::string dir = std::string(SHARDLAB_BINARY_DIR) + "/test_scratch/cluster_limits";
  make_dirs(dir);
  std::string text = cluster_preset_json("h100-sxm");
  const std::string rpn = "\"ranks_per_node\": 8";
  text.replace(text.find(rpn), rpn.size(), rpn + ", \"ranks_per_node\": 4");
  write_file_atomic(dir + "/dup.json", text);
  try {
    load_cluster_spec(dir + "/dup.json");
    FAIL() << "a repeated key was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_HAS(e.what(), "dup.json: key 'ranks_per_node' appears twice in one object");
  }
}

TEST(SimClusterLimits, RankCountsFitAnInt) {
  nlohmann::json j = h100();
  j["nodes"] = 1 << 20;
  j["ranks_per_node"] = 2048;  // 2^31 ranks: "-2147483648 ranks" as an int
  EXPECT_HAS(error_of(j),
             "nodes 1048576 x ranks_per_node 2048 = 2147483648 ranks, more than the 16777216");
  j["nodes"] = 4096;
  j["ranks_per_node"] = 4096;
  EXPECT_EQ(error_of(j), "(accepted)");
  EXPECT_EQ(parse_cluster_spec(j, "x").total_ranks(), 1 << 24);
  j["ranks_per_node"] = 5000000000LL;
  EXPECT_HAS(error_of(j), "field 'ranks_per_node' = 5000000000 must be in [1, 1048576]");
}

TEST(SimClusterLimits, TimesPastTheClockAreRefusedNotWrapped) {
  // The slowest figures the ranges allow, and collectives far too large for them: the cost
  // model's seconds are past 2^60 ns, which used to wrap to a negative time (the step got faster).
  nlohmann::json j = h100();
  j["inter_node"]["bandwidth_GBps"] = 1e-3;
  j["gpu"]["peak_tflops"] = {{"fp32", 1e-6}, {"tf32", 1e-6}, {"bf16", 1e-6}};
  const ClusterSpec s = parse_cluster_spec(j, "slow");
  std::vector<int> world(16);
  for (int r = 0; r < 16; ++r) world[r] = r;
  const GroupPlacement g = place_group(s, world);
  EXPECT_GT(collective_ns(s, g, CommOp::all_reduce, 1 << 20), 0);
  try {
    collective_ns(s, g, CommOp::all_reduce, int64_t(1) << 56);
    FAIL() << "a time past the virtual clock was returned";
  } catch (const InvalidArgument& e) {
    EXPECT_HAS(e.what(), "all_reduce: ");
    EXPECT_HAS(e.what(), "beyond the virtual clock's 2^60 ns");
  }
  EXPECT_THROW(gemm_ns(s, GemmMath::fp32, 1 << 20, 1 << 20, 1 << 20), InvalidArgument);
}

TEST(SimClusterLimits, EveryPresetRoundTripsThroughItsJson) {
  // What --print-cluster prints, read back as a cluster file would be, is the same spec.
  const std::vector<std::string> names = cluster_preset_names();
  ASSERT_GE(names.size(), 4u);
  for (const std::string& n : names) {
    const ClusterSpec a = load_cluster_spec(n);
    const ClusterSpec b = parse_cluster_spec(nlohmann::json::parse(a.json.dump()), "round trip");
    EXPECT_EQ(b.name, n);
    EXPECT_EQ(b.nodes, a.nodes) << n;
    EXPECT_EQ(b.ranks_per_node, a.ranks_per_node) << n;
    EXPECT_EQ(b.memory_bytes, a.memory_bytes) << n;
    EXPECT_EQ(b.memory_bandwidth, a.memory_bandwidth) << n;
    for (int m = 0; m < 3; ++m) EXPECT_EQ(b.peak_flops[m], a.peak_flops[m]) << n;
    EXPECT_EQ(b.intra_node.bandwidth, a.intra_node.bandwidth) << n;
    EXPECT_EQ(b.inter_node.bandwidth, a.inter_node.bandwidth) << n;
    EXPECT_EQ(b.host_link.bandwidth, a.host_link.bandwidth) << n;
    EXPECT_EQ(b.headroom.context_bytes, a.headroom.context_bytes) << n;
    EXPECT_EQ(b.headroom.nccl_bytes_per_communicator, a.headroom.nccl_bytes_per_communicator) << n;
    EXPECT_EQ(b.headroom.fragmentation, a.headroom.fragmentation) << n;
    EXPECT_NE(a.json.value("source", "").find("datasheet"), std::string::npos) << n;
    // Each GPU preset states its headroom, and states Headroom's documented defaults.
    ASSERT_TRUE(a.json.contains("headroom")) << n;
    const Headroom d;
    EXPECT_EQ(a.headroom.context_bytes, d.context_bytes) << n;
    EXPECT_EQ(a.headroom.nccl_bytes_per_communicator, d.nccl_bytes_per_communicator) << n;
    EXPECT_EQ(a.headroom.fragmentation, d.fragmentation) << n;
  }
  // B200: NVLink 5 doubles the H100's NVLink 4, its dense BF16 is 2.27x the H100's.
  const ClusterSpec b200 = load_cluster_spec("b200"), h = load_cluster_spec("h100-sxm");
  EXPECT_EQ(b200.intra_node.bandwidth, 2 * h.intra_node.bandwidth);
  EXPECT_EQ(b200.peak(GemmMath::bf16), 2250e12);
  // The 80 GB A100 differs from the 40 GB one in memory only; the H200 from the H100 the same.
  const ClusterSpec a40 = load_cluster_spec("a100-40gb"), a80 = load_cluster_spec("a100-80gb");
  EXPECT_EQ(a80.memory_bytes, 2 * a40.memory_bytes);
  EXPECT_EQ(a80.peak_flops[2], a40.peak_flops[2]);
  EXPECT_GT(load_cluster_spec("h200").memory_bandwidth,
            load_cluster_spec("h100-sxm").memory_bandwidth);
}

TEST(SimClusterLimits, HeadroomReadsRefusesAndDefaults) {
  // A spec without "headroom" is a GPU's: the defaults.
  nlohmann::json j = h100();
  j.erase("headroom");
  const ClusterSpec bare = parse_cluster_spec(j, "spec x.json");
  EXPECT_EQ(bare.headroom.context_bytes, Headroom::gib(Headroom::kDefaultContextGiB));
  EXPECT_EQ(bare.headroom.nccl_bytes_per_communicator, Headroom::gib(1.0));
  EXPECT_DOUBLE_EQ(bare.headroom.fragmentation, 0.017);
  // Given fields replace the defaults one by one; zero is a valid headroom.
  j["headroom"] = {{"context_GiB", 0.5}, {"fragmentation", 0}};
  const ClusterSpec some = parse_cluster_spec(j, "spec x.json");
  EXPECT_EQ(some.headroom.context_bytes, int64_t(1) << 29);
  EXPECT_EQ(some.headroom.nccl_bytes_per_communicator, Headroom::gib(1.0));
  EXPECT_EQ(some.headroom.fragmentation, 0.0);
  j["headroom"] = {{"context_gib", 1}};
  EXPECT_HAS(error_of(j), "unknown field 'headroom.context_gib' (did you mean 'context_GiB'?");
  j["headroom"] = {{"fragmentation", -0.1}};
  EXPECT_HAS(error_of(j), "field 'headroom.fragmentation' = -0.1 must be >= 0");
  j["headroom"] = {{"nccl_GiB_per_communicator", 79}, {"context_GiB", 1}};
  EXPECT_HAS(error_of(j), "leave nothing of gpu.memory_GiB (80.00 GiB)");
  j["headroom"] = "lots";
  EXPECT_HAS(error_of(j), "field 'headroom' must be an object");

  // --headroom: partial changes, "none", a percentage; bad text named.
  nlohmann::json k = h100();
  apply_headroom_option("nccl=512MiB,fragmentation=5%", k);
  const ClusterSpec opt = parse_cluster_spec(k, "spec x.json");
  EXPECT_EQ(opt.headroom.nccl_bytes_per_communicator, int64_t(512) << 20);
  EXPECT_DOUBLE_EQ(opt.headroom.fragmentation, 0.05);
  EXPECT_EQ(opt.headroom.context_bytes, Headroom::gib(1.15));  // the preset's, kept
  apply_headroom_option("none", k);
  const ClusterSpec none = parse_cluster_spec(k, "spec x.json");
  EXPECT_EQ(none.headroom.context_bytes + none.headroom.nccl_bytes_per_communicator, 0);
  EXPECT_EQ(none.headroom.fragmentation, 0.0);
  for (const char* bad : {"context", "context=", "ctx=1GiB", "context=lots", "fragmentation=x"}) {
    nlohmann::json b = h100();
    EXPECT_THROW(apply_headroom_option(bad, b), InvalidArgument) << bad;
  }
}

TEST(SimClusterLimits, FabricsReplaceTheLinkBetweenNodes) {
  ClusterOverrides ov;
  ov.fabric = "eth25";
  const ClusterSpec eth = load_cluster_spec("h100-sxm", ov);
  EXPECT_DOUBLE_EQ(eth.inter_node.bandwidth, 25e9 / 8);
  EXPECT_DOUBLE_EQ(eth.inter_node.latency, 30e-6);
  EXPECT_HAS(eth.name, "with --fabric eth25");
  // Every named fabric reads as a link, and none is faster than its line rate.
  for (const std::string& f : fabric_names()) {
    ov.fabric = f;
    const ClusterSpec s = load_cluster_spec("a100-80gb", ov);
    EXPECT_GT(s.inter_node.bandwidth, 0) << f;
    EXPECT_LE(s.inter_node.bandwidth, 400e9 / 8) << f;
  }
  ov.fabric = "ndr";
  try {
    load_cluster_spec("h100-sxm", ov);
    FAIL() << "an unknown fabric was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_HAS(e.what(), "--fabric 'ndr': unknown");
    EXPECT_HAS(e.what(), "ndr400");
  }
}
