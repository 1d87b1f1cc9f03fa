// The synthetic Markov corpus: drawing a chain, its stationary distribution and entropy rate,
// sampling from it.
#include "core/train/markov.hpp"

#include <algorithm>
#include <cmath>

#include "core/base/error.hpp"
#include "core/train/rng.hpp"

namespace shardlab {

MarkovChain::MarkovChain(std::vector<std::vector<Transition>> rows) : rows_(std::move(rows)) {
  const int V = num_states();
  SL_CHECK(V >= 1 && V <= 65536, "MarkovChain: ", V, " states (need 1..65536 for uint16 tokens)");
  for (int i = 0; i < V; ++i) {
    SL_CHECK(!rows_[i].empty(), "MarkovChain: state ", i, " has no successors");
    double sum = 0.0;
    for (const Transition& t : rows_[i]) {
      SL_CHECK(t.next >= 0 && t.next < V, "MarkovChain: state ", i, " has successor ", t.next,
               " outside 0..", V - 1);
      SL_CHECK(t.prob > 0.0, "MarkovChain: state ", i, " -> ", t.next, " has probability ", t.prob);
      sum += t.prob;
    }
    SL_CHECK(std::fabs(sum - 1.0) < 1e-9, "MarkovChain: state ", i, " probabilities sum to ", sum);
  }
  compute_stationary();
}

MarkovChain MarkovChain::random(const SyntheticSpec& spec) {
  SL_CHECK(spec.vocab >= 2 && spec.vocab <= 65536, "synthetic corpus: vocab ", spec.vocab,
           " (need 2..65536)");
  SL_CHECK(spec.successors >= 1 && spec.successors <= spec.vocab, "synthetic corpus: successors ",
           spec.successors, " (need 1..vocab ", spec.vocab, ")");
  SL_CHECK(spec.concentration > 0.0, "synthetic corpus: concentration ", spec.concentration);
  const int V = spec.vocab, K = spec.successors;
  SplitMix64 rng(spec.seed);
  std::vector<std::vector<Transition>> rows(V);
  std::vector<int> picked;
  for (int i = 0; i < V; ++i) {
    // i+1 first (a Hamiltonian cycle through all states keeps the chain irreducible), then K-1
    // more distinct states by rejection, which is cheap while K << V.
    picked.assign(1, (i + 1) % V);
    while (static_cast<int>(picked.size()) < K) {
      int s = static_cast<int>(rng.next_below(static_cast<uint64_t>(V)));
      if (std::find(picked.begin(), picked.end(), s) == picked.end()) picked.push_back(s);
    }
    double sum = 0.0;
    std::vector<double> w(K);
    for (int k = 0; k < K; ++k) {
      // Exp(1) draws normalised are a Dirichlet(1) sample; the power sharpens it.
      double e = -std::log(1.0 - rng.next_double());
      w[k] = std::pow(std::max(e, 1e-12), spec.concentration);
      sum += w[k];
    }
    for (int k = 0; k < K; ++k) rows[i].push_back({picked[k], w[k] / sum});
    // Renormalise the last entry so the row sums to 1 as exactly as doubles allow.
    double s = 0.0;
    for (int k = 0; k + 1 < K; ++k) s += rows[i][k].prob;
    rows[i][K - 1].prob = 1.0 - s;
  }
  return MarkovChain(std::move(rows));
}

double MarkovChain::prob(int state, int next) const {
  for (const Transition& t : rows_.at(state))
    if (t.next == next) return t.prob;
  return 0.0;
}

void MarkovChain::compute_stationary() {
  const int V = num_states();
  std::vector<double> pi(V, 1.0 / V), nxt(V);
  // Lazy chain: pi' = (pi + pi P) / 2. Convergence is geometric for an irreducible chain; the
  // iteration cap is far beyond what the chains here need (a few hundred iterations).
  for (int it = 0; it < 1000000; ++it) {
    for (int j = 0; j < V; ++j) nxt[j] = 0.5 * pi[j];
    for (int i = 0; i < V; ++i)
      for (const Transition& t : rows_[i]) nxt[t.next] += 0.5 * pi[i] * t.prob;
    double diff = 0.0, sum = 0.0;
    for (int j = 0; j < V; ++j) {
      diff += std::fabs(nxt[j] - pi[j]);
      sum += nxt[j];
    }
    for (int j = 0; j < V; ++j) pi[j] = nxt[j] / sum;
    if (diff < 1e-14) break;
  }
  stationary_ = pi;
  double h = 0.0;
  for (int i = 0; i < V; ++i) {
    double hi = 0.0;
    for (const Transition& t : rows_[i]) hi -= t.prob * std::log(t.prob);
    h += pi[i] * hi;
  }
  entropy_rate_ = h;
}

namespace {
// Index of the outcome u falls into, over probabilities that sum to 1.
int draw(const std::vector<MarkovChain::Transition>& row, double u) {
  double c = 0.0;
  for (size_t k = 0; k + 1 < row.size(); ++k) {
    c += row[k].prob;
    if (u < c) return row[k].next;
  }
  return row.back().next;
}
}  // namespace

std::vector<uint16_t> MarkovChain::sample(int64_t n, uint64_t seed) const {
  SL_CHECK(n >= 0, "MarkovChain::sample: n ", n);
  std::vector<uint16_t> out(static_cast<size_t>(n));
  if (n == 0) return out;
  SplitMix64 rng(mix_seed(seed, 0x5eed));
  // First state from pi so the whole sample is stationary.
  double u = rng.next_double(), c = 0.0;
  int s = num_states() - 1;
  for (int j = 0; j < num_states(); ++j) {
    c += stationary_[j];
    if (u < c) {
      s = j;
      break;
    }
  }
  out[0] = static_cast<uint16_t>(s);
  for (int64_t t = 1; t < n; ++t) {
    s = draw(rows_[s], rng.next_double());
    out[t] = static_cast<uint16_t>(s);
  }
  return out;
}

double MarkovChain::mean_nll(const std::vector<uint16_t>& tokens) const {
  SL_CHECK(tokens.size() >= 2, "MarkovChain::mean_nll: need at least 2 tokens");
  double sum = 0.0;
  for (size_t t = 0; t + 1 < tokens.size(); ++t) {
    double p = prob(tokens[t], tokens[t + 1]);
    SL_CHECK(p > 0.0, "MarkovChain::mean_nll: transition ", tokens[t], " -> ", tokens[t + 1],
             " at position ", t, " has probability 0 under the chain");
    sum -= std::log(p);
  }
  return sum / static_cast<double>(tokens.size() - 1);
}

}  // namespace shardlab
