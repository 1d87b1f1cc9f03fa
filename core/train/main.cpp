// `shardlab`: the command line. Subcommands:
//   shardlab train [options]          train a GPT on N ranks with any sharding strategy
//   shardlab demo                     DP against FSDP on 4 local ranks, side by side
//   shardlab plan [options]           per-rank memory of each strategy, before running anything
//   shardlab data encode IN OUT       turn any file into an llm.c .bin shard (one token per byte)
//   shardlab data info FILE           what a data file holds, as the trainer would load it
// Errors from the library (shardlab::Error) become one line "shardlab: error: ..." and exit 1.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <string>

#include "core/base/error.hpp"
#include "core/comm/launcher.hpp"
#include "core/fsdp/plan_command.hpp"
#include "core/memory/tracker.hpp"
#include "core/model/config.hpp"
#include "core/optim/optimizer.hpp"
#include "core/train/corpus.hpp"
#include "core/train/demo.hpp"
#include "core/train/token_file.hpp"
#include "core/train/trainer.hpp"

using namespace shardlab;

namespace {

std::string preset_list() {
  std::string s;
  for (const std::string& n : GPTConfig::preset_names()) s += (s.empty() ? "" : "|") + n;
  return s;
}

// String options parsed after CLI11 is done, so their errors read like every other one.
struct TrainStrings {
  std::string optimizer = "adamw";
  std::string schedule = "cosine";
  std::string strategy = "full_shard";
  std::string param_dtype = "f32";
  std::string reduce_dtype = "f32";
  std::string accum_mode = "reduce_each";
  std::string mem_limit = "0";
};

void add_train_options(CLI::App* cmd, TrainConfig& c, TrainStrings& s) {
  cmd->option_defaults()->always_capture_default();

  cmd->add_option("--model", c.model, "model preset: " + preset_list() + " (sizes below)")
      ->group("Model");
  cmd->add_option("--n-layer", c.n_layer, "override the preset's transformer blocks (0 = keep)")
      ->group("Model");
  cmd->add_option("--n-head", c.n_head, "override the attention heads; must divide n_embd")
      ->group("Model");
  cmd->add_option("--n-embd", c.n_embd, "override the residual width C")->group("Model");
  cmd->add_option("--vocab-size", c.vocab_size, "override the vocabulary size V")->group("Model");
  cmd->add_option("--max-seq-len", c.max_seq_len, "override the longest sequence the model takes")
      ->group("Model");

  cmd->add_option("--data", c.data,
                  "synthetic (Markov chain, known best loss) | FILE.bin (llm.c shard) | any "
                  "other FILE (bytes)")
      ->group("Data");
  cmd->add_option("--synthetic-vocab", c.synthetic.vocab, "synthetic: number of distinct tokens")
      ->group("Data");
  cmd->add_option("--synthetic-successors", c.synthetic.successors,
                  "synthetic: possible next tokens after each token")
      ->group("Data");
  cmd->add_option("--corpus-seed", c.synthetic.seed, "synthetic: seed of the chain and its sample")
      ->group("Data");
  cmd->add_option("--corpus-tokens", c.synthetic.tokens, "synthetic: tokens drawn from the chain")
      ->group("Data");

  cmd->add_option("--steps", c.steps, "optimizer steps to run")->group("Training");
  cmd->add_option("--batch", c.batch, "sequences per step (B)")->group("Training");
  cmd->add_option("--seq", c.seq, "tokens per sequence (T); at most the model's max_seq_len")
      ->group("Training");
  cmd->add_option("--seed", c.seed, "seed of the initial weights and of the batch order")
      ->group("Training");
  cmd->add_option("--print-every", c.print_every,
                  "print a line every k steps (0 = every step up to 100 steps, else ~50 lines)")
      ->group("Training");
  cmd->add_option("--threads", c.threads, "OpenBLAS threads for the matrix products")
      ->group("Training");

  cmd->add_option("--optimizer", s.optimizer, "adamw | sgd")->group("Optimizer");
  cmd->add_option("--lr", c.optim.lr, "peak learning rate")->group("Optimizer");
  cmd->add_option("--warmup", c.warmup, "steps of linear warmup to the peak rate")
      ->group("Optimizer");
  cmd->add_option("--schedule", s.schedule, "after warmup: cosine | constant")->group("Optimizer");
  cmd->add_option("--min-lr-ratio", c.min_lr_ratio, "cosine ends at lr * this ratio")
      ->group("Optimizer");
  cmd->add_option("--weight-decay", c.optim.weight_decay,
                  "AdamW: decoupled decay (p -= lr*wd*p); SGD: L2 added to the gradient")
      ->group("Optimizer");
  cmd->add_option("--beta1", c.optim.beta1, "AdamW first-moment decay")->group("Optimizer");
  cmd->add_option("--beta2", c.optim.beta2, "AdamW second-moment decay")->group("Optimizer");
  cmd->add_option("--eps", c.optim.eps, "AdamW epsilon")->group("Optimizer");
  cmd->add_option("--momentum", c.optim.momentum, "SGD momentum (0 = plain SGD)")
      ->group("Optimizer");

  cmd->add_option("--strategy", s.strategy,
                  "no_shard (DDP) | shard_optim (ZeRO-1) | shard_grad_op (ZeRO-2) | full_shard "
                  "(ZeRO-3, FSDP) | hybrid_shard (HSDP)")
      ->group("Parallelism");
  cmd->add_option("--ranks", c.ranks, "local ranks (threads, each with its own tracked memory)")
      ->group("Parallelism");
  cmd->add_option("--backend", c.backend,
                  "local (threads) | mpi (under mpirun: one process per rank, --ranks ignored)")
      ->group("Parallelism");
  cmd->add_option("--hybrid-group", c.hybrid_group,
                  "hybrid_shard: ranks per shard group G (must divide the ranks; 0 = all)")
      ->group("Parallelism");
  cmd->add_option("--prefetch", c.prefetch,
                  "units whose all-gather is issued ahead of the one computing (0 = off)")
      ->group("Parallelism");
  cmd->add_option("--max-inflight-gathers", c.max_inflight_gathers,
                  "at most this many all-gathers in flight, the one about to be used included "
                  "(0 = no cap): bounds the gathered units' memory")
      ->group("Parallelism");
  cmd->add_option("--param-dtype", s.param_dtype,
                  "f32 | bf16 | f16: gathered parameters (fp32 master copy kept)")
      ->group("Parallelism");
  cmd->add_option("--reduce-dtype", s.reduce_dtype, "f32 | bf16 | f16: gradient reduction")
      ->group("Parallelism");
  cmd->add_option("--accum", c.accum, "micro-batches per step (gradient accumulation)")
      ->group("Parallelism");
  cmd->add_option("--accum-mode", s.accum_mode,
                  "sharded gradients: reduce_each (memory stays sharded) | no_sync (reduce once)")
      ->group("Parallelism");
  cmd->add_option("--clip", c.clip, "clip the global gradient norm to this (0 = off)")
      ->group("Parallelism");
  cmd->add_flag("--act-ckpt", c.act_ckpt, "recompute each block's forward during its backward")
      ->group("Parallelism");
  cmd->add_option("--mem-limit", s.mem_limit,
                  "per-rank memory capacity, e.g. 512MiB (0 = none): over it, out of memory")
      ->group("Parallelism");
  cmd->add_option("--run-dir", c.run_dir,
                  "write the trace here (auto = runs/<strategy>-n<N>-<time>; empty = none)")
      ->group("Tracing");
  cmd->add_flag("--overwrite", c.overwrite_run_dir, "reuse a non-empty --run-dir")
      ->group("Tracing");
}

void apply_strings(TrainConfig& c, const TrainStrings& s) {
  c.optim.kind = parse_optimizer_kind(s.optimizer);
  c.schedule = parse_lr_schedule(s.schedule);
  c.strategy = parse_strategy(s.strategy);
  c.param_dtype = parse_dtype(s.param_dtype);
  c.reduce_dtype = parse_dtype(s.reduce_dtype);
  c.accum_mode = parse_accum_mode(s.accum_mode);
  c.mem_limit = parse_bytes(s.mem_limit);
}

const char* kTrainFooter =
    "\nPresets (parameters): tiny 0.1M (V 256, T 64, L 2, C 64); small 3.3M (V 256, T 256, L 4,\n"
    "C 256); medium 25.6M (V 256, T 512, L 8, C 512); gpt2 124M (V 50257, T 1024, L 12, C 768).\n"
    "Each step prints: step | loss (mean since the previous line) | lr | tokens/s | peak MiB.\n"
    "\nExamples:\n"
    "  shardlab train                                   small model, synthetic data, defaults\n"
    "  shardlab train --model tiny --steps 50 --lr 3e-3\n"
    "  shardlab train --data data/fsdp_notes.txt --steps 500 --seq 128\n"
    "  shardlab train --ranks 4 --strategy full_shard --run-dir auto\n"
    "  shardlab train --ranks 4 --strategy no_shard --mem-limit 40MiB      (out of memory)\n"
    "  mpirun -np 4 shardlab train --backend mpi --strategy hybrid_shard --hybrid-group 2\n"
    "  shardlab data encode data/fsdp_notes.txt notes.bin && shardlab train --data notes.bin\n";

int run_data_info(const std::string& path) {
  TokenCorpus c = load_corpus(path, SyntheticSpec{});
  std::cout << c.description << "\n";
  std::cout << "first tokens:";
  for (size_t i = 0; i < std::min<size_t>(16, c.tokens.size()); ++i)
    std::cout << " " << c.tokens[i];
  std::cout << "\n";
  return 0;
}

int run_data_encode(const std::string& in, const std::string& out) {
  std::vector<uint8_t> bytes = read_file_bytes(in);
  std::vector<uint16_t> tokens(bytes.begin(), bytes.end());
  write_token_file(out, tokens);
  std::cout << "wrote " << tokens.size() << " tokens (one per byte of '" << in << "') to '" << out
            << "'\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "shardlab: an observable FSDP training lab. Trains a GPT-2 style model with hand-written\n"
      "forward and backward passes and shows where every byte of memory goes.\n"};
  app.name("shardlab");
  app.require_subcommand(1);
  app.footer(
      "\nStart with `shardlab demo`, then `shardlab train --help`.\n"
      "Example: shardlab train --model small --data synthetic --steps 300");

