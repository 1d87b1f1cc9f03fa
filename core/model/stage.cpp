// Stage: the parameter bookkeeping every stage shares, and the per-name initialisation.
#include "core/model/stage.hpp"

#include <cmath>

#include "core/base/error.hpp"

namespace shardlab {

namespace {

// splitmix64 (Steele, Lea & Flood 2014): a tiny, well-mixed generator whose output is the same on
// every platform (std::normal_distribution is not).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Fills n values with N(0, std) by Box-Muller on a splitmix64 stream seeded by (seed, name).
void fill_normal(float* out, int64_t n, float std, uint64_t seed, const std::string& name) {
  uint64_t state = seed ^ fnv1a(name);
  splitmix64(state);  // decorrelate seeds that differ in few bits
  const double kTwoPi = 6.283185307179586;
  for (int64_t i = 0; i < n; i += 2) {
    // u1 in (0, 1]: log never sees 0.
    double u1 = (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
    double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(std * r * std::cos(kTwoPi * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(std * r * std::sin(kTwoPi * u2));
  }
}

}  // namespace

int64_t StageParam::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void init_params(const std::vector<StageParam>& params, uint64_t seed, float* flat) {
  for (const StageParam& p : params) {
    const int64_t n = p.numel();
    switch (p.init.kind) {
      case InitKind::zeros: std::fill(flat, flat + n, 0.0f); break;
      case InitKind::ones: std::fill(flat, flat + n, 1.0f); break;
      case InitKind::normal: fill_normal(flat, n, p.init.std, seed, p.name); break;
    }
    flat += n;
  }
}

Stage::Stage(std::string name, std::string role, std::vector<StageParam> params,
             std::vector<std::string> ties)
    : name_(std::move(name)),
      role_(std::move(role)),
      params_(std::move(params)),
      ties_(std::move(ties)) {
  for (const StageParam& p : params_) {
    for (int64_t d : p.shape)
      SL_CHECK(d > 0, "stage ", name_, ": parameter ", p.name, " has a dimension ", d);
    numel_ += p.numel();
  }
}

void Stage::recompute(Pass&, const StageArgs&) const {
  SL_THROW(InvalidArgument, "stage ", name_, " cannot be recomputed (it is in no layer)");
}

const char* attention_kernel_name(AttentionKernel k) {
  return k == AttentionKernel::flash ? "flash" : "naive";
}

AttentionKernel parse_attention_kernel(const std::string& name, const char* option) {
  if (name == "naive") return AttentionKernel::naive;
  if (name == "flash") return AttentionKernel::flash;
  SL_THROW(InvalidArgument, option, " '", name, "': the attention kernels are naive and flash");
}

}  // namespace shardlab
