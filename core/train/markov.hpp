// The synthetic corpus: an order-1 Markov chain over the vocabulary with a known entropy rate.
// A model that predicts token t+1 from the tokens before it cannot beat the chain's entropy rate
// H = sum_i pi_i * H(P_i) (nats/token, pi the stationary distribution), so the distance between a
// training loss and H says exactly how much the model has left to learn. See docs/data.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardlab {

// How the random chain is drawn. Each state gets `successors` distinct next tokens with
// probabilities from a flat Dirichlet (normalised Exp(1) draws), sharpened by `concentration`:
// weights are raised to that power before normalising (1 = Dirichlet(1), larger = peakier).
struct SyntheticSpec {
  int vocab = 256;             // states = tokens 0..vocab-1
  int successors = 4;          // distinct next tokens per state
  double concentration = 1.0;  // exponent on the Exp(1) weights
  uint64_t seed = 20240520;    // the chain; the sample drawn from it uses the same seed
  int64_t tokens = 1 << 21;    // corpus length drawn from the chain
};

class MarkovChain {
 public:
  struct Transition {
    int next;
    double prob;
  };

  // An explicit chain: rows[i] lists state i's successors. Probabilities must be positive and sum
  // to 1 per row (within 1e-9); every successor must be a state. Throws InvalidArgument.
  explicit MarkovChain(std::vector<std::vector<Transition>> rows);
  // A random chain from the spec (deterministic in spec.seed). State i always has i+1 (mod V)
  // among its successors, so the chain is irreducible and the stationary distribution unique.
  static MarkovChain random(const SyntheticSpec& spec);

  int num_states() const { return static_cast<int>(rows_.size()); }
  const std::vector<Transition>& row(int state) const { return rows_[state]; }
  // P(next | state); 0 when next is not a successor.
  double prob(int state, int next) const;

  // Stationary distribution by power iteration on the lazy chain (P + I) / 2, which has the same
  // stationary distribution and converges even when P is periodic.
  const std::vector<double>& stationary() const { return stationary_; }
  // H = sum_i pi_i * sum_j -P_ij log P_ij, in nats per token.
  double entropy_rate() const { return entropy_rate_; }

  // `n` tokens of a stationary sample: the first state drawn from pi, then the chain.
  std::vector<uint16_t> sample(int64_t n, uint64_t seed) const;
  // Mean -log P(x[t+1] | x[t]) over the sample: the true chain's per-token loss on it.
  double mean_nll(const std::vector<uint16_t>& tokens) const;

 private:
  void compute_stationary();

  std::vector<std::vector<Transition>> rows_;
  std::vector<double> stationary_;
  double entropy_rate_ = 0.0;
};

}  // namespace shardlab
