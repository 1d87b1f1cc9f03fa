// The checkpoint subcommands of `shardlab`, as functions the command line calls:
//   shardlab export CKPT_DIR OUT.safetensors [--dtype f32|bf16]
//   shardlab inspect CKPT_DIR
// CKPT_DIR is a checkpoint directory (step-<k>/) or a root holding `latest`. They print to `out`,
// report errors on `err`, and return the process exit code: 0 ok, 1 failure (bad file, checksum
// mismatch), 2 usage error.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace shardlab {

// hf_dir: out_path is a Hugging Face save_pretrained directory (model.safetensors and
// config.json; made if absent), else the one .safetensors file to write.
int export_command(const std::string& ckpt_dir, const std::string& out_path,
                   const std::string& dtype, std::ostream& out, std::ostream& err,
                   bool hf_dir = false);
int inspect_command(const std::string& ckpt_dir, std::ostream& out, std::ostream& err);

// The same from raw arguments (those after the subcommand name), for a plain argv dispatch:
// export_main({"ckpt/", "gpt2.safetensors", "--dtype", "bf16"}, std::cout, std::cerr).
int export_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int inspect_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace shardlab
