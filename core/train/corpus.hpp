// Where training tokens come from. Every source becomes a TokenCorpus (a token array plus what is
// known about it), so the loader and the trainer treat them alike:
//   "synthetic"     an order-1 Markov chain with a known entropy rate (core/train/markov.hpp)
//   any *.bin path  an llm.c token shard (core/train/token_file.hpp)
//   any other path  byte-level text: one token per byte, vocabulary 256
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/train/markov.hpp"

namespace shardlab {

enum class CorpusKind : uint8_t { synthetic, text, tokens };
const char* corpus_kind_name(CorpusKind k);

struct TokenCorpus {
  CorpusKind kind = CorpusKind::synthetic;
  std::string name;         // the path, or "synthetic"
  std::string description;  // one line for the run header
  std::vector<uint16_t> tokens;
  int vocab = 0;  // largest token + 1: the smallest vocabulary that can model it
  // The best achievable loss in nats/token when known (the synthetic chain's entropy rate), NaN
  // otherwise.
  double entropy_rate = std::numeric_limits<double>::quiet_NaN();
};

TokenCorpus make_synthetic_corpus(const SyntheticSpec& spec);
TokenCorpus load_text_corpus(const std::string& path);
TokenCorpus load_token_corpus(const std::string& path);
// Dispatches on `source` as described at the top of this file. Throws IoError naming the file.
TokenCorpus load_corpus(const std::string& source, const SyntheticSpec& spec);

}  // namespace shardlab
