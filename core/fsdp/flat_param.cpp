// FlatLayout: padding, shard ranges and the entries each shard holds.
#include "core/fsdp/flat_param.hpp"

#include <algorithm>

#include "core/base/error.hpp"

namespace shardlab {

FlatLayout::FlatLayout(std::vector<FlatEntry> entries, int group_size)
    : entries_(std::move(entries)), group_(group_size) {
  SL_CHECK(group_ >= 1, "flat layout: shard group size ", group_, " must be at least 1");
  int64_t end = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const FlatEntry& e = entries_[i];
    int64_t prod = 1;
    for (int64_t d : e.shape) {
      SL_CHECK(d > 0, "flat layout: entry '", e.name, "' has a dimension ", d);
      prod *= d;
    }
    SL_CHECK(e.numel == prod, "flat layout: entry '", e.name, "' numel ", e.numel,
             " does not match its shape (", prod, ")");
    SL_CHECK(e.offset >= end, "flat layout: entry '", e.name, "' at offset ", e.offset,
             " overlaps the previous entry ending at ", end);
    end = e.offset + e.numel;
  }
  numel_ = end;
  padded_ = round_up(numel_, group_);
}

ShardRange FlatLayout::shard_range(int r) const {
  SL_CHECK(r >= 0 && r < group_, "flat layout: shard ", r, " outside a group of ", group_);
  const int64_t s = shard_size();
  return {r * s, s};
}

int64_t FlatLayout::shard_real_numel(int r) const {
  ShardRange g = shard_range(r);
  return std::clamp<int64_t>(numel_ - g.offset, 0, g.size);
}

std::vector<ShardPiece> FlatLayout::shard_pieces(int r) const {
  ShardRange g = shard_range(r);
  std::vector<ShardPiece> out;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const FlatEntry& e = entries_[i];
    const int64_t lo = std::max(e.offset, g.offset);
    const int64_t hi = std::min(e.offset + e.numel, g.end());
    if (lo >= hi) continue;
    out.push_back({static_cast<int>(i), e.name, lo - e.offset, hi - lo, lo - g.offset});
  }
  return out;
}

int FlatLayout::find(const std::string& name) const {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return static_cast<int>(i);
  SL_THROW(InvalidArgument, "flat layout: no parameter named '", name, "'");
}

}  // namespace shardlab
