// The divergence watch of the training loop (divergence.hpp).
#include "core/train/divergence.hpp"

#include <cmath>
#include <cstdio>

#include "core/base/error.hpp"

namespace shardlab {

const char* divergence_mode_name(DivergenceMode m) {
  switch (m) {
    case DivergenceMode::stop: return "stop";
    case DivergenceMode::warn: return "warn";
    default: return "off";
  }
}

DivergenceMode parse_divergence_mode(const std::string& s) {
  if (s == "stop") return DivergenceMode::stop;
  if (s == "warn") return DivergenceMode::warn;
  if (s == "off") return DivergenceMode::off;
  SL_THROW(InvalidArgument, "--on-divergence '", s, "': expected stop, warn or off");
}

void DivergenceOptions::validate() const {
  if (!(factor > 1.0) || !std::isfinite(factor))
    SL_THROW(InvalidArgument, "--divergence-factor ", factor,
             ": must be a finite number > 1 (a loss this many times the best is suspect)");
  if (steps < 1 || steps > 1000000)
    SL_THROW(InvalidArgument, "--divergence-steps ", steps, ": must be in [1, 1000000]");
}

DivergenceWatch::Verdict DivergenceWatch::observe(int64_t step, double loss) {
  if (o_.mode == DivergenceMode::off || !std::isfinite(loss)) return Verdict::ok;
  if (best_step_ < 0 || loss < best_) {
    best_ = loss;
    best_step_ = step;
  }
  // A best at or below 0 (a loss cannot be negative; 0 is a perfect fit) has no multiple to
  // exceed meaningfully: nothing is suspect then.
  if (best_ > 0 && loss > o_.factor * best_) {
    if (streak_++ == 0) first_above_ = step;
    return streak_ >= o_.steps ? Verdict::diverged : Verdict::above;
  }
  streak_ = 0;
  first_above_ = -1;
  return Verdict::ok;
}

std::string DivergenceWatch::describe(double loss) const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "loss %.4g is above %g x the best loss %.4g (step %lld), %lld step%s in a row "
                "(since step %lld)",
                loss, o_.factor, best_, static_cast<long long>(best_step_),
                static_cast<long long>(streak_), streak_ == 1 ? "" : "s",
                static_cast<long long>(first_above_));
  return buf;
}

}  // namespace shardlab