  TrainConfig train_cfg;
  TrainStrings train_str;
  CLI::App* train = app.add_subcommand(
      "train", "train a model on one rank and print one line per step");
  add_train_options(train, train_cfg, train_str);
  train->footer(kTrainFooter);

  DemoOptions demo_opts;
  CLI::App* demo = app.add_subcommand(
      "demo", "DP against FSDP: the small model on 4 local ranks with no_shard and full_shard");
  demo->add_option("--steps", demo_opts.steps, "steps per run")->capture_default_str();
  demo->add_option("--ranks", demo_opts.ranks, "local ranks")->capture_default_str();
  demo->add_option("--runs", demo_opts.runs_root, "where the two run directories go")
      ->capture_default_str();

  PlanCommandOptions plan_opts;
  std::string plan_params = "0", plan_limit = "0", plan_pd = "f32", plan_rd = "f32";
  std::vector<std::string> plan_strategies;
  CLI::App* plan = app.add_subcommand(
      "plan", "per-rank memory by category for each strategy (the planner), without running");
  plan->option_defaults()->always_capture_default();
  plan->add_option("--model", plan_opts.model, "model preset: " + preset_list());
  plan->add_option("--params", plan_params,
                   "plan model states for this many parameters instead (e.g. 7.5e9)");
  plan->add_option("--ranks", plan_opts.ranks, "ranks N");
  plan->add_option("--hybrid-group", plan_opts.hybrid_group, "hybrid_shard group size G (0: 2)");
  plan->add_option("--strategy", plan_strategies, "strategies to plan (repeatable; default all)");
  plan->add_option("--param-dtype", plan_pd, "f32 | bf16 | f16");
  plan->add_option("--reduce-dtype", plan_rd, "f32 | bf16 | f16");
  plan->add_option("--batch", plan_opts.batch, "sequences per rank per micro-batch");
  plan->add_option("--seq", plan_opts.seq, "tokens per sequence (0: the model's max)");
  plan->add_option("--accum", plan_opts.accum, "micro-batches per step");
  plan->add_option("--prefetch", plan_opts.prefetch, "all-gathers issued ahead");
  plan->add_flag("--act-ckpt", plan_opts.act_ckpt, "activation checkpointing");
  plan->add_option("--mem-limit", plan_limit, "per-rank capacity, e.g. 16GiB (exit 2 if none fits)");
  plan->add_flag("--decimal", plan_opts.decimal, "GB (1e9 bytes, as the ZeRO paper) instead of MiB");
  plan->footer(
      "\nExample (the ZeRO paper's Figure 1: 120, 31.4, 16.6, 1.9 GB):\n"
      "  shardlab plan --params 7.5e9 --ranks 64 --param-dtype f16 --reduce-dtype f16 --decimal\n"
      "  shardlab plan --model gpt2 --ranks 8 --batch 4 --seq 1024 --mem-limit 16GiB\n");

