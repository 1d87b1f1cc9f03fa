// `shardlab simulate`: the engine itself on one simulated rank of an N-rank job on a cluster
// (docs/simulate.md). Runs `train`'s loop on backend sim (MetaDevice, SimCommunicator, virtual
// clock), writes an ordinary run directory with virtual times, and prints the predictions.
#pragma once

#include <iosfwd>
#include <string>

#include "core/fsdp/memory_plan.hpp"
#include "core/memory/tracker.hpp"
#include "core/train/trainer.hpp"

namespace shardlab {

struct SimulateResult {
  TrainResult train;            // the loop's result: step times are virtual
  double step_s = 0;            // the last step's predicted time
  double tokens_per_s = 0;      // all ranks
  double model_flops = 0;       // per step, all ranks: (6 params + 12 L C T) per token
  double mfu = 0;               // model_flops / (step_s x ranks x peak of the GEMM math)
  double exposed_comm_s = -1;   // per step on the simulated rank (-1: no run directory)
  double comm_s = -1;           // per step, the comm lane's busy time
  int64_t peak_bytes = 0;       // the simulated rank's peak
  MemArray peak_by_category{};  // each category's own peak
  int64_t gpu_memory = 0;       // the cluster's memory per GPU
  HeadroomBytes headroom;       // what the GPU holds beyond peak_bytes (the spec's headroom)
  // The peak plus the headroom within the GPU's memory.
  bool fits() const { return peak_bytes + headroom.total() <= gpu_memory; }
};

// cfg: `train`'s settings plus cluster (a preset or JSON file) or cluster_spec; backend and device
// are set here. Prints the run's header, its step lines and the predictions to `out`.
SimulateResult run_simulation(TrainConfig cfg, std::ostream& out);

// The GEMM math a simulation charges when none is named: bf16 when parameters are 16-bit, else
// fp32 (the engine's GEMMs are fp32, as torch's are by default).
GemmMath default_gemm_math(const EngineConfig& e);

}  // namespace shardlab
