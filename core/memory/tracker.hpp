// Per-rank memory accounting: bytes by category, current and peak, and an optional capacity.
// Every device allocation goes through a rank's tracker, so what it reports is what was used.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "core/base/error.hpp"

namespace shardlab {

enum class MemCategory : uint8_t {
  params = 0,        // persistent parameter storage (full or shard)
  params_unsharded,  // gathered full parameters of a unit, transient
  grads,             // persistent gradient storage (full or shard)
  grads_unsharded,   // a unit's full gradient before reduce-scatter, transient
  optimizer_state,   // Adam m and v, fp32 master copies
  activations,       // what forward saves for backward
  comm_buffers,      // collective staging
  workspace,         // scratch: logits, temporaries
  // Imported runs only (shardlab import): bytes the importer's rules cannot place in the others,
  // and what was allocated before the profiler started. The engine never allocates under it, so
  // tables leave it out where it is zero (mem_category_shown).
  unattributed,
};
inline constexpr int kNumMemCategories = 9;

const char* mem_category_name(MemCategory c);
// Whether a list or table of categories shows `c` when it holds `bytes` (for a table: the most
// any row holds): every category but unattributed, which shows only where it holds something.
inline bool mem_category_shown(MemCategory c, int64_t bytes) {
  return c != MemCategory::unattributed || bytes != 0;
}
// Throws InvalidArgument for an unknown name.
MemCategory parse_mem_category(const std::string& s);

using MemArray = std::array<int64_t, kNumMemCategories>;

// Thrown when an allocation would exceed the rank's capacity; the message holds the breakdown.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// Bytes "1.50 MiB" style, for messages and tables.
std::string format_bytes(int64_t bytes);
// Parses "512MiB", "2GiB", "1.5GB", "4096" (bytes); throws InvalidArgument, naming `what` (the
// option, e.g. "--mem-limit") when given, also for a size beyond int64 (2^63 - 1 bytes) and for
// a nonzero size that rounds to 0 bytes (0 means "no limit" to the callers).
int64_t parse_bytes(const std::string& s, const std::string& what = "");
// This machine's physical memory in bytes (0 when the system does not say): the bound the
// trainer's up-front size checks compare a request with.
int64_t host_memory_bytes();

// One rank's accounting. Thread-safe: a rank's compute thread and its communication worker both
// allocate. A listener (the trace recorder) sees every change, in order, under the tracker's lock.
class MemoryTracker {
 public:
  struct Change {
    MemCategory category;
    int64_t delta;           // + on allocation, - on free
    int64_t category_total;  // the category's bytes after the change
    int64_t total;           // all categories after the change
  };
  using Listener = std::function<void(const Change&)>;

  explicit MemoryTracker(int rank = 0, int64_t capacity = 0) : rank_(rank), capacity_(capacity) {}

  // Throws OutOfMemory (and changes nothing) when capacity > 0 and the request does not fit.
  void allocate(MemCategory c, int64_t bytes);
  void release(MemCategory c, int64_t bytes);

  int64_t current(MemCategory c) const;
  int64_t peak(MemCategory c) const;
  int64_t total() const;
  int64_t peak_total() const;
  MemArray current_all() const;
  MemArray peak_all() const;
  // Category totals at the moment the overall peak was reached.
  MemArray at_peak() const;

  int64_t capacity() const { return capacity_; }
  void set_capacity(int64_t bytes) { capacity_ = bytes; }
  int rank() const { return rank_; }
  void set_listener(Listener l);

  // "params 1.2 MiB, grads ..." of the current state.
  std::string breakdown() const;

 private:
  mutable std::mutex mu_;
  int rank_;
  int64_t capacity_;
  MemArray cur_{};
  MemArray peak_{};
  MemArray at_peak_{};
  int64_t total_ = 0;
  int64_t peak_total_ = 0;
  Listener listener_;
};

}  // namespace shardlab
