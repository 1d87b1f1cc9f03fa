// Divergence that stays finite. A NaN or Inf stops a run at its step (core/fsdp/optim_step.cpp),
// but a learning rate far too high can also take the loss from 5.5 to 69 and keep it there, every
// value finite. The watch compares each step's loss (the world mean, the same on every rank, so
// every rank decides alike) with the lowest the run has reached:
//   above:    loss > factor x best                   the step is suspect: warned, never saved
//   diverged: `steps` consecutive steps above        the run stops (mode stop) before saving
// It lives in the training loop, not the engine: the engine's schedule never depends on values
// (the simulator runs the same schedule without any).
#pragma once

#include <cstdint>
#include <string>

namespace shardlab {

enum class DivergenceMode : uint8_t { stop, warn, off };
const char* divergence_mode_name(DivergenceMode m);
DivergenceMode parse_divergence_mode(const std::string& s);  // stop | warn | off

struct DivergenceOptions {
  DivergenceMode mode = DivergenceMode::stop;
  double factor = 2.0;    // a loss above factor x the best so far is suspect
  int64_t steps = 10;     // this many suspect steps in a row: diverged
  void validate() const;  // InvalidArgument naming --divergence-factor / --divergence-steps
};

class DivergenceWatch {
 public:
  enum class Verdict : uint8_t { ok, above, diverged };
  explicit DivergenceWatch(DivergenceOptions o) : o_(o) {}
  // The loss of step `step` (finite). mode off: always ok.
  Verdict observe(int64_t step, double loss);
  double best() const { return best_; }
  int64_t best_step() const { return best_step_; }
  int64_t streak() const { return streak_; }            // consecutive suspect steps so far
  int64_t first_above() const { return first_above_; }  // the streak's first step
  // "loss 69.1 is above 2 x the best loss 5.51 (step 3) for 10 steps (since step 5)".
  std::string describe(double loss) const;

 private:
  DivergenceOptions o_;
  double best_ = 0;
  int64_t best_step_ = -1;
  int64_t streak_ = 0;
  int64_t first_above_ = -1;
};

}  // namespace shardlab
