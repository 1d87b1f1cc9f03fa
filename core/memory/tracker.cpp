// MemoryTracker: the rank's ledger of bytes by category.
#include "core/memory/tracker.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <unistd.h>  // sysconf

namespace shardlab {

namespace {
constexpr const char* kNames[kNumMemCategories] = {
    "params",      "params_unsharded", "grads",     "grads_unsharded", "optimizer_state",
    "activations", "comm_buffers",     "workspace", "unattributed"};
}

const char* mem_category_name(MemCategory c) { return kNames[static_cast<int>(c)]; }

MemCategory parse_mem_category(const std::string& s) {
  for (int i = 0; i < kNumMemCategories; ++i)
    if (s == kNames[i]) return static_cast<MemCategory>(i);
  SL_THROW(InvalidArgument, "unknown memory category '", s, "'");
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

int64_t parse_bytes(const std::string& s, const std::string& what) {
  const std::string who = what.empty() ? "" : what + " ";
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !(v >= 0) || !std::isfinite(v))
    SL_THROW(InvalidArgument, who, "cannot read '", s, "' as a size (examples: 512MiB, 2GiB, 1e9)");
  std::string unit(end);
  struct U {
    const char* name;
    double mult;
  };
  const U units[] = {{"", 1},
                     {"B", 1},
                     {"KiB", 1024.0},
                     {"MiB", 1048576.0},
                     {"GiB", 1073741824.0},
                     {"TiB", 1099511627776.0},
                     {"KB", 1e3},
                     {"MB", 1e6},
                     {"GB", 1e9},
                     {"TB", 1e12},
                     {"K", 1024.0},
                     {"M", 1048576.0},
                     {"G", 1073741824.0}};
  for (const U& u : units) {
    if (unit != u.name) continue;
    // llround of a value beyond int64 is undefined (in practice INT64_MIN): refuse it instead.
    // 2^63 is exact as a double; anything at or above it does not fit.
    const double bytes = v * u.mult;
    if (!(bytes < 9223372036854775808.0))
      SL_THROW(InvalidArgument, who, "'", s, "' is ", bytes,
               " bytes, more than the largest size (2^63 - 1 bytes, 8 EiB)");
    const int64_t n = static_cast<int64_t>(std::llround(bytes));
    // "0" means "no limit" to its callers: a nonzero size must not silently round to it.
    if (n == 0 && bytes > 0)
      SL_THROW(InvalidArgument, who, "'", s,
               "' rounds to 0 bytes, which means no limit; give at "
               "least 1 B, or 0 for none");
    return n;
  }
  SL_THROW(InvalidArgument, who, "unknown size unit '", unit, "' in '", s,
           "' (use B, KiB, MiB, GiB, KB, MB, GB)");
}

int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

void MemoryTracker::allocate(MemCategory c, int64_t bytes) {
  SL_CHECK(bytes >= 0, "negative allocation");
  std::lock_guard<std::mutex> lock(mu_);
  const int i = static_cast<int>(c);
  if (capacity_ > 0 && total_ + bytes > capacity_) {
    std::string msg = "rank " + std::to_string(rank_) + ": out of memory: " + mem_category_name(c) +
                      " requested " + format_bytes(bytes) + " with " + format_bytes(total_) +
                      " in use of a " + format_bytes(capacity_) + " capacity. In use by category:";
    for (int k = 0; k < kNumMemCategories; ++k)
      if (cur_[k] > 0) msg += std::string(" ") + kNames[k] + " " + format_bytes(cur_[k]) + ";";
    throw OutOfMemory(msg);
  }
  cur_[i] += bytes;
  total_ += bytes;
  if (cur_[i] > peak_[i]) peak_[i] = cur_[i];
  if (total_ > peak_total_) {
    peak_total_ = total_;
    at_peak_ = cur_;
  }
  if (listener_) listener_({c, bytes, cur_[i], total_});
}

void MemoryTracker::release(MemCategory c, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const int i = static_cast<int>(c);
  if (bytes > cur_[i]) {
    // Freeing more than was allocated is a bug in the caller, never a user error: stop loudly.
    std::fprintf(stderr, "rank %d: memory tracker: freeing %lld bytes of %s with %lld allocated\n",
                 rank_, static_cast<long long>(bytes), kNames[i], static_cast<long long>(cur_[i]));
    std::abort();
  }
  cur_[i] -= bytes;
  total_ -= bytes;
  if (listener_) listener_({c, -bytes, cur_[i], total_});
}

int64_t MemoryTracker::current(MemCategory c) const {
  std::lock_guard<std::mutex> lock(mu_);
  return cur_[static_cast<int>(c)];
}
int64_t MemoryTracker::peak(MemCategory c) const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_[static_cast<int>(c)];
}
int64_t MemoryTracker::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}
int64_t MemoryTracker::peak_total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_total_;
}
MemArray MemoryTracker::current_all() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cur_;
}
MemArray MemoryTracker::peak_all() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}
MemArray MemoryTracker::at_peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return at_peak_;
}
void MemoryTracker::set_listener(Listener l) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = std::move(l);
}

std::string MemoryTracker::breakdown() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string s;
  for (int k = 0; k < kNumMemCategories; ++k) {
    if (cur_[k] == 0) continue;
    if (!s.empty()) s += ", ";
    s += std::string(kNames[k]) + " " + format_bytes(cur_[k]);
  }
  return s.empty() ? "nothing allocated" : s;
}

}  // namespace shardlab
