// torch.profiler traces of a PyTorch job (DDP, FSDP1, FSDP2) as a ShardLab run directory, so that
// `shardlab summary` and `shardlab-viewer` read a user's own job as they read a run of the engine.
//
// One Chrome trace per rank, as torch.profiler's export_chrome_trace writes it (.json, or
// .json.gz):
// - the rank, world size and backend from "distributedInfo"; times are the trace's microseconds
//   on the host clock (baseTimeNanoseconds + ts), every rank placed on the earliest rank's start
//   (ranks on other hosts: their clocks' offsets are in the waits);
// - steps: the "ProfilerStep#N" spans of the main thread;
// - communication (gloo): each "gloo:<op>" span on a gloo worker thread, the collective as it ran,
//   matched in order with the "c10d::*" call on the main thread that issued it (t_issue). gloo
//   runs a reduce-scatter as an all-reduce of the whole buffer: recorded as the all_reduce it was,
//   and meta.json's "imported" says how many there were;
// - compute: the main thread's outermost operator spans (not the c10d calls), merged where one
//   follows the next within 50 us; forward, backward (autograd's) or optimizer (inside
//   "Optimizer.step#..."), and under FSDP2 the unit its "FSDP::pre_forward (NAME)" and
//   "FSDP::pre_backward (NAME)" labels put it in (inferred: named so in meta.json);
// - units: FSDP2's module names from those labels ("blocks.0"), the root as unit 0, and their
//   states: gathering from "FSDP::all_gather (NAME)", unsharded after its copy-out, resharded
//   after "FSDP::post_forward" (not the root) and "FSDP::post_backward_reshard";
// - GPU traces (any "kernel" event): communication is the NCCL kernels, compute the other kernels
//   (memcpy and memset left out, as HTA does), each joined to its launching CPU call by its
//   correlation id; the collective's op, size and group from the kernel's arguments (recent
//   PyTorch) or the c10d call around the launch; a step ends with its last kernel.
// A subset of a job's ranks (2 of 128) is imported as such: rows 0..K-1 of a K-rank run
// directory, meta.json's "imported" naming each row's rank in the job and the job's size.
// - memory: the [memory] events (profile_memory=True) of the rank's device, each block's
//   category inferred from when it was allocated and freed (rules in map_memory; meta.json and
//   the summary say "inferred"), what the rules cannot place and what was held before the first
//   event as "unattributed".
// Not imported yet: FSDP1's units.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/trace/run_reader.hpp"

namespace shardlab {

// One rank's trace, read and mapped (times in ns on the host clock, not yet shifted).
// The most ranks a traced job may have (its distributedInfo world_size); what one import holds is
// bounded by kMaxRunRanks.
constexpr int kMaxTraceRanks = 1 << 20;

struct TorchRank {
  std::string path;
  int rank = -1, world = 0;
  std::string backend;
  std::string device_name;  // GPU traces: deviceProperties[0].name
  bool gpu = false;         // a GPU trace (kernels)
  int64_t start_ns = 0;     // the first ProfilerStep's start
  std::vector<StepEvent> steps;
  std::vector<SpanEvent> spans;        // compute and comm, by t_end
  std::vector<std::string> units;      // unit names by index; 0 is the root ("")
  std::vector<UnitEvent> unit_events;  // FSDP2's gathers and reshards, by its labels
  int64_t reduce_scatters_as_all_reduce = 0;
  int64_t unmatched_comm = 0;     // collectives with no c10d call found to issue them
  int64_t comm_size_unknown = 0;  // collectives whose size the trace does not hold ("op(?)")
  // Memory, from the [memory] events of the rank's device (the GPU's on a GPU trace, else the
  // CPU's): every allocation and free in time order, each block's category inferred from when it
  // was allocated and freed (map_memory in torch_trace.cpp; docs/import.md). Times in ns on the
  // host clock, not yet shifted. Empty without [memory] events (profile_memory=False).
  std::vector<MemEvent> mem;
  int64_t mem_events = 0;      // [memory] events of the device read
  int64_t mem_baseline = 0;    // held before the first event, as unattributed
  int64_t mem_mismatches = 0;  // events whose "Total Allocated" differs from the replayed total
  MemArray mem_blocks{};       // blocks attributed to each category
  std::string mem_device;      // "cpu", "cuda:0"
};

// Reads one trace. IoError naming the file for what is not a torch.profiler trace: not JSON (or
// truncated), no "traceEvents", no "distributedInfo" with rank and world_size, no ProfilerStep.
TorchRank read_torch_trace(const std::string& path);

// Writes `out_dir` (a new or empty directory) as a run directory of the ranks of `traces` (files,
// or directories whose *.json and *.json.gz files are the traces): meta.json (world size, backend,
// "imported": the sources and what was inferred or left out), rank<R>.jsonl and summary.json. A
// rank given twice, ranks of different world sizes, and CPU and GPU traces mixed are refused
// naming the files; more than kMaxRunRanks traces are refused. Returns the job's ranks written,
// by row.
std::vector<int> import_torch_traces(const std::vector<std::string>& traces,
                                     const std::string& out_dir);

}  // namespace shardlab
