// FlatLayout: one unit's parameters as one flat buffer, padded so it splits evenly over a shard
// group of G ranks. Rank r of the group owns elements [r*S, (r+1)*S) with S = padded / G.
// The layout also says which parameter entries (and which element range of each) a shard holds,
// which is what a sharded checkpoint writes next to the shard.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardlab {

// One parameter tensor inside a unit's flat buffer (the model's unit layout, copied).
struct FlatEntry {
  std::string name;            // e.g. "h.3.attn.qkv.weight"
  std::vector<int64_t> shape;  // e.g. {3C, C}
  int64_t offset = 0;          // first element inside the unpadded flat buffer
  int64_t numel = 0;
};

// A contiguous range of elements of a flat buffer (or of a shard).
struct ShardRange {
  int64_t offset = 0;
  int64_t size = 0;
  int64_t end() const { return offset + size; }
};

// The part of one entry that lies inside one shard.
struct ShardPiece {
  int entry = 0;             // index into FlatLayout::entries()
  std::string name;          // the entry's name
  int64_t entry_begin = 0;   // first element of the entry held (0..numel)
  int64_t count = 0;         // elements held
  int64_t shard_offset = 0;  // where they start inside the shard (0..S)
};

class FlatLayout {
 public:
  FlatLayout() = default;
  // Entries must not overlap; their offsets may leave gaps (gaps count as numel, never as
  // padding). Throws InvalidArgument naming the entry that overlaps or has a bad shape.
  FlatLayout(std::vector<FlatEntry> entries, int group_size);

  const std::vector<FlatEntry>& entries() const { return entries_; }
  int group_size() const { return group_; }
  int64_t numel() const { return numel_; }                 // unpadded: end of the last entry
  int64_t padded_numel() const { return padded_; }         // numel rounded up to a multiple of G
  int64_t shard_size() const { return padded_ / group_; }  // S
  int64_t padding() const { return padded_ - numel_; }     // elements, all in the last shard(s)

  // [r*S, (r+1)*S) of the padded flat buffer.
  ShardRange shard_range(int r) const;
  // The real (non-padding) elements of shard r, and its padding elements.
  int64_t shard_real_numel(int r) const;
  int64_t shard_padding(int r) const { return shard_size() - shard_real_numel(r); }
  // The entries (and element ranges of each) that shard r holds, in flat order.
  std::vector<ShardPiece> shard_pieces(int r) const;
  // Index of the entry called `name`; throws InvalidArgument when none is.
  int find(const std::string& name) const;

 private:
  std::vector<FlatEntry> entries_;
  int group_ = 1;
  int64_t numel_ = 0;
  int64_t padded_ = 0;
};

// Rounds n up to a multiple of m (m >= 1).
inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

}  // namespace shardlab
