// Chrome trace export: events are formatted one by one (no DOM for the whole trace), sorted by time
// (metadata first), and joined into {"displayTimeUnit":..,"otherData":..,"traceEvents":[..]}.
#include "core/trace/chrome_trace.hpp"

#include <algorithm>
#include <cstdio>

#include "core/trace/json_line.hpp"

namespace shardlab {

namespace {

struct ChromeEvent {
  int64_t ts_ns;
  std::string text;
};

// ns -> "12.345" µs, exactly (no floating point); negative times (before the clock's reset) are 0.
std::string micros(int64_t ns) {
  if (ns < 0) ns = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  return buf;
}

void put_number(std::string& s, const char* key, const std::string& number) {
  s += ",\"";
  s += key;
  s += "\":";
  s += number;
}

// Start of an event object with the fields every phase has.
std::string event_head(const std::string& name, const char* ph, int64_t ts_ns, int pid, int tid) {
  std::string s = "{\"name\":";
  JsonLine::append_string(s, name.c_str());
  s += ",\"ph\":\"";
  s += ph;
  s += '"';
  put_number(s, "ts", micros(ts_ns));
  put_number(s, "pid", std::to_string(pid));
  put_number(s, "tid", std::to_string(tid));
  return s;
}

std::string metadata(const char* what, int pid, int tid, const std::string& value_key,
                     const std::string& value) {
  std::string s = event_head(what, "M", 0, pid, tid);
  s += ",\"args\":{\"" + value_key + "\":" + value + "}}";
  return s;
}

std::string json_quoted(const std::string& v) {
  std::string s;
  JsonLine::append_string(s, v.c_str());
  return s;
}

std::string number_or_null(double v) {
  std::string s;
  JsonLine(s).f64("v", v).end();
  return s.substr(5, s.size() - 6);  // {"v":X} -> X
}

// Assigns each span of one lane to a track so that spans on a track nest or follow each other
// (what the format requires of complete events on one thread). Returns the track per span.
std::vector<int> assign_tracks(const std::vector<const SpanEvent*>& spans) {
  std::vector<size_t> order(spans.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (spans[a]->t_start != spans[b]->t_start) return spans[a]->t_start < spans[b]->t_start;
    return spans[a]->t_end > spans[b]->t_end;  // the enclosing span first
  });
  std::vector<std::vector<int64_t>> open_ends;  // per track: ends of the spans still open
  std::vector<int> track(spans.size(), 0);
  for (size_t i : order) {
    const int64_t s = spans[i]->t_start, e = std::max(spans[i]->t_start, spans[i]->t_end);
    size_t k = 0;
    for (; k < open_ends.size(); ++k) {
      std::vector<int64_t>& ends = open_ends[k];
      while (!ends.empty() && ends.back() <= s) ends.pop_back();
      if (ends.empty() || ends.back() >= e) break;
    }
    if (k == open_ends.size()) open_ends.emplace_back();
    open_ends[k].push_back(e);
    track[i] = static_cast<int>(k);
  }
  return track;
}

// A rank's spans: per lane, as many threads (tracks) as overlapping spans need, each named.
void add_span_events(const RankTrace& rt, int pid, std::vector<ChromeEvent>& meta_events,
                     std::vector<ChromeEvent>& events) {
  // Spans: per lane, tracks 0, 1, ... become tids lane + 2 * track (compute, comm), and
  // kCopyTid + track (copy).
  constexpr int kCopyTid = 1000;
  const auto tid_of = [](Lane lane, int track) {
    return lane == Lane::copy ? kCopyTid + track : static_cast<int>(lane) + 2 * track;
  };
  int tracks_used[3] = {1, 1, 0};  // compute and comm threads are always named, copy if used
  for (Lane lane : {Lane::compute, Lane::comm, Lane::copy}) {
    std::vector<const SpanEvent*> spans;
    for (const SpanEvent& s : rt.spans)
      if (s.lane == lane) spans.push_back(&s);
    const std::vector<int> track = assign_tracks(spans);
    const int l = static_cast<int>(lane);
    for (size_t i = 0; i < spans.size(); ++i) {
      const SpanEvent& s = *spans[i];
      tracks_used[l] = std::max(tracks_used[l], track[i] + 1);
      const int64_t start = std::max<int64_t>(0, s.t_start);
      const int64_t dur = std::max<int64_t>(0, s.t_end - start);
      std::string e = event_head(s.op, "X", start, pid, tid_of(lane, track[i]));
      put_number(e, "dur", micros(dur));
      e += ",\"cat\":";
      e += json_quoted(lane_name(lane));
      e += ",\"args\":{";
      e += "\"unit\":" + std::to_string(s.unit);
      e += ",\"bytes\":" + std::to_string(s.bytes);
      e += ",\"dtype\":" + json_quoted(dtype_name(s.dtype));
      if (lane == Lane::comm) {
        e += ",\"queued_us\":" + micros(s.t_start - s.t_issue);
        if (s.t_wait >= 0) e += ",\"wait_at_us\":" + micros(s.t_wait);
      }
      e += "}}";
      events.push_back({start, std::move(e)});
    }
  }
  for (Lane lane : {Lane::compute, Lane::comm, Lane::copy}) {
    const int l = static_cast<int>(lane);
    for (int k = 0; k < tracks_used[l]; ++k) {
      const int tid = tid_of(lane, k);
      std::string name = lane_name(lane);
      if (k > 0) name += " #" + std::to_string(k + 1);
      meta_events.push_back({0, metadata("thread_name", pid, tid, "name", json_quoted(name))});
      meta_events.push_back(
          {0, metadata("thread_sort_index", pid, tid, "sort_index", std::to_string(tid))});
    }
  }
}

void add_memory_events(const RankTrace& rt, int pid, std::vector<ChromeEvent>& events) {
  // Memory: one counter whose series are the categories (drawn stacked), replayed from events;
  // the host tier (--offload) as a second counter, "host memory", so the two are never summed.
  for (const auto& [name, list] :
       {std::pair<const char*, const std::vector<MemEvent>*>{"memory", &rt.mem},
        {"host memory", &rt.host_mem}}) {
    MemArray cur{};
    bool unattributed = false;  // imported runs only: its counter where it has events
    for (const MemEvent& m : *list) unattributed |= m.category == MemCategory::unattributed;
    for (const MemEvent& m : *list) {
      cur[static_cast<int>(m.category)] = m.cat_total;
      std::string e = event_head(name, "C", m.t, pid, 0);
      e += ",\"args\":{";
      for (int c = 0; c < kNumMemCategories; ++c) {
        if (MemCategory(c) == MemCategory::unattributed && !unattributed) continue;
        if (c) e += ',';
        e += json_quoted(mem_category_name(static_cast<MemCategory>(c))) + ":" +
             std::to_string(cur[c]);
      }
      e += "}}";
      events.push_back({std::max<int64_t>(0, m.t), std::move(e)});
    }
  }
}

}  // namespace