  CLI::App* data = app.add_subcommand("data", "make and inspect token files");
  data->require_subcommand(1);
  std::string enc_in, enc_out, info_path;
  CLI::App* encode = data->add_subcommand(
      "encode", "write any file as an llm.c .bin shard, one uint16 token per byte\n"
                "(example: shardlab data encode data/fsdp_notes.txt notes.bin)");
  encode->add_option("input", enc_in, "file to read (text or anything else)")->required();
  encode->add_option("output", enc_out, ".bin file to write (atomically)")->required();
  CLI::App* info = data->add_subcommand(
      "info", "print what a data file holds: a .bin shard or a text file");
  info->add_option("file", info_path, "the file")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (*train) {
      apply_strings(train_cfg, train_str);
      run_training(train_cfg, std::cout);
    } else if (*demo) {
      return run_demo(demo_opts, std::cout);
    } else if (*plan) {
      char* end = nullptr;
      const double psi = std::strtod(plan_params.c_str(), &end);
      if (end == plan_params.c_str() || *end != 0 || !(psi >= 0))
        SL_THROW(InvalidArgument, "--params ", plan_params,
                 ": expected a parameter count such as 7.5e9");
      plan_opts.params = static_cast<int64_t>(psi);
      plan_opts.capacity = parse_bytes(plan_limit);
      plan_opts.param_dtype = parse_dtype(plan_pd);
      plan_opts.reduce_dtype = parse_dtype(plan_rd);
      for (const std::string& s : plan_strategies) plan_opts.strategies.push_back(parse_strategy(s));
      return plan_command(plan_opts, std::cout);
    } else if (*encode) {
      return run_data_encode(enc_in, enc_out);
    } else if (*info) {
      return run_data_info(info_path);
    }
  } catch (const Error& e) {
    std::cerr << "shardlab: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "shardlab: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
