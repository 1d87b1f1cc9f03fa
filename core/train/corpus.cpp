// Building a TokenCorpus from each kind of source.
#include "core/train/corpus.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <new>
#include <stdexcept>

#include "core/base/error.hpp"
#include "core/memory/tracker.hpp"
#include "core/train/token_file.hpp"

namespace shardlab {

const char* corpus_kind_name(CorpusKind k) {
  switch (k) {
    case CorpusKind::synthetic: return "synthetic";
    case CorpusKind::text: return "text";
    default: return "tokens";
  }
}

namespace {

int vocab_of(const std::vector<uint16_t>& tokens) {
  int top = -1;
  for (uint16_t t : tokens) top = std::max(top, static_cast<int>(t));
  return top + 1;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TokenCorpus make_synthetic_corpus(const SyntheticSpec& spec) {
  SL_CHECK(spec.tokens >= 2, "synthetic corpus: tokens ", spec.tokens);
  MarkovChain chain = MarkovChain::random(spec);
  TokenCorpus c;
  c.kind = CorpusKind::synthetic;
  c.name = "synthetic";
  try {
    c.tokens = chain.sample(spec.tokens, spec.seed);
  } catch (const std::bad_alloc&) {
    // A bare "std::bad_alloc" named neither the option nor the size it asked for.
    SL_THROW(InvalidArgument, "synthetic corpus: --corpus-tokens ", spec.tokens, " needs ",
             format_bytes(spec.tokens > INT64_MAX / 2 ? INT64_MAX : spec.tokens * 2),
             " of host memory, which could not be allocated");
  } catch (const std::length_error&) {
    SL_THROW(InvalidArgument, "synthetic corpus: --corpus-tokens ", spec.tokens,
             " is more tokens than one vector holds");
  }
  c.vocab = spec.vocab;
  c.entropy_rate = chain.entropy_rate();
  char line[200];
  std::snprintf(line, sizeof line,
                "synthetic Markov chain: %d states, %d successors each, seed %llu, %lld tokens; "
                "entropy rate %.4f nats/token",
                spec.vocab, spec.successors, static_cast<unsigned long long>(spec.seed),
                static_cast<long long>(spec.tokens), c.entropy_rate);
  c.description = line;
  return c;
}

TokenCorpus load_text_corpus(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  TokenCorpus c;
  c.kind = CorpusKind::text;
  c.name = path;
  c.tokens.assign(bytes.begin(), bytes.end());
  c.vocab = 256;  // bytes: the vocabulary is every byte value, whichever occur
  c.description = "byte-level text '" + path + "': " + std::to_string(c.tokens.size()) + " tokens";
  return c;
}

TokenCorpus load_token_corpus(const std::string& path) {
  TokenCorpus c;
  c.kind = CorpusKind::tokens;
  c.name = path;
  c.tokens = read_token_file(path);
  c.vocab = vocab_of(c.tokens);
  c.description = "llm.c token shard '" + path + "': " + std::to_string(c.tokens.size()) +
                  " tokens, largest id " + std::to_string(c.vocab - 1);
  return c;
}

TokenCorpus load_corpus(const std::string& source, const SyntheticSpec& spec) {
  if (source == "synthetic") return make_synthetic_corpus(spec);
  if (ends_with(source, ".bin")) return load_token_corpus(source);
  return load_text_corpus(source);
}

}  // namespace shardlab
