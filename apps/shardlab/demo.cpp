// `shardlab demo`: two runs of run_training that differ only in the strategy, then one table.
#include "apps/shardlab/demo.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>

#include "core/train/trainer.hpp"

namespace shardlab {

namespace {

// The demo model: parameters dominate its memory (that is what FSDP shards) and a step takes a
// fraction of a second on a laptop core.
TrainConfig demo_config(const DemoOptions& o, Strategy s) {
  TrainConfig c;
  c.model = "small";  // V 256, L 4, C 256: 3.3M parameters
  c.seq = 64;
  c.batch = 2 * o.ranks;
  c.steps = o.steps;
  c.warmup = 5;
  c.engine.optim.lr = 3e-3f;
  c.print_every = o.steps >= 10 ? o.steps / 5 : 1;
  c.engine.strategy = s;
  c.ranks = o.ranks;
  c.run_dir = o.runs_root + "/demo-" + strategy_name(s);
  c.overwrite_run_dir = true;
  return c;
}

}  // namespace

int run_demo(const DemoOptions& o, std::ostream& out) {
  out << "shardlab demo: DP against FSDP. The small GPT (3.3M parameters) learns a synthetic "
         "Markov\n"
         "chain on "
      << o.ranks
      << " local ranks (threads, each with its own tracked memory), once "
         "with no_shard\n(DDP: every rank holds everything) and once with full_shard (FSDP: every "
         "rank holds 1/"
      << o.ranks
      << "\nof the parameters, gradients and Adam state, and gathers "
         "only the root,\nthe block in use and the one being prefetched).\n\n";
  TrainResult res[2];
  const Strategy strategies[2] = {Strategy::no_shard, Strategy::full_shard};
  for (int i = 0; i < 2; ++i) {
    out << "==== " << strategy_name(strategies[i]) << " ====\n";
    res[i] = run_training(demo_config(o, strategies[i]), out);
    out << "\n";
  }

  const double mib = 1024.0 * 1024.0;
  char line[160];
  out << "==== side by side (per rank; rank 0) ====\n";
  std::snprintf(line, sizeof line, "%-28s %18s %18s\n", "", "no_shard (DDP)", "full_shard (FSDP)");
  out << line;
  std::snprintf(line, sizeof line, "%-28s %18.2f %18.2f\n", "peak MiB", res[0].peak_bytes / mib,
                res[1].peak_bytes / mib);
  out << line;
  for (int c = 0; c < kNumMemCategories; ++c) {
    const int64_t a = res[0].peak_by_category[c], b = res[1].peak_by_category[c];
    if (a == 0 && b == 0) continue;
    std::snprintf(line, sizeof line, "  %-26s %18.2f %18.2f\n",
                  mem_category_name(static_cast<MemCategory>(c)), a / mib, b / mib);
    out << line;
  }
  std::snprintf(line, sizeof line, "%-28s %18.0f %18.0f\n", "tokens/s (all ranks)",
                res[0].tokens_per_s, res[1].tokens_per_s);
  out << line;
  // Both measures of core/comm/traffic.hpp, labelled as every report labels them.
  std::snprintf(line, sizeof line, "%-28s %18.2f %18.2f\n", "sent per rank, MiB/step",
                res[0].comm_bytes_per_step / mib, res[1].comm_bytes_per_step / mib);
  out << line;
  std::snprintf(line, sizeof line, "%-28s %18.2f %18.2f\n", "buffer, MiB/step",
                res[0].comm_buffer_per_step / mib, res[1].comm_buffer_per_step / mib);
  out << line;
  // The trainer's "final loss" is a mean over the last steps (the viewer shows the last step's
  // own loss, which is noisier): say which, so the two figures are not taken for one.
  const std::string final_label =
      "final loss, mean of last " + std::to_string(std::min<size_t>(10, res[0].losses.size()));
  std::snprintf(line, sizeof line, "%-28s %18.4f %18.4f\n", final_label.c_str(), res[0].final_loss,
                res[1].final_loss);
  out << line;
  out << "run directories: " << res[0].run_dir << ", " << res[1].run_dir << "\n";
  const auto ratio = [](int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / b : 0.0; };
  std::snprintf(line, sizeof line, "full_shard / no_shard: sent per rank %.2fx, buffer %.2fx\n",
                ratio(res[1].comm_bytes_per_step, res[0].comm_bytes_per_step),
                ratio(res[1].comm_buffer_per_step, res[0].comm_buffer_per_step));
  out << line;
  out << "\nThe categories are the tracker's at each run's peak. full_shard keeps params, grads "
         "and\n"
         "optimizer_state at 1/"
      << o.ranks
      << " and adds params_unsharded (the gathered units) "
         "and grads_unsharded\n(a unit's gradient before its reduce-scatter). Each rank sends "
         "1.5x what it sends under\nDDP (3 Psi (N-1)/N against 2 Psi (N-1)/N: two all-gathers "
         "and a reduce-scatter against one\nall-reduce); the buffers, the collectives' full "
         "sizes, are 3x (3 Psi against Psi). Open a\nrun directory with the viewer, or its "
         "trace.json in Perfetto. docs/fsdp.md explains the engine.\n";
  // A first run should say how far it got: the demo is short, so point at the longer run that
  // gets near the data's floor (docs/data.md measures it) instead of leaving 230% unexplained.
  const TrainResult& r = res[0];
  if (std::isfinite(r.entropy_rate) && r.final_loss > 1.2 * r.entropy_rate) {
    char hint[320];
    std::snprintf(
        hint, sizeof hint,
        "\nAfter %lld steps the loss is still %.0f%% above the data's floor (entropy rate "
        "%.4f):\nthe model has only begun to learn. `shardlab demo --steps 300` trains "
        "to within about 10%%\nof it (docs/data.md).\n",
        static_cast<long long>(r.losses.size()), 100.0 * (r.final_loss / r.entropy_rate - 1.0),
        r.entropy_rate);
    out << hint;
  }
  return 0;
}

}  // namespace shardlab
