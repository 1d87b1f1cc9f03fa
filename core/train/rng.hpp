// A small deterministic random number generator for data: SplitMix64 (Steele, Lea, Flood 2014).
// std::uniform_*_distribution differs between standard libraries; this gives the same stream
// everywhere, so a corpus and a batch order are a pure function of their seed.
#pragma once

#include <cstdint>

namespace shardlab {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n); the modulo bias is below 2^-40 for every n this project uses.
  uint64_t next_below(uint64_t n) { return next_u64() % n; }

 private:
  uint64_t state_;
};

// Mixes several values into one seed (e.g. the loader's seed and an epoch number).
inline uint64_t mix_seed(uint64_t a, uint64_t b) {
  SplitMix64 r(a ^ (b * 0xd1342543de82ef95ull + 0x2545f4914f6cdd1dull));
  return r.next_u64();
}

}  // namespace shardlab
