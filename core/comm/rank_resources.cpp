// Per-rank tracker, recorder and device, built and torn down in one place for every launcher.
#include "core/comm/rank_resources.hpp"

#include "core/trace/recorder.hpp"

namespace shardlab {

RankResources::~RankResources() {
  device.reset();
  if (recorder) recorder->detach();  // the recorder goes before the tracker it listens to
  recorder.reset();
  tracker.reset();
}

RankResources make_rank_resources(const LaunchOptions& opts, int rank, int gpu) {
  if (opts.mem_limit < 0)
    SL_THROW(InvalidArgument, "launch: mem_limit ", opts.mem_limit, " must be >= 0 (0: unlimited)");
  RankResources r;
  r.tracker = std::make_unique<MemoryTracker>(rank, opts.mem_limit);
  r.recorder = opts.make_recorder ? opts.make_recorder(rank) : Recorder::disabled(rank);
  if (!r.recorder) r.recorder = Recorder::disabled(rank);
  if (r.recorder->enabled()) r.recorder->attach(*r.tracker);
  if (opts.device == "cpu") {
    r.device = make_cpu_device(*r.tracker);
  } else if (opts.device == "cuda") {
    const int gpus = cuda_device_count();
    r.device = make_cuda_device(*r.tracker, gpu >= 0 ? gpu : gpus > 0 ? rank % gpus : 0);
  } else {
    SL_THROW(InvalidArgument, "launch: unknown device '", opts.device, "' (expected cpu or cuda)");
  }
  return r;
}

std::string strip_rank_prefix(const std::string& message, int rank) {
  const std::string prefix = "rank " + std::to_string(rank) + ": ";
  return message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size()) : message;
}

}  // namespace shardlab
