// Training tokens for the lessons: core/train's synthetic corpus (an order-1 Markov chain whose
// entropy rate is the lowest loss any model can reach) and its DataLoader, exactly what
// `shardlab train --seed S` reads. Global batch b is the same for any number of ranks; rank r of N
// takes rows [r*B/N, (r+1)*B/N) of it, so N ranks together see what one rank with the whole batch
// sees.
#pragma once

#include <memory>

#include "core/train/corpus.hpp"
#include "core/train/data_loader.hpp"
#include "lessons/common/options.hpp"

namespace shardlab::lessons {

// The default synthetic corpus (SyntheticSpec{}), made once per process and shared by all ranks.
inline const std::shared_ptr<const TokenCorpus>& lesson_corpus() {
  static const std::shared_ptr<const TokenCorpus> corpus =
      std::make_shared<const TokenCorpus>(make_synthetic_corpus(SyntheticSpec{}));
  return corpus;
}

// This rank's loader: its rows of each global batch of --batch sequences of --seq tokens.
inline DataLoader make_loader(const LessonOptions& o, int rank, int world) {
  return DataLoader(lesson_corpus(), {o.batch, o.seq, rank, world, o.seed});
}

}  // namespace shardlab::lessons
