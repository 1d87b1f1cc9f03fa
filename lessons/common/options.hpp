// The command line every lesson shares: model, ranks, steps, batch, seed, where the run directory
// goes, --quick for tests and --json for the side-by-side table. Lessons parse it in one call.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/base/error.hpp"
#include "core/model/config.hpp"
#include "core/model/params.hpp"

namespace shardlab::lessons {

// Which lesson a program is: its number, its title, and what it prints in meta.json.
struct LessonInfo {
  int number = 1;
  const char* title = "";     // "data parallel"
  const char* strategy = "";  // the core strategy it corresponds to, e.g. "no_shard"
  const char* idea = "";      // one sentence printed under the title
  bool has_group = false;     // takes --group G (lesson 5)
};

struct LessonOptions {
  std::string model = "tiny";  // a GPTConfig preset
  int ranks = 4;               // N: data-parallel ranks (threads of the local backend)
  int group = 2;               // G: shard group size (lesson 5 only)
  int steps = 20;
  int batch = 8;         // B: global batch in sequences, split evenly over the ranks
  int seq = 64;          // T
  uint64_t seed = 1337;  // weights and data
  float lr = 3e-3f;      // AdamW, constant
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
  bool quick = false;   // a few short steps: what the tests run
  std::string run_dir;  // empty: runs/lessonNN
  std::string json;     // write the measured results here (for `make lessons-table`)

  GPTConfig config() const { return GPTConfig::preset(model); }
  int local_batch() const { return batch / ranks; }
};

// Parses argv; prints help or an error and exits on bad input (CLI11's own exit codes).
inline LessonOptions parse_options(int argc, char** argv, const LessonInfo& info) {
  LessonOptions o;
  CLI::App app{std::string("lesson ") + std::to_string(info.number) + ": " + info.title + ". " +
               info.idea};
  app.option_defaults()->always_capture_default();
  app.add_option("--model", o.model, "model preset: tiny | small | medium | gpt2");
  app.add_option("--ranks", o.ranks, "N, data-parallel ranks (threads)")->check(CLI::Range(1, 64));
  if (info.has_group)
    app.add_option("--group", o.group, "G, ranks a unit is sharded over (must divide N)")
        ->check(CLI::Range(1, 64));
  app.add_option("--steps", o.steps, "optimizer steps")->check(CLI::Range(1, 100000));
  app.add_option("--batch", o.batch, "global batch in sequences (a multiple of N)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--seq", o.seq, "tokens per sequence")->check(CLI::Range(1, 1 << 16));
  app.add_option("--seed", o.seed, "seed of the weights and of the data");
  app.add_option("--lr", o.lr, "AdamW learning rate");
  app.add_flag("--quick", o.quick, "3 steps of 32 tokens: what the tests run");
  app.add_option("--run-dir", o.run_dir, "run directory (default runs/lessonNN), overwritten");
  app.add_option("--json", o.json, "also write the measured results to this JSON file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  if (o.quick) {
    if (app.count("--steps") == 0) o.steps = 3;
    if (app.count("--seq") == 0) o.seq = 32;
  }
  if (o.run_dir.empty()) {
    char name[32];
    std::snprintf(name, sizeof name, "runs/lesson%02d", info.number);
    o.run_dir = name;
  }
  // Checks that need more than one option; the message names the options.
  const GPTConfig cfg = o.config();  // throws for an unknown preset
  SL_CHECK(o.batch % o.ranks == 0, "--batch ", o.batch, " must be a multiple of --ranks ", o.ranks,
           ": every rank takes the same number of sequences");
  SL_CHECK(o.seq <= cfg.max_seq_len, "--seq ", o.seq, " exceeds the ", o.model,
           " model's max_seq_len ", cfg.max_seq_len);
  if (info.has_group)
    SL_CHECK(o.ranks % o.group == 0, "--group ", o.group, " must divide --ranks ", o.ranks);
  return o;
}

}  // namespace shardlab::lessons
