// DataLoader: batches (B, T) of input tokens and next-token targets from a TokenCorpus.
//
// The corpus is cut into windows of T+1 tokens that overlap by one (window w = tokens
// [w*T, w*T + T]); inputs are its first T tokens, targets its last T. Each epoch visits every
// window once in an order shuffled from (seed, epoch). Global batch b is rows b*B .. b*B+B-1 of
// that endless sequence, and rank r of N takes rows [r*B/N, (r+1)*B/N) of it: a single-rank run
// with global batch B sees exactly the tokens that N ranks with B/N each see together.
// The whole state is the number of global batches served (position), so resume is exact.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/train/corpus.hpp"

namespace shardlab {

struct LoaderConfig {
  int64_t batch = 8;  // B: the global batch in sequences, over all ranks
  int64_t seq = 64;   // T: tokens per sequence
  int rank = 0;       // this rank's slice of each global batch
  int world = 1;      // N ranks; must divide B
  uint64_t seed = 1;  // the window order
};

struct Batch {
  int64_t rows = 0;              // B/N sequences
  int64_t seq = 0;               // T
  std::vector<int32_t> inputs;   // (B/N, T)
  std::vector<int32_t> targets;  // (B/N, T)
};

class DataLoader {
 public:
  // Throws InvalidArgument when B, T, rank or world are out of range or the corpus has fewer than
  // T+1 tokens (the message names the corpus).
  DataLoader(std::shared_ptr<const TokenCorpus> corpus, const LoaderConfig& cfg);

  // This rank's rows of the next global batch: inputs and targets are (B/N, T) each.
  void next(int32_t* inputs, int32_t* targets);
  Batch next();

  int64_t local_batch() const { return cfg_.batch / cfg_.world; }
  int64_t seq() const { return cfg_.seq; }
  const LoaderConfig& config() const { return cfg_; }
  const TokenCorpus& corpus() const { return *corpus_; }

  // Global batches served so far; the only state there is.
  int64_t position() const { return position_; }
  void set_position(int64_t batches);
  int64_t windows_per_epoch() const { return windows_; }
  // The epoch the next row comes from.
  int64_t epoch() const { return position_ * cfg_.batch / windows_; }

 private:
  // Start token of the window at global row g of the endless shuffled sequence.
  int64_t window_start(int64_t g);

  std::shared_ptr<const TokenCorpus> corpus_;
  LoaderConfig cfg_;
  int64_t windows_ = 0;
  int64_t position_ = 0;
  int64_t perm_epoch_ = -1;    // epoch whose order perm_ holds
  std::vector<int64_t> perm_;  // window order of perm_epoch_
};

}  // namespace shardlab
