// core/import/torch_trace: torch.profiler traces of real PyTorch jobs (tests/data/torch_traces/,
// made by bench/torch_traces.py: 2 ranks on gloo, 2 profiled steps, a 256-token embedding, two
// residual MLP blocks of width 32 and a 256-way head) imported as run directories, and what
// `shardlab summary` then reads from them; bad traces refused naming the file.
#include <gtest/gtest.h>

#include <zlib.h>

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/comm/comm_common.hpp"
#include "core/import/torch_trace.hpp"
#include "core/trace/run_reader.hpp"
#include "core/trace/summary.hpp"

using namespace shardlab;

namespace {

const std::string kData = std::string(SHARDLAB_SOURCE_DIR) + "/tests/data/torch_traces/";

// The model's parameters: the root (embedding 256 x 32, head 32 x 256 + 256) and a block
// (LayerNorm 2 x 32, fc 32 x 128 + 128, proj 128 x 32 + 32).
constexpr int64_t kRoot = 256 * 32 + 32 * 256 + 256;
constexpr int64_t kBlock = 2 * 32 + 32 * 128 + 128 + 128 * 32 + 32;

std::string fresh(const std::string& name) {
  const std::string dir = testing::TempDir() + "/import_" + name;
  remove_all(dir);
  return dir;
}

// The run's totals of one collective (zero calls when it never ran).
CommStat op(const RunSummary& s, CommOp c) {
  for (const CommStat& st : s.comm)
    if (st.op == comm_op_name(c)) return st;
  return {};
}

std::string gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  std::string text;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return text;
}

