// DataLoader: shuffled windows, global batches, rank slices.
#include "core/train/data_loader.hpp"

#include <numeric>
#include <utility>

#include "core/base/error.hpp"
#include "core/train/rng.hpp"

namespace shardlab {

DataLoader::DataLoader(std::shared_ptr<const TokenCorpus> corpus, const LoaderConfig& cfg)
    : corpus_(std::move(corpus)), cfg_(cfg) {
  SL_CHECK(corpus_ != nullptr, "DataLoader: no corpus");
  SL_CHECK(cfg_.batch > 0, "DataLoader: batch ", cfg_.batch, " must be positive");
  SL_CHECK(cfg_.seq > 0, "DataLoader: seq ", cfg_.seq, " must be positive");
  SL_CHECK(cfg_.world > 0 && cfg_.rank >= 0 && cfg_.rank < cfg_.world, "DataLoader: rank ",
           cfg_.rank, " of world ", cfg_.world);
  SL_CHECK(cfg_.batch % cfg_.world == 0, "DataLoader: global batch ", cfg_.batch,
           " is not divisible by ", cfg_.world, " ranks");
  const int64_t n = static_cast<int64_t>(corpus_->tokens.size());
  if (n < cfg_.seq + 1)
    SL_THROW(InvalidArgument, "data '", corpus_->name, "' has ", n,
             " tokens, too few for one sequence of ", cfg_.seq, " tokens plus its target");
  windows_ = (n - 1) / cfg_.seq;
}

void DataLoader::set_position(int64_t batches) {
  SL_CHECK(batches >= 0, "DataLoader: position ", batches);
  position_ = batches;
}

int64_t DataLoader::window_start(int64_t g) {
  const int64_t e = g / windows_;
  if (e != perm_epoch_) {
    // Fisher-Yates from (seed, epoch): the same order on every rank and every run.
    perm_.resize(static_cast<size_t>(windows_));
    std::iota(perm_.begin(), perm_.end(), int64_t{0});
    SplitMix64 rng(mix_seed(cfg_.seed, static_cast<uint64_t>(e)));
    for (int64_t i = windows_ - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(rng.next_below(static_cast<uint64_t>(i + 1)));
      std::swap(perm_[i], perm_[j]);
    }
    perm_epoch_ = e;
  }
  return perm_[g % windows_] * cfg_.seq;
}

void DataLoader::next(int32_t* inputs, int32_t* targets) {
  const int64_t T = cfg_.seq, rows = local_batch();
  const int64_t first = position_ * cfg_.batch + cfg_.rank * rows;
  const uint16_t* tok = corpus_->tokens.data();
  for (int64_t j = 0; j < rows; ++j) {
    const uint16_t* w = tok + window_start(first + j);
    for (int64_t t = 0; t < T; ++t) {
      inputs[j * T + t] = w[t];
      targets[j * T + t] = w[t + 1];
    }
  }
  ++position_;
}

Batch DataLoader::next() {
  Batch b;
  b.rows = local_batch();
  b.seq = cfg_.seq;
  b.inputs.resize(static_cast<size_t>(b.rows * b.seq));
  b.targets.resize(static_cast<size_t>(b.rows * b.seq));
  next(b.inputs.data(), b.targets.data());
  return b;
}

}  // namespace shardlab
