// `shardlab data encode IN OUT` and `shardlab data info FILE`: make and inspect token files.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/shardlab/cli.hpp"
#include "core/base/file_io.hpp"
#include "core/train/corpus.hpp"
#include "core/train/token_file.hpp"

namespace shardlab {

CliCommand add_data_command(CLI::App& app) {
  struct Options {
    std::string enc_in, enc_out, info_path;
  };
  auto o = std::make_shared<Options>();
  CLI::App* data = app.add_subcommand("data", "make and inspect token files");
  data->require_subcommand(1);
  CLI::App* encode =
      data->add_subcommand("encode",
                           "write any file as an llm.c .bin shard, one uint16 token per byte\n"
                           "(example: shardlab data encode data/fsdp_notes.txt notes.bin)");
  encode->add_option("input", o->enc_in, "file to read (text or anything else)")->required();
  encode->add_option("output", o->enc_out, ".bin file to write (atomically)")->required();
  CLI::App* info =
      data->add_subcommand("info", "print what a data file holds: a .bin shard or a text file");
  info->add_option("file", o->info_path, "the file")->required();

  return {data, [o, encode] {
            if (*encode) {
              InputScope inputs;  // the output may not be the input
              const std::vector<uint8_t> bytes = read_file_bytes(o->enc_in);
              const std::vector<uint16_t> tokens(bytes.begin(), bytes.end());
              write_token_file(o->enc_out, tokens);
              std::cout << "wrote " << tokens.size() << " tokens (one per byte of '" << o->enc_in
                        << "') to '" << o->enc_out << "'\n";
              return 0;
            }
            const TokenCorpus c = load_corpus(o->info_path, SyntheticSpec{});
            std::cout << c.description << "\n";
            std::cout << "first tokens:";
            for (size_t i = 0; i < std::min<size_t>(16, c.tokens.size()); ++i)
              std::cout << " " << c.tokens[i];
            std::cout << "\n";
            return 0;
          }};
}

}  // namespace shardlab
