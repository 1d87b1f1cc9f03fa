// `shardlab`: the command line. Subcommands:
//   shardlab train [options]          train a GPT on synthetic data, a text file or a .bin shard
//   shardlab demo                     a short run that shows what the lab does
//   shardlab data encode IN OUT       turn any file into an llm.c .bin shard (one token per byte)
//   shardlab data info FILE           what a data file holds, as the trainer would load it
// Errors from the library (shardlab::Error) become one line "shardlab: error: ..." and exit 1.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include "core/base/error.hpp"
#include "core/model/config.hpp"
#include "core/optim/optimizer.hpp"
#include "core/train/corpus.hpp"
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
}

void apply_strings(TrainConfig& c, const TrainStrings& s) {
  c.optim.kind = parse_optimizer_kind(s.optimizer);
  c.schedule = parse_lr_schedule(s.schedule);
}

const char* kTrainFooter =
    "\nPresets (parameters): tiny 0.1M (V 256, T 64, L 2, C 64); small 3.3M (V 256, T 256, L 4,\n"
    "C 256); medium 25.6M (V 256, T 512, L 8, C 512); gpt2 124M (V 50257, T 1024, L 12, C 768).\n"
    "Each step prints: step | loss (mean since the previous line) | lr | tokens/s | peak MiB.\n"
    "\nExamples:\n"
    "  shardlab train                                   small model, synthetic data, defaults\n"
    "  shardlab train --model tiny --steps 50 --lr 3e-3\n"
    "  shardlab train --data data/fsdp_notes.txt --steps 500 --seq 128\n"
    "  shardlab data encode data/fsdp_notes.txt notes.bin && shardlab train --data notes.bin\n";

int run_data_info(const std::string& path) {
  TokenCorpus c = load_corpus(path, SyntheticSpec{});
  std::cout << c.description << "\n";
  std::cout << "first tokens:";
  for (size_t i = 0; i < std::min<size_t>(16, c.tokens.size()); ++i) std::cout << " " << c.tokens[i];
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

  int64_t demo_steps = 150;
  CLI::App* demo = app.add_subcommand(
      "demo", "train the small model on the synthetic corpus for a short while (under a minute)");
  demo->add_option("--steps", demo_steps, "steps to run")->capture_default_str();

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
      TrainConfig c;  // the train defaults: small model, synthetic corpus
      c.steps = demo_steps;
      std::cout << "shardlab demo: the small GPT learns a synthetic Markov chain on one rank.\n"
                   "Watch the loss fall towards the chain's entropy rate, the lowest loss any\n"
                   "model can reach on this data.\n\n";
      run_training(c, std::cout);
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
