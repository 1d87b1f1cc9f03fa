// Recorder: formats each event as one JSON line into a per-rank buffer (no DOM, no I/O) and appends
// the buffer to rank<R>.jsonl on flush(). Two locks: `mu` guards the buffer for the recording
// threads, `file_mu` orders writers, so a flush holds up recording only for a string swap.
#include "core/trace/recorder.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include <unistd.h>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/base/virtual_clock.hpp"
#include "core/trace/json_line.hpp"

namespace shardlab {

namespace {

// A rank's buffer is written out by the recording thread itself once it holds this many bytes
// (about 5k events), so a long step without flush() cannot grow it without bound.
constexpr size_t kAutoFlushBytes = 1 << 20;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::atomic<int64_t>& clock_epoch() {
  static std::atomic<int64_t> epoch{steady_ns()};
  return epoch;
}

// Each recording thread formats into its own scratch line, outside the buffer's lock.
std::string& scratch_line() {
  thread_local std::string s;
  s.clear();
  return s;
}

}  // namespace

const char* lane_name(Lane l) {
  switch (l) {
    case Lane::compute: return "compute";
    case Lane::comm: return "comm";
    case Lane::copy: return "copy";
  }
  return "?";
}

const char* unit_state_name(UnitState s) {
  switch (s) {
    case UnitState::sharded: return "sharded";
    case UnitState::gathering: return "gathering";
    case UnitState::unsharded: return "unsharded";
    default: return "resharded";
  }
}

// A simulated rank's thread reads its virtual clock: its spans carry predicted times.
int64_t trace_now_ns() {
  if (const VirtualClock* v = thread_virtual_clock()) return v->now_ns;
  return steady_ns() - clock_epoch().load(std::memory_order_relaxed);
}
void trace_reset_clock() { clock_epoch().store(steady_ns(), std::memory_order_relaxed); }

struct Recorder::Impl {
  std::string path;
  std::FILE* file = nullptr;

  mutable std::mutex mu;  // guards buf and the counts
  std::string buf;
  int64_t buffered = 0;  // events in buf
  int64_t recorded = 0;  // events since construction

  std::mutex file_mu;   // one writer at a time, in order
  std::string writing;  // the buffer being written (swapped with buf, keeps its capacity)

  // Appends a formatted line; returns true when the caller should flush.
  bool append(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    buf += line;
    ++buffered;
    ++recorded;
    return file && buf.size() >= kAutoFlushBytes;
  }
};

Recorder::Recorder(int rank, const std::string& jsonl_path)
    : impl_(std::make_unique<Impl>()), rank_(rank), enabled_(true) {
  impl_->path = jsonl_path;
  if (!jsonl_path.empty()) {
    // A FIFO, a device or a link where the rank file belongs is refused (file_io.hpp).
    const int fd = FileHandle::open_append(jsonl_path).release();
    impl_->file = ::fdopen(fd, "ab");
    if (!impl_->file) {
      const int err = errno;
      ::close(fd);
      SL_THROW(IoError, jsonl_path, ": cannot open for appending: ", std::strerror(err));
    }
  }
}

std::unique_ptr<Recorder> Recorder::disabled(int rank) {
  std::unique_ptr<Recorder> r(new Recorder(rank, std::string()));
  r->enabled_ = false;
  r->impl_.reset();
  return r;
}

Recorder::~Recorder() {
  detach();
  if (!impl_) return;
  try {
    flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: trace recorder: %s\n", rank_, e.what());
  }
  if (impl_->file) std::fclose(impl_->file);
}

void Recorder::attach(MemoryTracker& tracker) {
  if (!enabled_) return;
  detach();
  tracker_ = &tracker;
  tracker.set_listener([this](const MemoryTracker::Change& c) { mem(c); });
}

void Recorder::detach() {
  if (tracker_) tracker_->set_listener(nullptr);
  tracker_ = nullptr;
}

void Recorder::mem(const MemoryTracker::Change& c, bool host) {
  if (!enabled_) return;
  std::string& s = scratch_line();
  JsonLine line(s);
  line.i64("t", trace_now_ns())
      .i64("rank", rank_)
      .str("kind", "mem")
      .str("category", mem_category_name(c.category))
      .i64("bytes", c.delta)
      .i64("cat_total", c.category_total)
      .i64("total", c.total);
  if (host) line.str("tier", "host");
  line.end_line();
  if (impl_->append(s)) flush();
}

void Recorder::span(Lane lane, const char* op, int unit, int64_t bytes, DType dtype,
                    int64_t t_issue, int64_t t_start, int64_t t_end, int64_t t_wait,
                    int64_t wait_ns, int last_rank, int64_t sent) {
  if (!enabled_) return;
  std::string& s = scratch_line();
  JsonLine line(s);
  line.i64("t", t_end)
      .i64("rank", rank_)
      .str("kind", "span")
      .str("lane", lane_name(lane))
      .str("op", op)
      .i64("unit", unit)
      .i64("bytes", bytes)
      .str("dtype", dtype_name(dtype))
      .i64("t_issue", t_issue)
      .i64("t_start", t_start)
      .i64("t_end", t_end)
      .i64("t_wait", t_wait);
  if (wait_ns >= 0) line.i64("wait", wait_ns).i64("last", last_rank);
  if (sent >= 0) line.i64("sent", sent);
  line.end_line();
  if (impl_->append(s)) flush();
}

void Recorder::unit(int unit, UnitState st) {
  if (!enabled_) return;
  std::string& s = scratch_line();
  JsonLine(s)
      .i64("t", trace_now_ns())
      .i64("rank", rank_)
      .str("kind", "unit")
      .i64("unit", unit)
      .str("state", unit_state_name(st))
      .end_line();
  if (impl_->append(s)) flush();
}

void Recorder::step(int step, double loss, int64_t tokens, double step_time_s) {
  if (!enabled_) return;
  std::string& s = scratch_line();
  JsonLine(s)
      .i64("t", trace_now_ns())
      .i64("rank", rank_)
      .str("kind", "step")
      .i64("step", step)
      .f64("loss", loss)
      .i64("tokens", tokens)
      .f64("step_time", step_time_s)
      .end_line();
  impl_->append(s);
  // A step is a boundary: the file then holds every event up to it, for a viewer following live.
  flush();
}

void Recorder::mark(const std::string& text) {
  if (!enabled_) return;
  std::string& s = scratch_line();
  JsonLine(s)
      .i64("t", trace_now_ns())
      .i64("rank", rank_)
      .str("kind", "mark")
      .str("text", text)
      .end_line();
  if (impl_->append(s)) flush();
}

void Recorder::flush() {
  if (!enabled_ || !impl_->file) return;
  Impl& im = *impl_;
  std::lock_guard<std::mutex> file_lock(im.file_mu);
  {
    std::lock_guard<std::mutex> lock(im.mu);
    if (im.buf.empty()) return;
    im.writing.swap(im.buf);
    im.buffered = 0;
  }
  const size_t n = std::fwrite(im.writing.data(), 1, im.writing.size(), im.file);
  const bool ok = n == im.writing.size() && std::fflush(im.file) == 0;
  im.writing.clear();
  if (!ok) SL_THROW(IoError, im.path, ": write failed: ", std::strerror(errno));
}

int64_t Recorder::event_count() const {
  if (!enabled_) return 0;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->file ? impl_->buffered : impl_->recorded;
}

std::string Recorder::buffered_text() const {
  if (!enabled_) return std::string();
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->buf;
}

}  // namespace shardlab