std::string chrome_trace_json(const RunData& run) {
  std::vector<ChromeEvent> meta_events, events;

  for (size_t r = 0; r < run.ranks.size(); ++r) {
    const int pid = static_cast<int>(r);
    const RankTrace& rt = run.ranks[r];
    meta_events.push_back(
        {0, metadata("process_name", pid, 0, "name", json_quoted("rank " + std::to_string(r)))});
    meta_events.push_back(
        {0, metadata("process_sort_index", pid, 0, "sort_index", std::to_string(r))});

    add_span_events(rt, pid, meta_events, events);
    add_memory_events(rt, pid, events);

    for (const StepEvent& st : rt.steps) {
      std::string e = event_head("step " + std::to_string(st.step), "i", st.t, pid, 0);
      e += ",\"s\":\"p\",\"args\":{\"step\":" + std::to_string(st.step) +
           ",\"loss\":" + number_or_null(st.loss) + ",\"tokens\":" + std::to_string(st.tokens) +
           ",\"step_time_s\":" + number_or_null(st.step_time) + "}}";
      events.push_back({std::max<int64_t>(0, st.t), std::move(e)});
    }
    for (const MarkEvent& mk : rt.marks) {
      std::string e = event_head(mk.text, "i", mk.t, pid, 0);
      e += ",\"s\":\"t\"}";
      events.push_back({std::max<int64_t>(0, mk.t), std::move(e)});
    }
  }

  std::stable_sort(events.begin(), events.end(),
                   [](const ChromeEvent& a, const ChromeEvent& b) { return a.ts_ns < b.ts_ns; });

  std::string out = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"version\":";
  out += json_quoted(SHARDLAB_VERSION);
  out += ",\"run\":" + json_quoted(run.dir);
  out += ",\"meta\":" + json_quoted(run.meta.dump());
  out += "},\"traceEvents\":[\n";
  bool first = true;
  for (const auto* list : {&meta_events, &events})
    for (const ChromeEvent& e : *list) {
      if (!first) out += ",\n";
      first = false;
      out += e.text;
    }
  out += "\n]}\n";
  return out;
}

}  // namespace shardlab
