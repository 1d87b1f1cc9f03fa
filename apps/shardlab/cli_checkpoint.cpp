// `shardlab export` and `shardlab inspect`: checkpoints as files to read
// (checkpoint_commands.hpp). Both report their own errors and return 0 (ok), 1 (bad or corrupted
// checkpoint) or 2 (usage).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "apps/shardlab/checkpoint_commands.hpp"
#include "apps/shardlab/cli.hpp"

namespace shardlab {

CliCommand add_export_command(CLI::App& app) {
  struct Options {
    std::string ckpt, out, dtype = "f32";
    bool hf_dir = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "write a checkpoint's parameters as one .safetensors file (or, with --hf-dir, a Hugging "
      "Face save_pretrained directory) under Hugging Face's names (GPT-2's, or "
      "LlamaForCausalLM's)");
  cmd->add_option("ckpt_dir", o->ckpt, "a checkpoint: step-<k>/ or a root with `latest`")
      ->required();
  cmd->add_option("output", o->out,
                  "the .safetensors file to write (atomically); with --hf-dir the directory")
      ->required();
  cmd->add_option("--dtype", o->dtype, "f32 | bf16")->capture_default_str();
  cmd->add_flag("--hf-dir", o->hf_dir,
                "write a save_pretrained directory (made if absent): model.safetensors and the "
                "config.json transformers' from_pretrained reads");
  cmd->footer(
      "\nExample: shardlab export ckpt gpt.safetensors --dtype bf16\n"
      "         shardlab export ckpt hf --hf-dir   (then from_pretrained(\"hf\") in transformers)\n"
      "         shardlab train --init-from gpt.safetensors ...\n");
  return {cmd, [o] {
            return export_command(o->ckpt, o->out, o->dtype, std::cout, std::cerr, o->hf_dir);
          }};
}

CliCommand add_inspect_command(CLI::App& app) {
  return add_directory_command(
      app, "inspect",
      "describe a checkpoint (step, config, files, which ranks hold which ranges) and verify "
      "every checksum",
      "ckpt_dir", "a checkpoint: step-<k>/ or a root with `latest`",
      [](const std::string& dir) { return inspect_command(dir, std::cout, std::cerr); });
}

}  // namespace shardlab
