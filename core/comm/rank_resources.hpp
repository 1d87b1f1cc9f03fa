// What the launcher builds for each rank besides its communicator: the tracker, the recorder
// (attached to the tracker) and the device, torn down in the reverse order. Shared by the local
// and MPI launchers.
#pragma once

#include <memory>
#include <string>

#include "core/comm/launcher.hpp"

namespace shardlab {

struct RankResources {
  std::unique_ptr<MemoryTracker> tracker;
  std::unique_ptr<Recorder> recorder;
  std::unique_ptr<Device> device;

  RankResources() = default;
  RankResources(RankResources&&) = default;
  RankResources& operator=(RankResources&&) = default;
  ~RankResources();  // device, then the tracker's listener, recorder, tracker
};

// Tracker with capacity opts.mem_limit, the recorder from opts.make_recorder (a disabled one when
// null), and the device named by opts.device ("cpu", or "cuda": GPU `gpu`, or when it is -1 GPU
// `rank` modulo the GPU count).
RankResources make_rank_resources(const LaunchOptions& opts, int rank, int gpu = -1);

// "boom" from "rank 2: boom": the launcher adds the prefix itself.
std::string strip_rank_prefix(const std::string& message, int rank);

}  // namespace shardlab
