// shardlab-viewer-make-run: writes a synthetic run directory (see synthetic_run.hpp) for the
// viewer's tests, docs and frame-time measurements. With --step-ms it writes one step at a time,
// pausing between steps, like a training run the viewer follows live.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <CLI/CLI.hpp>

#include "core/base/error.hpp"
#include "tests/viewer/synthetic_run.hpp"

int main(int argc, char** argv) {
  using namespace shardlab;
  viewer::testing::SyntheticOptions o;
  std::string out, mem_limit;
  int step_ms = 0;
  bool partial = false;
  CLI::App app{"Writes a synthetic run directory (meta.json, rank<R>.jsonl, summary.json)."};
  app.add_option("out", out, "run directory to write (replaced if it exists)")->required();
  app.add_option("--ranks", o.ranks, "ranks")->capture_default_str();
  app.add_option("--steps", o.steps, "training steps")->capture_default_str();
  app.add_option("--units", o.units, "FSDP units per model")->capture_default_str();
  app.add_flag("--offload", o.offload,
               "as --offload params: host-tier memory events and h2d/d2h copy spans");
  app.add_option("--strategy", o.strategy, "full_shard or no_shard")->capture_default_str();
  app.add_option("--mem-limit", mem_limit, "capacity written to meta.json (e.g. 160MiB)");
  app.add_option("--seed", o.seed, "jitter seed")->capture_default_str();
  app.add_option("--step-ms", step_ms, "write one step at a time, this many ms apart (live)");
  app.add_flag("--partial", partial, "with --step-ms: leave a half-written line between steps");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!mem_limit.empty()) o.mem_limit = parse_bytes(mem_limit);
    RunData run = viewer::testing::make_synthetic_run(o, out);
    std::filesystem::remove_all(out);
    if (step_ms <= 0) {
      viewer::testing::write_run_dir(run, out);
      std::printf("wrote %s: %d ranks, %d steps\n", out.c_str(), o.ranks, o.steps);
      return 0;
    }
    viewer::testing::RunDirWriter w(run, out);
    w.write_meta();
    for (const StepEvent& s : run.ranks[0].steps) {
      int64_t t_end = 0;
      for (const RankTrace& r : run.ranks)
        for (const StepEvent& e : r.steps)
          if (e.step == s.step) t_end = std::max(t_end, e.t);
      w.append_until(t_end);
      if (partial) w.append_partial(0, 20);
      std::printf("step %d written\n", s.step);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    }
    w.append_until(INT64_MAX);
    w.write_summary();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardlab-viewer-make-run: %s\n", e.what());
    return 1;
  }
}
