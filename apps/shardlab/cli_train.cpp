// `shardlab train`: every option of TrainConfig, grouped as the help shows them.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "apps/shardlab/cli.hpp"
#include "core/base/error.hpp"
#include "core/memory/tracker.hpp"
#include "core/model/config.hpp"
#include "core/optim/optimizer.hpp"
#include "core/train/trainer.hpp"

namespace shardlab {

std::string preset_list() {
  std::string s;
  for (const std::string& n : GPTConfig::preset_names()) s += (s.empty() ? "" : "|") + n;
  return s;
}

namespace {

const EngineOptionHelp kTrainEngineHelp = {
    "Parallelism",
    "hybrid_shard only: ranks per shard group G (must divide the ranks; 0 = all)",
    "units whose all-gather is issued ahead of the one computing (0 = off)",
    "f32 | bf16 | f16: gathered parameters (fp32 master copy kept)",
    "f32 | bf16 | f16: gradient reduction",
    "micro-batches per step (gradient accumulation)",
    "recompute each block's forward during its backward",
    "per-rank memory capacity, e.g. 512MiB (0 = none): over it, out of memory",
    "FSDP units (gathered and freed together): block (root + one per block) | whole (one unit) | "
    "layer (each block's attention and MLP apart) | blocks:K (K blocks a unit) | size:N (PyTorch's "
    "size_based_auto_wrap_policy, min_num_params N); docs/fsdp.md",
    "none | optim | params: host memory, a second tier. optim: the optimizer state (m, v, fp32 "
    "master) and its step; the gradient shard is copied down and the updated parameters up each "
    "step. params (full_shard, hybrid_shard): the parameter and gradient shards too, each shard "
    "copied up before its all-gather and down after its reduction (cpu device, and simulate's "
    "meta device; docs/fsdp.md, CPU offload)",
    "per-rank host memory capacity with --offload, e.g. 1GiB (0 = none): over it, out of memory",
    "full_shard, hybrid_shard: keep the root unit gathered from the loss to the head's backward, "
    "as PyTorch's FSDP keeps its root (one all-gather of the root fewer per step, same memory; "
    "docs/fsdp.md)"};

}  // namespace

// Each section names its help group once: the options after it join that group. `simulate`
// leaves out what a simulation has no use for (data files, threads, backends, checkpoints,
// faults) and words --ranks for it.
void add_train_options(CLI::App* cmd, TrainConfig& c, TrainOptionStrings& s, bool simulate) {
  cmd->option_defaults()->always_capture_default();
  // A later occurrence wins, so scripts can append overrides to a base command line.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  EngineConfig& e = c.engine;

  cmd->option_defaults()->group("Model");
  CLI::Option* preset =
      cmd->add_option("--model", c.model, "model preset: " + preset_list() + " (sizes below)");
  cmd->add_option("--hf-config", c.hf_config,
                  "the shape of a Hugging Face config.json (or a directory holding one) instead "
                  "of a preset: GPT-2 or Llama family (llama, mistral, qwen2)")
      ->excludes(preset);
  cmd->add_option("--n-layer", c.n_layer, "override the preset's transformer blocks (0 = keep)");
  cmd->add_option("--n-head", c.n_head, "override the attention heads; must divide n_embd");
  cmd->add_option("--n-embd", c.n_embd, "override the residual width C");
  cmd->add_option("--vocab-size", c.vocab_size, "override the vocabulary size V");
  cmd->add_option("--max-seq-len", c.max_seq_len, "override the longest sequence the model takes");
  cmd->add_option("--attention", s.attention,
                  "naive (keeps each block's B x NH x T x T probabilities for backward) | flash "
                  "(tiled online softmax: keeps one log-sum-exp per row, recomputes in backward)")
      ->capture_default_str();

  if (!simulate) {
    cmd->option_defaults()->group("Data");
    cmd->add_option("--data", c.data,
                    "synthetic (Markov chain, known best loss) | FILE.bin (llm.c shard) | any "
                    "other FILE (bytes)");
    cmd->add_option("--synthetic-vocab", c.synthetic.vocab, "synthetic: number of distinct tokens");
    cmd->add_option("--synthetic-successors", c.synthetic.successors,
                    "synthetic: possible next tokens after each token");
    cmd->add_option("--corpus-seed", c.synthetic.seed,
                    "synthetic: seed of the chain and its sample");
    cmd->add_option("--corpus-tokens", c.synthetic.tokens,
                    "synthetic: tokens drawn from the chain");
  }

  cmd->option_defaults()->group("Training");
  cmd->add_option("--steps", c.steps, "optimizer steps to run");
  cmd->add_option("--batch", c.batch, "sequences per step (B)");
  cmd->add_option("--seq", c.seq, "tokens per sequence (T); at most the model's max_seq_len");
  cmd->add_option("--seed", e.seed, "seed of the initial weights and of the batch order");
  cmd->add_option("--print-every", c.print_every,
                  "print a line every k steps (0 = every step up to 100 steps, else ~50 lines)");
  if (!simulate)
    cmd->add_option("--threads", c.threads, "OpenBLAS threads for the matrix products");

  cmd->option_defaults()->group("Optimizer");
  cmd->add_option("--optimizer", s.optimizer, "adamw | sgd");
  cmd->add_option("--lr", e.optim.lr, "peak learning rate");
  cmd->add_option("--warmup", c.warmup, "steps of linear warmup to the peak rate");
  cmd->add_option("--schedule", s.schedule, "after warmup: cosine | constant");
  cmd->add_option("--min-lr-ratio", c.min_lr_ratio, "cosine ends at lr * this ratio");
  cmd->add_option("--weight-decay", e.optim.weight_decay,
                  "AdamW: decoupled decay (p -= lr*wd*p); SGD: L2 added to the gradient");
  cmd->add_option("--beta1", e.optim.beta1, "AdamW first-moment decay");
  cmd->add_option("--beta2", e.optim.beta2, "AdamW second-moment decay");
  cmd->add_option("--eps", e.optim.eps, "AdamW epsilon");
  cmd->add_option("--momentum", e.optim.momentum, "SGD momentum (0 = plain SGD)");

  cmd->option_defaults()->group("Parallelism");
  cmd->add_option("--strategy", s.strategy,
                  "no_shard (DDP) | shard_optim (ZeRO-1) | shard_grad_op (ZeRO-2) | full_shard "
                  "(ZeRO-3, FSDP) | hybrid_shard (HSDP)");
  if (simulate) {
    cmd->add_option("--ranks", c.ranks,
                    "ranks (GPUs) of the job: one is simulated and stands for all of them");
  } else {
    cmd->add_option("--ranks", c.ranks,
                    "ranks: local threads each with its own tracked memory, or GPUs with nccl");
    cmd->add_option("--backend", c.backend,
                    "local (threads) | mpi (under mpirun: one process per rank, --ranks ignored) "
                    "| nccl (one GPU per rank; needs --device cuda)");
    cmd->add_option("--device", c.device, "cpu | cuda (needs --backend nccl and a CUDA build)");
    cmd->add_option("--bind-to", s.bind_to,
                    "local ranks: core (each rank's thread on a CPU of its own when 2 or more "
                    "ranks fit on the CPUs this process may use, as mpirun binds at -np 2) | none "
                    "(the scheduler places them)");
  }
  add_engine_options(cmd, e, c.accum, s.engine, kTrainEngineHelp);
  cmd->add_option("--max-inflight-gathers", e.max_inflight_gathers,
                  "at most this many all-gathers in flight, the one about to be used included "
                  "(0 = no cap): bounds the gathered units' memory");
  cmd->add_option("--accum-mode", s.accum_mode,
                  "sharded gradients: reduce_each (memory stays sharded) | no_sync (reduce once)");
  cmd->add_option("--clip", e.clip, "clip the global gradient norm to this (0 = off)");

  cmd->option_defaults()->group("Tracing");
  cmd->add_option("--trace", s.trace,
                  "on: write a run directory (the viewer and `shardlab summary` read it) | off");
  cmd->add_option("--run-dir", c.run_dir, "the run directory (auto = runs/<strategy>-n<N>-<time>)");
  cmd->add_flag("--overwrite", c.overwrite_run_dir, "reuse a non-empty --run-dir");

  if (simulate) return;

  cmd->option_defaults()->group("Checkpoints");
  cmd->add_option("--save-every", c.save_every,
                  "save a checkpoint every K steps and after the last one (0 = never)");
  cmd->add_option("--ckpt-dir", c.ckpt_dir, "where checkpoints go: DIR/step-<k>/ and DIR/latest");
  cmd->add_option("--keep-last", c.keep_last, "keep only the newest N checkpoints (0 = all)");
  cmd->add_option("--resume", c.resume,
                  "continue from a checkpoint: DIR (step-<k>/ or a root with `latest`) or latest "
                  "(the newest in --ckpt-dir); any strategy and --ranks");
  cmd->add_option("--init-from", c.init_from,
                  "start from the parameters of a .safetensors file or a save_pretrained directory "
                  "(shardlab export, or Hugging Face weights of this shape)");

  cmd->option_defaults()->group("Reliability");
  cmd->add_option("--collective-timeout", c.collective_timeout,
                  "seconds a rank may wait in one collective; then the watchdog stops the job, "
                  "names the ranks that did not arrive and writes flight.json");
  cmd->add_option("--slow-rank", s.slow_rank,
                  "R:F  make rank R's forward and backward take F times as long (a straggler "
                  "on demand: see who waits in `shardlab summary`)");
  cmd->add_option("--hang-rank", s.hang_rank,
                  "R:STEP:S  rank R sleeps S seconds before step STEP, outside any collective "
                  "(to see the watchdog fire)");
  cmd->add_option("--kill-rank", s.kill_rank,
                  "R:STEP  under mpirun, rank R's process kills itself (SIGKILL) before step "
                  "STEP, as a crash would (to see what the other ranks leave in flight.json)");
  cmd->add_option("--on-divergence", s.on_divergence,
                  "stop | warn | off: a loss above --divergence-factor x the best so far is "
                  "suspect (warned, not saved); --divergence-steps of them in a row: stop "
                  "(exit 1, no checkpoint of the diverged state), or only warn")
      ->capture_default_str();
  cmd->add_option("--divergence-factor", c.divergence.factor,
                  "a loss above this many times the best so far is suspect")
      ->capture_default_str();
  cmd->add_option("--divergence-steps", c.divergence.steps,
                  "suspect steps in a row that make a divergence")
      ->capture_default_str();
}

void apply_train_options(TrainConfig& c, const TrainOptionStrings& s) {
  c.attention = parse_attention_kernel(s.attention);
  c.engine.optim.kind = parse_optimizer_kind(s.optimizer);
  c.schedule = parse_lr_schedule(s.schedule);
  c.engine.strategy = parse_strategy(s.strategy);
  apply_engine_options(s.engine, c.engine, c.mem_limit);
  c.engine.accum_mode = parse_accum_mode(s.accum_mode);
  if (!s.slow_rank.empty()) c.slow_rank = parse_slow_rank(s.slow_rank);
  if (!s.hang_rank.empty()) c.hang_rank = parse_hang_rank(s.hang_rank);
  if (!s.kill_rank.empty()) c.kill_rank = parse_kill_rank(s.kill_rank);
  c.divergence.mode = parse_divergence_mode(s.on_divergence);
  if (s.bind_to != "core" && s.bind_to != "none")
    SL_THROW(InvalidArgument, "--bind-to '", s.bind_to, "': expected core or none");
  c.bind_to_cores = s.bind_to == "core";
  if (s.trace == "off") {
    if (c.run_dir != "auto" && !c.run_dir.empty())
      SL_THROW(InvalidArgument, "--trace off and --run-dir ", c.run_dir, ": choose one");
    c.run_dir.clear();
  } else if (s.trace != "on") {
    SL_THROW(InvalidArgument, "--trace '", s.trace, "': expected on or off");
  }
}

namespace {

const char* kTrainFooter =
    "\nPresets (parameters): tiny 0.1M (V 256, T 64, L 2, C 64); small 3.3M (V 256, T 256, L 4,\n"
    "C 256); medium 25.6M (V 256, T 512, L 8, C 512); gpt2 124M (V 50257, T 1024, L 12, C 768).\n"
    "Each step prints: step | loss (mean since the previous line) | lr | tokens/s | peak MiB.\n"
    "\nExamples:\n"
    "  shardlab train                                   small model, synthetic data, defaults\n"
    "  shardlab train --model tiny --steps 50 --lr 3e-3\n"
    "  shardlab train --data data/fsdp_notes.txt --steps 500 --seq 128\n"
    "  shardlab train --ranks 4 --strategy full_shard --run-dir runs/fsdp4\n"
    "  shardlab summary runs/fsdp4\n"
    "  shardlab train --ranks 4 --steps 200 --save-every 50 --ckpt-dir ckpt\n"
    "  shardlab train --ranks 2 --strategy no_shard --steps 300 --ckpt-dir ckpt --resume latest\n"
    "  shardlab train --ranks 4 --strategy no_shard --mem-limit 40MiB      (out of memory)\n"
    "  mpirun -np 4 shardlab train --backend mpi --strategy hybrid_shard --hybrid-group 2\n"
    "  shardlab data encode data/fsdp_notes.txt notes.bin && shardlab train --data notes.bin\n"
    "  shardlab train --backend nccl --device cuda --ranks 8 --model gpt2  (CUDA build)\n";

}  // namespace

CliCommand add_train_command(CLI::App& app) {
  struct Options {
    TrainConfig cfg;
    TrainOptionStrings str;
  };
  auto o = std::make_shared<Options>();
  o->cfg.run_dir = "auto";  // the command line traces by default; --trace off turns it off
  CLI::App* cmd = app.add_subcommand(
      "train", "train a GPT on N ranks with any sharding strategy, one line per step");
  add_train_options(cmd, o->cfg, o->str, false);
  cmd->footer(kTrainFooter);
  return {cmd, [o, cmd] {
            apply_train_options(o->cfg, o->str);
            // validate() sees only the value: an explicit --hybrid-group 0 is refused here.
            const EngineConfig& e = o->cfg.engine;
            if (cmd->count("--hybrid-group") > 0 && e.strategy != Strategy::hybrid_shard)
              SL_THROW(InvalidArgument, hybrid_group_unused_message(e.hybrid_group, e.strategy));
            run_training(o->cfg, std::cout);
            return 0;
          }};
}

}  // namespace shardlab