void expect_refused(const std::vector<std::string>& traces, const std::string& out,
                    const std::string& needle) {
  try {
    import_torch_traces(traces, out);
    ADD_FAILURE() << "accepted; expected an error with '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(ImportTorchTrace, Fsdp2TraceGivesItsUnitsCollectivesAndStates) {
  const std::string out = fresh("fsdp2");
  EXPECT_EQ(import_torch_traces({kData + "fsdp2"}, out), (std::vector<int>{0, 1}));
  const RunData run = read_run(out);
  ASSERT_EQ(run.ranks.size(), 2u);
  EXPECT_EQ(run.meta.at("world_size"), 2);
  EXPECT_EQ(run.meta.at("backend"), "gloo");
  const auto& units = run.meta.at("units");
  ASSERT_EQ(units.size(), 3u);
  EXPECT_EQ(units[0].at("name"), "root");
  EXPECT_EQ(units[2].at("name"), "blocks.1");
  // gloo ran each unit's reduce-scatter as an all-reduce of the unit: 3 a step, 2 steps, 2 ranks.
  EXPECT_EQ(run.meta.at("imported").at("reduce_scatter_as_all_reduce"), 12);
  EXPECT_EQ(run.meta.at("imported").at("comm_without_issuing_call"), 0);

  const RunSummary s = compute_summary(run);
  EXPECT_EQ(s.step_time.steps, 2);
  // Per step and rank: forward gathers root, blocks.0, blocks.1; backward blocks.1, blocks.0
  // (FSDP2 keeps the root gathered into the backward). Buffers are nccl-tests' full sizes.
  const int64_t calls = 2 * 2;  // steps x ranks
  EXPECT_EQ(op(s, CommOp::all_gather).calls, 5 * calls);
  EXPECT_EQ(op(s, CommOp::all_gather).bytes, 4 * (kRoot + 4 * kBlock) * calls);
  EXPECT_EQ(op(s, CommOp::all_gather).sent, 4 * (kRoot + 4 * kBlock) / 2 * calls);
  EXPECT_EQ(op(s, CommOp::all_reduce).calls, 3 * calls);
  EXPECT_EQ(op(s, CommOp::all_reduce).bytes, 4 * (kRoot + 2 * kBlock) * calls);
  EXPECT_EQ(op(s, CommOp::reduce_scatter).calls, 0);

  // Spans: compute on the forward, backward and optimizer, comm issued before it ran; unit
  // states for every unit; steps in order.
  for (const RankTrace& r : run.ranks) {
    ASSERT_EQ(r.steps.size(), 2u);
    EXPECT_EQ(r.steps[0].step, 1);
    EXPECT_EQ(r.steps[1].step, 2);
    int phases[3] = {0, 0, 0};
    for (const SpanEvent& e : r.spans) {
      EXPECT_LE(e.t_issue, e.t_start);
      EXPECT_LE(e.t_start, e.t_end);
      if (e.lane == Lane::compute)
        ++phases[e.op == "forward" ? 0 : e.op == "backward" ? 1 : e.op == "optimizer" ? 2 : -99];
      if (e.lane == Lane::comm) {
        EXPECT_GE(e.unit, 0) << e.op;
      }
    }
    for (int p : phases) EXPECT_GT(p, 0);
    std::vector<int> gathered(3, 0);
    for (const UnitEvent& u : r.units)
      if (u.state == UnitState::unsharded) ++gathered[static_cast<size_t>(u.unit)];
    EXPECT_EQ(gathered, (std::vector<int>{2, 4, 4}));  // root once a step, blocks twice
  }
}

// FSDP1 (FullyShardedDataParallel with ModuleWrapPolicy on each block) moves what FSDP2 does:
// the root and both blocks gathered for the forward, the blocks again for the backward, each
// unit's gradient reduced once; its labels name no module, so there are no units.
TEST(ImportTorchTrace, Fsdp1TraceMovesWhatFsdp2Does) {
  const std::string out = fresh("fsdp1");
  import_torch_traces({kData + "fsdp1"}, out);
  const RunData run = read_run(out);
  EXPECT_EQ(run.meta.at("units").size(), 1u);
  EXPECT_EQ(run.meta.at("imported").at("reduce_scatter_as_all_reduce"), 12);
  EXPECT_EQ(run.meta.at("imported").at("comm_without_issuing_call"), 0);
  const RunSummary s = compute_summary(run);
  const int64_t calls = 2 * 2;  // steps x ranks
  EXPECT_EQ(op(s, CommOp::all_gather).calls, 5 * calls);
  EXPECT_EQ(op(s, CommOp::all_gather).bytes, 4 * (kRoot + 4 * kBlock) * calls);
  EXPECT_EQ(op(s, CommOp::all_reduce).calls, 3 * calls);
  EXPECT_EQ(op(s, CommOp::all_reduce).bytes, 4 * (kRoot + 2 * kBlock) * calls);
}

TEST(ImportTorchTrace, DdpTraceIsOneBucketAllReduce) {
  const std::string out = fresh("ddp");
  import_torch_traces({kData + "ddp/rank1.json.gz", kData + "ddp/rank0.json.gz"}, out);
  const RunData run = read_run(out);
  EXPECT_EQ(run.meta.at("units").size(), 1u);  // no FSDP2 labels
  const RunSummary s = compute_summary(run);
  // DDP all-reduces every gradient, here in one bucket a step.
  EXPECT_EQ(op(s, CommOp::all_reduce).calls, 2 * 2);
  EXPECT_EQ(op(s, CommOp::all_reduce).bytes, 4 * (kRoot + 2 * kBlock) * 2 * 2);
  EXPECT_EQ(op(s, CommOp::all_gather).calls, 0);
  // A summary.json like a finished run's.
  EXPECT_TRUE(path_exists(out + "/summary.json"));
}

// The run's totals of a comm op by its name ("all_to_all", "all_reduce(?)").
CommStat op_named(const RunSummary& s, const std::string& name) {
  for (const CommStat& st : s.comm)
    if (st.op == name) return st;
  return {};
}

TEST(ImportTorchTrace, ASubsetOfTheRanksIsNamedAsSuch) {
  const std::string out = fresh("subset");
  EXPECT_EQ(import_torch_traces({kData + "fsdp2/rank1.json.gz"}, out), (std::vector<int>{1}));
  const RunData run = read_run(out);
  ASSERT_EQ(run.ranks.size(), 1u);  // row 0 holds the job's rank 1
  EXPECT_EQ(run.meta.at("world_size"), 1);
  EXPECT_EQ(run.meta.at("imported").at("job_world_size"), 2);
  EXPECT_EQ(run.meta.at("imported").at("subset"), true);
  EXPECT_EQ(run.meta.at("imported").at("sources")[0].at("rank"), 1);
  // Sizes stay those of the job's 2 ranks: rank 1's own half of the FSDP2 run's all-gathers.
  EXPECT_EQ(op(compute_summary(run), CommOp::all_gather).bytes, 4 * (kRoot + 4 * kBlock) * 2);
  std::ostringstream os;
  print_summary_table(compute_summary(run), run.meta, os);
  EXPECT_NE(os.str().find("imported from torch.profiler: rank 1 of a 2-rank job, as row 0"),
            std::string::npos)
      << os.str();
}

// A recent PyTorch's DDP on an A100 (tests/data/torch_traces/README.md): its NCCL kernels carry
// the collective's name, sizes and group. The expected figures were counted from the trace apart
// (kernels launched within the 3 ProfilerSteps: 2,700, of which 21 NCCL's).
TEST(ImportTorchTrace, GpuTraceGivesKernelsAsComputeAndNcclAsComm) {
  const std::string out = fresh("nccl_ddp");
  import_torch_traces({kData + "nccl_ddp"}, out);
  const RunData run = read_run(out);
  EXPECT_EQ(run.meta.at("device"), "cuda");
  EXPECT_EQ(run.meta.at("imported").at("gpu"), "NVIDIA A100-PG509-200");
  EXPECT_EQ(run.meta.at("imported").at("comm_without_issuing_call"), 0);
  const RunSummary s = compute_summary(run);
  EXPECT_EQ(s.step_time.steps, 3);
  EXPECT_EQ(op(s, CommOp::all_reduce).calls, 15);
  EXPECT_EQ(op(s, CommOp::all_reduce).bytes, int64_t(4) * 76671096);  // "In msg nelems", Float
  EXPECT_EQ(op(s, CommOp::broadcast).calls, 6);
  // DDP's buffers a step: 53,120 floats and 53 longs (8 bytes, counted as f32 elements of the
  // same bytes).
  EXPECT_EQ(op(s, CommOp::broadcast).bytes, 3 * (4 * 53120 + 8 * 53));
  // Compute: the union of the 2,679 other kernels' intervals, 115,655.843 us.
  ASSERT_EQ(s.ranks.size(), 1u);
  EXPECT_NEAR(static_cast<double>(s.ranks[0].compute_ns), 115655843.0, 3000.0);
  int backward = 0;
  for (const SpanEvent& e : run.ranks[0].spans) {
    EXPECT_LE(e.t_issue, e.t_start);
    backward += e.lane == Lane::compute && e.op == "backward";
  }
  EXPECT_GT(backward, 0);  // launched from autograd's thread
}

// Two ranks of a 128-rank job of an older PyTorch: NCCL kernels named ncclKernel_SendRecv whatever
// they run, with no arguments: the collective comes from the c10d call that launched each.
TEST(ImportTorchTrace, GpuSubsetTakesCollectivesFromTheLaunchingCall) {
  const std::string out = fresh("nccl_subset");
  EXPECT_EQ(import_torch_traces({kData + "nccl_subset"}, out), (std::vector<int>{0, 1}));
  const RunData run = read_run(out);
  EXPECT_EQ(run.meta.at("imported").at("job_world_size"), 128);
  EXPECT_EQ(run.meta.at("imported").at("comm_without_issuing_call"), 0);
  // 4 all-reduces a rank whose TensorList the profiler kept no shape of: named, not guessed.
  EXPECT_EQ(run.meta.at("imported").at("comm_size_unknown"), 8);
  const RunSummary s = compute_summary(run);
  EXPECT_EQ(op_named(s, "all_reduce(?)").calls, 8);
  EXPECT_EQ(op_named(s, "all_reduce(?)").bytes, 0);
  EXPECT_EQ(op_named(s, "all_to_all").calls, 8);
  // Rank 0's inputs: 384 longs, 2 x 419,430,400 bytes, 2,846,720 ints; rank 1's: 339,738,624 and
  // 394,073,856 bytes, 2,846,720 ints, 384 longs.
  EXPECT_EQ(op_named(s, "all_to_all").bytes, int64_t(384 * 8 + 2 * 419430400 + 2846720 * 4) +
                                                 (339738624 + 394073856 + 2846720 * 4 + 384 * 8));
  // _allgather_base_ of a 16 MiB shard of signed chars to 1 GiB: a group of 64 of the 128 ranks
  // (the trace names no group; the buffers' ratio gives it).
  EXPECT_EQ(op(s, CommOp::all_gather).calls, 4);
  EXPECT_EQ(op(s, CommOp::all_gather).bytes, int64_t(4) * 1073741824);
  ASSERT_EQ(s.ranks.size(), 2u);
  EXPECT_NEAR(static_cast<double>(s.ranks[0].compute_ns), 210320000.0, 3000.0);
  EXPECT_NEAR(static_cast<double>(s.ranks[1].compute_ns), 271973000.0, 3000.0);
  std::ostringstream os;
  print_summary_table(s, run.meta, os);
  EXPECT_NE(os.str().find("ranks 0, 1 of a 128-rank job"), std::string::npos) << os.str();
}

TEST(ImportTorchTrace, BadTracesAreRefusedNamingTheFile) {
  const std::string dir = fresh("bad");
  make_dirs(dir);
  const std::string good = gunzip(kData + "fsdp2/rank0.json.gz");
  // Truncated JSON, not JSON, a gzip stream cut short.
  write_file_atomic(dir + "/cut.json", good.substr(0, good.size() / 2));
  expect_refused({dir + "/cut.json"}, dir + "/o1", "cut.json: not a torch.profiler trace");
  write_file_atomic(dir + "/garbage.json", "this is not json\n");
  expect_refused({dir + "/garbage.json"}, dir + "/o2", "garbage.json: not a torch.profiler trace");
  const std::string gz = read_text_file(kData + "fsdp2/rank0.json.gz");
  write_file_atomic(dir + "/cut.json.gz", gz.substr(0, gz.size() / 2));
  expect_refused({dir + "/cut.json.gz"}, dir + "/o3", "cut.json.gz: not a complete gzip stream");
  // Nested 100,000 deep: skipped as no event, or refused at the depth bound where it is read.
  write_file_atomic(dir + "/deep.json", "{\"traceEvents\": [" + std::string(100000, '[') +
                                            std::string(100000, ']') + "]}");
  expect_refused({dir + "/deep.json"}, dir + "/o9", "deep.json: no distributedInfo");
  write_file_atomic(dir + "/deep_info.json",
                    "{\"distributedInfo\": {\"rank\": " + std::string(100000, '[') +
                        std::string(100000, ']') + "}}");
  expect_refused({dir + "/deep_info.json"}, dir + "/o10", "deep_info.json: distributedInfo");
  // No distributedInfo: a single-process trace.
  std::string single = good;
  single.replace(single.find("\"distributedInfo\""), 17, "\"distributedInfX\"");
  write_file_atomic(dir + "/single.json", single);
  expect_refused({dir + "/single.json"}, dir + "/o4", "single.json: no distributedInfo");
  // A CPU and a GPU trace; the same rank twice; ranks of two jobs.
  expect_refused({kData + "ddp/rank1.json.gz", kData + "nccl_ddp/rank0.json.gz"}, dir + "/o8",
                 "is a CPU trace, but");
  expect_refused({kData + "fsdp2/rank0.json.gz", kData + "ddp/rank0.json.gz"}, dir + "/o5",
                 "are both rank 0");
  std::string other = good;
  other.replace(other.find("\"world_size\": 2"), 15, "\"world_size\": 4");
  write_file_atomic(dir + "/rank1_of_4.json", other);
  expect_refused({kData + "fsdp2/rank1.json.gz", dir + "/rank1_of_4.json"}, dir + "/o6",
                 "world_size");
  // An output that holds something already is left alone.
  make_dirs(dir + "/o7");
  write_file_atomic(dir + "/o7/keep.txt", "mine\n");
  expect_refused({kData + "fsdp2"}, dir + "/o7", "not an empty directory");
  EXPECT_EQ(read_text_file(dir + "/o7/keep.txt"), "mine\n");
}

// Memory: the [memory] events replayed block by block give the profiler's own total at every
// event (so the peak is its peak), and each block's category is inferred from its phases.
TEST(ImportTorchTrace, MemoryReplaysTheProfilersTotalsAndInfersCategories) {
  for (const char* job : {"ddp", "fsdp1", "fsdp2"}) {
    const std::string path = kData + job + "/rank0.json.gz";
    const TorchRank r = read_torch_trace(path);
    ASSERT_FALSE(r.mem.empty()) << job;
    EXPECT_EQ(r.mem_device, "cpu");
    EXPECT_EQ(r.mem_mismatches, 0) << job;
    // The profiler's largest "Total Allocated" on the CPU from the first step on, read here with
    // another JSON parser.
    const nlohmann::json t = nlohmann::json::parse(gunzip(path));
    double first = 1e300;
    for (const auto& e : t["traceEvents"])
      if (e.value("name", "").rfind("ProfilerStep#", 0) == 0)
        first = std::min(first, e["ts"].get<double>());
    int64_t reported = 0, events = 0;
    for (const auto& e : t["traceEvents"])
      if (e.value("name", "") == "[memory]" && e["args"]["Device Type"] == 0 &&
          e["ts"].get<double>() >= first) {
        reported = std::max(reported, e["args"]["Total Allocated"].get<int64_t>());
        ++events;
      }
    EXPECT_EQ(r.mem_events, events) << job;
    int64_t peak = 0;
    for (const MemEvent& m : r.mem) peak = std::max(peak, m.total);
    EXPECT_EQ(peak, reported) << job;
    const auto blocks = [&](MemCategory c) { return r.mem_blocks[static_cast<int>(c)]; };
    EXPECT_GT(blocks(MemCategory::activations), 0) << job;
    EXPECT_GT(blocks(MemCategory::grads), 0) << job;
    EXPECT_GT(blocks(MemCategory::workspace), 0) << job;
    // Only FSDP2 labels its gathers: unsharded parameters are inferred there alone.
    EXPECT_EQ(blocks(MemCategory::params_unsharded) > 0, std::string(job) == "fsdp2") << job;
    EXPECT_EQ(blocks(MemCategory::params), 0) << job;  // allocated before the profiler started
  }
  // The run directory holds them, and the summary says they are inferred.
  const std::string out = fresh("memory");
  import_torch_traces({kData + "fsdp2"}, out);
  const RunSummary s = compute_summary(read_run(out));
  ASSERT_EQ(s.ranks.size(), 2u);
  for (const RankSummary& rk : s.ranks) EXPECT_GT(rk.peak_total, 0);
  std::ostringstream os;
  print_summary(out, os);
  EXPECT_NE(os.str().find("its categories inferred"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("peak by category"), std::string::npos) << os.str();
}

// The rules, on a trace made here: one block of each kind, and a free of what was held before.
TEST(ImportTorchTrace, MemoryRulesPlaceEachBlock) {
  const std::string dir = fresh("rules");
  make_dirs(dir);
  const auto x = [](const char* name, const char* cat, double ts, double dur) {
    return nlohmann::json{{"ph", "X"}, {"name", name}, {"cat", cat}, {"pid", 1},
                          {"tid", 1},  {"ts", ts},     {"dur", dur}};
  };
  const auto mem = [](double ts, int64_t bytes, uint64_t addr, int64_t total) {
    return nlohmann::json{{"ph", "i"},
                          {"name", "[memory]"},
                          {"pid", 1},
                          {"tid", 1},
                          {"ts", ts},
                          {"s", "t"},
                          {"args",
                           {{"Bytes", bytes},
                            {"Addr", addr},
                            {"Total Allocated", total},
                            {"Total Reserved", 0},
                            {"Device Type", 0},
                            {"Device Id", -1}}}};
  };
  nlohmann::json ev = nlohmann::json::array(
      {x("ProfilerStep#1", "user_annotation", 0, 1000), x("aten::mm", "cpu_op", 10, 100),
       x("autograd::engine::evaluate_function: MmBackward0", "cpu_op", 300, 100),
       x("Optimizer.step#AdamW.step", "user_annotation", 600, 100),
       x("aten::_foreach_add_", "cpu_op", 610, 50),
       // 1000 bytes held before the first event (its total less its bytes)
       mem(20, 100, 0xA0, 1100),     // forward -> backward: activations
       mem(20.5, 8, 0xD0, 1108),     // forward, freed in forward: workspace
       mem(30, -50, 0xC0, 1058),     // a block from before the profiler: unattributed
       mem(60, -8, 0xD0, 1050),      //
       mem(320, 16, 0xE0, 1066),     // backward, kept: grads
       mem(350, -100, 0xA0, 966),    //
       mem(620, 200, 0xB0, 1166)});  // optimizer, kept: optimizer_state
  nlohmann::json trace = {
      {"distributedInfo", {{"rank", 0}, {"world_size", 1}, {"backend", "gloo"}}},
      {"traceEvents", ev}};
  write_file_atomic(dir + "/rank0.json", trace.dump());
  const TorchRank r = read_torch_trace(dir + "/rank0.json");
  EXPECT_EQ(r.mem_baseline, 1000);
  EXPECT_EQ(r.mem_mismatches, 0);
  const auto blocks = [&](MemCategory c) { return r.mem_blocks[static_cast<int>(c)]; };
  EXPECT_EQ(blocks(MemCategory::activations), 1);
  EXPECT_EQ(blocks(MemCategory::workspace), 1);
  EXPECT_EQ(blocks(MemCategory::grads), 1);
  EXPECT_EQ(blocks(MemCategory::optimizer_state), 1);
  EXPECT_EQ(blocks(MemCategory::unattributed), 0);  // blocks; the baseline is not one
  ASSERT_FALSE(r.mem.empty());
  EXPECT_EQ(r.mem.front().category, MemCategory::unattributed);
  EXPECT_EQ(r.mem.front().bytes, 1000);
  EXPECT_EQ(r.mem.back().total, 1166);
  // The unattributed baseline after its free: 950.
  int64_t unattributed = -1;
  for (const MemEvent& m : r.mem)
    if (m.category == MemCategory::unattributed) unattributed = m.cat_total;
  EXPECT_EQ(unattributed, 950);
  // A total that disagrees with the replay is counted, not hidden.
  ev[ev.size() - 1]["args"]["Total Allocated"] = 999;
  trace["traceEvents"] = ev;
  write_file_atomic(dir + "/rank0.json", trace.dump());
  EXPECT_EQ(read_torch_trace(dir + "/rank0.json").mem_mismatches, 1);
}
