// `shardlab plan`: per-rank memory of each strategy before running anything
// (apps/shardlab/plan_command.hpp).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/shardlab/cli.hpp"
#include "apps/shardlab/plan_command.hpp"
#include "apps/shardlab/recommend.hpp"
#include "core/base/error.hpp"
#include "core/memory/tracker.hpp"

namespace shardlab {

namespace {

const EngineOptionHelp kPlanEngineHelp = {
    "Options",
    "hybrid_shard group size G (0: 2)",
    "all-gathers issued ahead",
    "f32 | bf16 | f16",
    "f32 | bf16 | f16",
    "micro-batches per step",
    "activation checkpointing",
    "per-rank device capacity, e.g. 16GiB: whether the whole peak fits (exit 2 if no strategy "
    "does; not compared with --params)",
    "FSDP units: block | whole | layer | blocks:K | size:N",
    "none | optim | params: what lives in host memory (a host peak column)",
    "per-rank host memory capacity (--offload; 0 = none)",
    "keep the root gathered between forward and backward, as PyTorch's FSDP does"};

// `plan --recommend`: plan's --model, --ranks, --seq and --mem-limit, and the Recommend group.
// The options it searches would be ignored: refused. --wrap and --offload name --wraps and
// --offloads, the search's own lists; --host-mem-limit caps the host tier of --offloads.
int run_recommend(const CLI::App& cmd, RecommendOptions r, const PlanCommandOptions& p,
                  const std::string& mem_limit, const std::string& host_mem_limit,
                  const std::vector<std::string>& dtypes, const std::vector<std::string>& wraps,
                  const std::vector<std::string>& offloads) {
  if (cmd.count("--wrap") > 0)
    SL_THROW(InvalidArgument, "--recommend searches the wrap policies of --wraps (default block): ",
             "drop --wrap, or give --wraps");
  if (cmd.count("--offload") > 0)
    SL_THROW(InvalidArgument, "--recommend searches the host tiers of --offloads (default none): ",
             "drop --offload, or give --offloads");
  for (const char* name :
       {"--params", "--strategy", "--batch", "--hybrid-group", "--prefetch", "--accum",
        "--act-ckpt", "--keep-root", "--param-dtype", "--reduce-dtype", "--math", "--n-layer",
        "--n-head", "--n-embd", "--vocab-size", "--max-seq-len"})
    if (cmd.count(name) > 0)
      SL_THROW(InvalidArgument, "--recommend chooses ", name + 2,
               " itself (or does not search it): drop ", name);
  if (p.seq < 0) SL_THROW(InvalidArgument, "--seq ", p.seq, ": must be >= 1 (0: the model's max)");
  // A name listed twice would be searched twice.
  for (const auto& [flag, list] :
       {std::pair<const char*, const std::vector<std::string>*>{"--dtypes", &dtypes},
        {"--wraps", &wraps},
        {"--offloads", &offloads}})
    for (size_t i = 0; i < list->size(); ++i)
      for (size_t k = 0; k < i; ++k)
        if ((*list)[i] == (*list)[k])
          SL_THROW(InvalidArgument, flag, ": '", (*list)[i], "' is listed twice");
  r.model = p.model;
  r.cluster_overrides = p.cluster_overrides;
  r.hf_config = p.hf_config;
  r.attention = p.attention;
  r.ranks = p.ranks;
  r.seq = p.seq;
  r.mem_cap = parse_bytes(mem_limit, "--mem-limit");
  r.dtypes.clear();
  for (const std::string& d : dtypes) r.dtypes.push_back(parse_dtype(d));
  r.wraps = wraps;
  r.offloads.clear();
  for (const std::string& x : offloads) {
    try {
      r.offloads.push_back(parse_offload(x));
    } catch (const InvalidArgument& e) {
      SL_THROW(InvalidArgument, "--offloads: ", e.what());
    }
  }
  r.host_cap = parse_bytes(host_mem_limit, "--host-mem-limit");
  return recommend_command(r, std::cout, &std::cerr);
}

}  // namespace

CliCommand add_plan_command(CLI::App& app) {
  // Strings parsed after CLI11 is done, so their errors read like every other one.
  struct Options {
    PlanCommandOptions plan;
    std::string params = "0";
    std::string attention = "naive";
    EngineOptionStrings engine;  // --param-dtype, --reduce-dtype, --mem-limit
    std::vector<std::string> strategies;
    bool recommend = false;  // --recommend: the strategy advisor (apps/shardlab/recommend.hpp)
    RecommendOptions rec;
    std::vector<std::string> dtypes = {"f32", "bf16"};
    std::vector<std::string> wraps = {"block"};
    std::vector<std::string> offloads = {"none"};
  };
  auto o = std::make_shared<Options>();
  PlanCommandOptions& p = o->plan;
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "per-rank memory by category for each strategy, from one step of the engine on the "
      "simulator's meta device (with --cluster also step time, tokens/s, exposed comm)");
  cmd->option_defaults()->always_capture_default();
  CLI::Option* preset = cmd->add_option("--model", p.model, "model preset: " + preset_list());
  cmd->add_option("--hf-config", p.hf_config,
                  "the shape of a Hugging Face config.json (or a directory holding one) instead "
                  "of a preset: GPT-2 or Llama family (llama, mistral, qwen2)")
      ->excludes(preset);
  cmd->add_option("--n-layer", p.n_layer, "override the preset's transformer blocks (0 = keep)");
  cmd->add_option("--n-head", p.n_head, "override the attention heads; must divide n_embd");
  cmd->add_option("--n-embd", p.n_embd, "override the residual width C");
  cmd->add_option("--vocab-size", p.vocab_size, "override the vocabulary size V");
  cmd->add_option("--max-seq-len", p.max_seq_len, "override the longest sequence the model takes");
  cmd->add_option("--attention", o->attention,
                  "naive | flash: the attention kernel, which decides what each block keeps for "
                  "backward (B x NH x T x T probabilities, or one log-sum-exp per row)");
  cmd->add_option("--params", o->params,
                  "model states only for this many parameters (e.g. 7.5e9), no shape: no "
                  "activations or gathered units, so never \"fits\" and never exit 2 (a limit is "
                  "not compared); excludes --model and the shape options");
  cmd->add_option("--ranks", p.ranks, "ranks N");
  cmd->add_option("--strategy", o->strategies, "strategies to plan (repeatable; default all)");
  cmd->add_option("--batch", p.batch, "sequences per rank per micro-batch");
  cmd->add_option("--seq", p.seq, "tokens per sequence (0: the model's max)");
  add_engine_options(cmd, p.engine, p.accum, o->engine, kPlanEngineHelp);
  cmd->add_flag("--decimal", p.decimal, "GB (1e9 bytes, as the ZeRO paper) instead of MiB");
  cmd->add_option("--cluster", p.cluster,
                  "also time the step on this cluster (a preset of shardlab simulate or a JSON "
                  "file): step ms, tokens/s, exposed comm ms columns");
  add_cluster_overrides(cmd, p.cluster_overrides);
  cmd->add_option("--math", p.math,
                  "fp32 | tf32 | bf16: the GEMM peak charged with --cluster (default: bf16 with "
                  "16-bit parameters, else fp32)");
  cmd->option_defaults()->group("Recommend");
  cmd->add_flag("--recommend", o->recommend,
                "simulate every strategy x hybrid group x prefetch x act-ckpt x micro-batches x "
                "dtypes (x --wraps) for --model on --ranks of --cluster (above) at --global-batch; "
                "print the fastest that fit --mem-limit (default: the GPU's memory)");
  cmd->add_option("--global-batch", o->rec.global_batch,
                  "sequences per step, all ranks: N x B x K (B sequences per micro-batch)");
  cmd->add_option("--top", o->rec.top, "configurations printed");
  cmd->add_option("--dtypes", o->dtypes, "parameter and gradient dtypes searched (f32, bf16)")
      ->delimiter(',');
  cmd->add_option("--wraps", o->wraps,
                  "wrap policies searched, e.g. block,layer,blocks:2 (default block; each one "
                  "multiplies the search)")
      ->delimiter(',');
  cmd->add_option("--offloads", o->offloads,
                  "host-memory tiers searched, e.g. none,optim,params (default none; params only "
                  "for full_shard and hybrid_shard); --host-mem-limit caps the host tier")
      ->delimiter(',');
  cmd->add_flag("--exhaustive", o->rec.exhaustive,
                "also simulate act-ckpt and offload where the same configuration without them "
                "fits");
  cmd->footer(
      "\nWith a model (always a shape: a preset and overrides), each strategy's plan is one\n"
      "training step of the real engine on the meta device, rank 0 of N: every allocation\n"
      "tracked, none held (docs/simulate.md). \"fits\" means the whole peak (and the host tier's\n"
      "with --host-mem-limit) fits --mem-limit, or with --cluster the GPU's memory: there the\n"
      "peak plus the GPU's headroom (CUDA context, NCCL's buffers, allocator fragmentation;\n"
      "--headroom) must fit. Exit 2 when there is a limit and no strategy fits.\n"
      "\nExamples:\n"
      "  shardlab plan --model gpt2 --ranks 8 --batch 4 --seq 1024 --mem-limit 16GiB\n"
      "  shardlab plan --model 7b --ranks 4 --batch 1 --seq 2048 --param-dtype bf16 \\\n"
      "      --reduce-dtype bf16 --act-ckpt --mem-limit 40GiB --cluster a100-40gb\n"
      "  shardlab plan --params 7.5e9 --ranks 64 --param-dtype f16 --reduce-dtype f16 --decimal\n"
      "      (model states only: the ZeRO paper's Figure 1, 120 / 31.4 / 16.6 / 1.9 GB)\n"
      "  shardlab plan --recommend --cluster h100-sxm --model 7b --ranks 64 --global-batch 256 \\\n"
      "      --seq 2048   (docs/choosing.md)\n");
  return {cmd, [o, cmd] {
            PlanCommandOptions& p = o->plan;
            p.attention = parse_attention_kernel(o->attention);
            if (o->recommend) {
              o->rec.cluster = p.cluster;
              try {
                return run_recommend(*cmd, o->rec, p, o->engine.mem_limit, o->engine.host_mem_limit,
                                     o->dtypes, o->wraps, o->offloads);
              } catch (const InvalidArgument& e) {  // a bad command line: usage, exit 2
                std::cerr << "shardlab: error: " << e.what() << "\n";
                return 2;
              }
            }
            if (cmd->count("--global-batch") > 0)
              SL_THROW(InvalidArgument, "--global-batch belongs to --recommend");
            char* end = nullptr;
            const double psi = std::strtod(o->params.c_str(), &end);
            if (end == o->params.c_str() || *end != 0 || !(psi >= 0))
              SL_THROW(InvalidArgument, "--params ", o->params,
                       ": expected a parameter count such as 7.5e9");
            // Given, it plans states only: 0.5 or -0 truncated to 0 planned the default model.
            if (cmd->count("--params") > 0 && !(psi >= 1 && psi == std::floor(psi)))
              SL_THROW(InvalidArgument, "--params ", o->params,
                       ": a parameter count is a whole number >= 1");
            // The cast of a double beyond int64 is undefined (it printed INT64_MIN); 2^56 is
            // the bound GPTConfig keeps too, so every byte count (x 16 and more) fits int64.
            if (!(psi <= 72057594037927936.0))
              SL_THROW(InvalidArgument, "--params ", o->params, ": ", psi,
                       " parameters is more than the 2^56 (7.2e+16) the planner counts");
            p.params = static_cast<int64_t>(psi);
            // With --params these shape the step, which a states-only plan has none of.
            for (const char* flag : {"--model", "--n-layer", "--n-head", "--n-embd", "--vocab-size",
                                     "--max-seq-len", "--batch", "--seq", "--accum", "--act-ckpt",
                                     "--wrap", "--prefetch", "--keep-root"})
              if (cmd->count(flag) > 0) p.shape_flags_given.emplace_back(flag);
            apply_engine_options(o->engine, p.engine, p.capacity);
            for (const std::string& s : o->strategies) p.strategies.push_back(parse_strategy(s));
            return plan_command(p, std::cout);
          }};
}

}  // namespace shardlab
