// Training tokens for the lessons, made from a seed: an order-1 Markov chain in which every token
// has four possible successors with probabilities 1/2, 1/4, 3/20, 1/10. A model can learn it, and
// no model can beat its entropy rate (about 1.21 nats/token). Global batch `step` is the same for
// any number of ranks; rank r of N takes rows [r*B/N, (r+1)*B/N), so N ranks together see exactly
// what one rank with the whole batch sees.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace shardlab::lessons {

// splitmix64: a tiny generator whose output is the same on every platform.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct HostBatch {
  int rows = 0;                  // B/N sequences
  int seq = 0;                   // T
  std::vector<int32_t> tokens;   // (B/N, T)
  std::vector<int32_t> targets;  // (B/N, T): tokens shifted by one
};

class MarkovTokens {
 public:
  static constexpr int kSuccessors = 4;

  MarkovTokens(int vocab, uint64_t seed) : vocab_(vocab), seed_(seed), next_(vocab * kSuccessors) {
    uint64_t s = seed ^ 0x6c657373u;  // "less"
    for (int& n : next_) n = static_cast<int>(splitmix64(s) % static_cast<uint64_t>(vocab));
  }

  // H = -sum p log p over the successor probabilities (when the four successors are distinct).
  static double entropy_rate() {
    double h = 0;
    for (double p : kProbs) h -= p * std::log(p);
    return h;
  }

  // This rank's rows of global batch `step`.
  HostBatch batch(int step, int global_rows, int seq, int rank, int world) const {
    HostBatch b;
    b.rows = global_rows / world;
    b.seq = seq;
    b.tokens.resize(static_cast<size_t>(b.rows) * seq);
    b.targets.resize(b.tokens.size());
    std::vector<int32_t> row(static_cast<size_t>(seq) + 1);
    for (int i = 0; i < b.rows; ++i) {
      const int g = rank * b.rows + i;  // the global row
      uint64_t s = seed_ ^ (static_cast<uint64_t>(step) << 32) ^ static_cast<uint64_t>(g);
      splitmix64(s);
      int tok = static_cast<int>(splitmix64(s) % static_cast<uint64_t>(vocab_));
      for (int t = 0; t <= seq; ++t) {
        row[static_cast<size_t>(t)] = tok;
        tok = next(tok, static_cast<double>(splitmix64(s) >> 11) * 0x1.0p-53);
      }
      for (int t = 0; t < seq; ++t) {
        b.tokens[static_cast<size_t>(i) * seq + t] = row[static_cast<size_t>(t)];
        b.targets[static_cast<size_t>(i) * seq + t] = row[static_cast<size_t>(t) + 1];
      }
    }
    return b;
  }

 private:
  static constexpr double kProbs[kSuccessors] = {0.5, 0.25, 0.15, 0.1};

  int next(int tok, double u) const {
    for (int k = 0; k < kSuccessors; ++k) {
      if (u < kProbs[k] || k == kSuccessors - 1)
        return next_[static_cast<size_t>(tok) * kSuccessors + k];
      u -= kProbs[k];
    }
    return tok;
  }

  int vocab_;
  uint64_t seed_;
  std::vector<int> next_;  // (vocab, kSuccessors)
};

}  // namespace shardlab::lessons
