// torch.profiler Chrome traces -> run directories (torch_trace.hpp).
#include "core/import/torch_trace.hpp"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/comm/traffic.hpp"
#include "core/trace/summary.hpp"

namespace shardlab {

namespace {

using json = nlohmann::json;

// A trace larger than this is refused before it is read (real ones run to hundreds of MB).
constexpr int64_t kMaxTraceBytes = int64_t(8) << 30;
// Outermost operators closer than this are one compute span.
constexpr double kMergeGapUs = 50.0;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool starts_with(const std::string& s, const char* head) { return s.rfind(head, 0) == 0; }

std::string read_trace_text(const std::string& path) {
  if (!ends_with(path, ".gz")) return read_text_file(path, kMaxTraceBytes);
  // open_read refuses what is not a regular file, without blocking on a FIFO.
  gzFile f = gzdopen(FileHandle::open_read(path).release(), "rb");
  if (!f) SL_THROW(IoError, path, ": cannot open for reading");
  std::string text;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) {
    text.append(buf, static_cast<size_t>(n));
    if (static_cast<int64_t>(text.size()) > kMaxTraceBytes) {
      gzclose(f);
      SL_THROW(IoError, path, ": more than ", kMaxTraceBytes >> 30, " GiB uncompressed");
    }
  }
  int err = 0;
  const char* why = gzerror(f, &err);
  const bool bad = n < 0 || err < 0;
  const std::string what = bad ? why : "";
  gzclose(f);
  if (bad) SL_THROW(IoError, path, ": not a complete gzip stream (", what, ")");
  return text;
}

// One complete ("X") event of the trace, what the mapping needs of it.
struct Raw {
  std::string name, cat;
  int64_t tid = 0;
  double ts = 0, dur = 0;  // us
  int64_t numel = -1;      // the first input's elements (gloo and c10d spans)
  DType dtype = DType::f32;
};

int64_t numel_of(const json& dims) {  // [n, m] -> n m; [[n], [m]] (a TensorList) -> n + m
  if (!dims.is_array()) return -1;
  if (dims.empty()) return 1;
  if (dims[0].is_array()) {
    int64_t s = 0;
    for (const json& d : dims) s += std::max<int64_t>(0, numel_of(d));
    return s;
  }
  int64_t p = 1;
  for (const json& d : dims) p *= d.is_number_integer() ? d.get<int64_t>() : 0;
  return p;
}

DType dtype_of(const std::string& t) {
  if (t == "c10::BFloat16") return DType::bf16;
  if (t == "c10::Half") return DType::f16;
  return DType::f32;
}

// Bytes of one element of a profiler "Input type" (float, int, long, c10::Half, ...); 4 when the
// type is not one of these.
int64_t element_bytes(const std::string& t) {
  if (t == "c10::BFloat16" || t == "c10::Half" || t == "short") return 2;
  if (t == "long" || t == "double" || t == "long int" || t == "c10::complex<float>") return 8;
  if (t == "bool" || t == "unsigned char" || t == "signed char" || t == "char") return 1;
  return 4;
}

struct Parsed {
  std::vector<Raw> events;
  json root;  // the trace without its events
};

Parsed parse_trace(const std::string& path) {
  const std::string text = read_trace_text(path);
  Parsed p;
  std::string key;  // the root's key being parsed
  // Each event is handled as it completes and dropped, so the DOM never holds the events.
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth == 1 && ev == json::parse_event_t::key) key = parsed.get<std::string>();
    if (depth != 2 || ev != json::parse_event_t::object_end || key != "traceEvents") return true;
    const json& e = parsed;
    if (e.value("ph", "") != "X" || !e.contains("tid") || !e["tid"].is_number_integer()) {
      if (e.value("ph", "") == "M") return true;  // metadata: small, kept
      return false;
    }
    Raw r;
    r.name = e.value("name", "");
    r.cat = e.value("cat", "");
    r.tid = e["tid"].get<int64_t>();
    r.ts = e.value("ts", 0.0);
    r.dur = e.value("dur", 0.0);
    if (starts_with(r.name, "gloo:") || starts_with(r.name, "c10d::")) {
      const json args = e.value("args", json::object());
      if (args.contains("Input Dims") && args["Input Dims"].is_array() &&
          !args["Input Dims"].empty())
        r.numel = numel_of(args["Input Dims"][0]);  // gloo's: the buffer it ran on
      if (args.contains("Input type") && args["Input type"].is_array() &&
          !args["Input type"].empty() && args["Input type"][0].is_string()) {
        const std::string type = args["Input type"][0].get<std::string>();
        r.dtype = dtype_of(type);
        // Integer and 8-byte types: counted as the f32 elements of the same bytes (DType has
        // floats only), so the bytes and the traffic stay exact.
        const int64_t size = element_bytes(type);
        if (r.numel > 0 && r.dtype == DType::f32 && size != 4) r.numel = (r.numel * size + 3) / 4;
      }
    }
    p.events.push_back(std::move(r));
    return false;
  };
  try {
    p.root = json::parse(text, cb);
  } catch (const json::exception& e) {
    SL_THROW(IoError, path, ": not a torch.profiler trace (", e.what(), ")");
  }
  if (!p.root.is_object() || !p.root.contains("traceEvents"))
    SL_THROW(IoError, path, ": not a torch.profiler trace (no traceEvents)");
  return p;
}

// The collective a gloo span ran, or -1.
int gloo_op(const std::string& name) {
  const std::string op = name.substr(5);
  for (CommOp c : {CommOp::all_gather, CommOp::reduce_scatter, CommOp::all_reduce,
                   CommOp::broadcast, CommOp::barrier})
    if (op == comm_op_name(c)) return static_cast<int>(c);
  return -1;
}
// The collective a c10d call asks for, or -1 (waits and the rest).
int c10d_op(const std::string& name) {
  if (name.find("wait") != std::string::npos) return -1;
  if (name.find("allgather") != std::string::npos) return static_cast<int>(CommOp::all_gather);
  if (name.find("reduce_scatter") != std::string::npos)
    return static_cast<int>(CommOp::reduce_scatter);
  if (name.find("allreduce") != std::string::npos) return static_cast<int>(CommOp::all_reduce);
  if (name.find("broadcast") != std::string::npos) return static_cast<int>(CommOp::broadcast);
  if (name.find("barrier") != std::string::npos) return static_cast<int>(CommOp::barrier);
  return -1;
}

// "FSDP::pre_forward (blocks.0)" -> {"pre_forward", "blocks.0"}; the root's labels have no
// parentheses (or empty ones).
std::pair<std::string, std::string> fsdp_label(const std::string& name) {
  std::string what = name.substr(6), unit;
  const size_t open = what.find(" (");
  if (open != std::string::npos && ends_with(what, ")")) {
    unit = what.substr(open + 2, what.size() - open - 3);
    what = what.substr(0, open);
  }
  return {what, unit};
}

}  // namespace

TorchRank read_torch_trace(const std::string& path) {
  Parsed p = parse_trace(path);
  TorchRank r;
  r.path = path;
  const json& info = p.root.value("distributedInfo", json());
  if (!info.is_object() || !info.contains("rank") || !info["rank"].is_number_integer() ||
      !info.contains("world_size") || !info["world_size"].is_number_integer())
    SL_THROW(IoError, path,
             ": no distributedInfo with rank and world_size (a trace of a "
             "torch.distributed job, profiled after init_process_group)");
  r.rank = info["rank"].get<int>();
  r.world = info["world_size"].get<int>();
  if (r.world < 1 || r.world > kMaxRunRanks || r.rank < 0 || r.rank >= r.world)
    SL_THROW(IoError, path, ": distributedInfo rank ", r.rank, " of world_size ", r.world,
             " (at most ", kMaxRunRanks, " ranks)");
  r.backend = info.value("backend", "");
  const json& base_j = p.root.value("baseTimeNanoseconds", json(0));
  const int64_t base = base_j.is_number_integer() ? base_j.get<int64_t>() : 0;
  auto ns = [base](double us) { return base + std::llround(us * 1000.0); };

  // The main thread: the one whose ProfilerStep spans mark the steps.
  std::vector<const Raw*> steps;
  for (const Raw& e : p.events)
    if (starts_with(e.name, "ProfilerStep#")) steps.push_back(&e);
  if (steps.empty()) SL_THROW(IoError, path, ": no ProfilerStep#N spans (profile with a schedule)");
  std::sort(steps.begin(), steps.end(), [](const Raw* a, const Raw* b) { return a->ts < b->ts; });
  const int64_t main = steps.front()->tid;
  const double first = steps.front()->ts, last = steps.back()->ts + steps.back()->dur;
  r.start_ns = ns(first);
  for (const Raw* s : steps)
    r.steps.push_back(
        {ns(s->ts + s->dur), std::atoi(s->name.c_str() + 13), std::nan(""), 0, s->dur * 1e-6});

  std::vector<const Raw*> ops, labels, calls, gloo;
  for (const Raw& e : p.events) {
    if (e.ts < first || e.ts > last) continue;
    if (starts_with(e.name, "gloo:")) gloo.push_back(&e);
    if (e.tid != main) continue;
    if (starts_with(e.name, "c10d::")) {
      if (c10d_op(e.name) >= 0) calls.push_back(&e);
    } else if (e.cat == "cpu_op") {
      ops.push_back(&e);
    } else if (e.cat == "user_annotation") {
      labels.push_back(&e);
    }
  }
  auto by_start = [](const Raw* a, const Raw* b) {
    return a->ts != b->ts ? a->ts < b->ts : a->dur > b->dur;
  };
  for (auto* v : {&ops, &labels, &calls, &gloo}) std::sort(v->begin(), v->end(), by_start);

  // Units from FSDP2's labels; the unit a main-thread time belongs to.
  std::map<std::string, int> unit_ids = {{"", 0}};
  r.units = {""};
  struct Mark {
    double ts;
    int unit;
  };
  std::vector<Mark> marks;                         // where the current unit changes
  std::vector<std::pair<const Raw*, int>> scoped;  // all_gather / post_backward_reduce (unit)
  std::vector<std::pair<double, double>> optimizer;
  for (const Raw* l : labels) {
    if (starts_with(l->name, "Optimizer.")) optimizer.emplace_back(l->ts, l->ts + l->dur);
    if (!starts_with(l->name, "FSDP::")) continue;
    const auto [what, name] = fsdp_label(l->name);
    auto it = unit_ids.find(name);
    if (it == unit_ids.end()) {
      it = unit_ids.emplace(name, static_cast<int>(r.units.size())).first;
      r.units.push_back(name);
    }
    if (what == "pre_forward" || what == "pre_backward") marks.push_back({l->ts, it->second});
    if (what == "post_forward") marks.push_back({l->ts + l->dur, 0});
    if (what == "all_gather" || what == "post_backward_reduce") scoped.emplace_back(l, it->second);
    // Unit states, as FSDP2 labels them: gathering from its all-gather, unsharded once copied
    // out, resharded after forward (the root stays gathered) and after backward.
    const int u = it->second;
    if (what == "all_gather") r.unit_events.push_back({ns(l->ts), u, UnitState::gathering});
    if (what == "all_gather_copy_out")
      r.unit_events.push_back({ns(l->ts + l->dur), u, UnitState::unsharded});
    if ((what == "post_forward" && u != 0) || what == "post_backward_reshard")
      r.unit_events.push_back({ns(l->ts + l->dur), u, UnitState::resharded});
  }
  const bool fsdp = r.units.size() > 1 || !marks.empty();
  auto unit_at = [&](double ts) {
    if (!fsdp) return -1;
    int u = 0;
    for (const Mark& m : marks) {
      if (m.ts > ts) break;
      u = m.unit;
    }
    return u;
  };
  auto in_optimizer = [&](double ts) {
    for (const auto& [a, b] : optimizer)
      if (ts >= a && ts < b) return true;
    return false;
  };

  // Compute: the outermost operators, merged.
  double outer_end = -1;
  for (const Raw* o : ops) {
    if (o->ts < outer_end) continue;  // inside the previous outermost one
    outer_end = o->ts + o->dur;
    const char* phase = in_optimizer(o->ts)                  ? "optimizer"
                        : starts_with(o->name, "autograd::") ? "backward"
                                                             : "forward";
    const int unit = unit_at(o->ts);
    SpanEvent s{Lane::compute,      phase, unit, 0, DType::f32, ns(o->ts), ns(o->ts),
                ns(o->ts + o->dur), -1};
    if (!r.spans.empty()) {
      SpanEvent& prev = r.spans.back();
      if (prev.op == s.op && prev.unit == s.unit &&
          static_cast<double>(s.t_start - prev.t_end) <= kMergeGapUs * 1000.0) {
        prev.t_end = s.t_end;
        continue;
      }
    }
    r.spans.push_back(s);
  }

  // Communication: each gloo span with the c10d call that issued it, in order per collective
  // (gloo's all-reduces serve both all_reduce and reduce_scatter calls).
  std::map<int, std::deque<const Raw*>> issued;
  for (const Raw* c : calls) {
    int op = c10d_op(c->name);
    if (op == static_cast<int>(CommOp::reduce_scatter)) op = static_cast<int>(CommOp::all_reduce);
    issued[op].push_back(c);
  }
  for (const Raw* g : gloo) {
    const int op = gloo_op(g->name);
    if (op < 0 || g->numel < 0) continue;
    const Raw* call = nullptr;
    auto& q = issued[op];
    while (!q.empty() && q.front()->ts <= g->ts) {
      call = q.front();
      q.pop_front();
      break;
    }
    if (!call) ++r.unmatched_comm;
    if (call && c10d_op(call->name) == static_cast<int>(CommOp::reduce_scatter))
      ++r.reduce_scatters_as_all_reduce;
    int unit = -1;
    if (call)
      for (const auto& [l, u] : scoped)
        if (call->ts >= l->ts && call->ts <= l->ts + l->dur) unit = u;
    const CommOp c = static_cast<CommOp>(op);
    const int64_t count = g->numel;
    SpanEvent s{Lane::comm, comm_op_name(c),
                unit,       collective_bytes(c, count, g->dtype, r.world),
                g->dtype,   ns(call ? call->ts : g->ts),
                ns(g->ts),  ns(g->ts + g->dur),
                -1};
    s.sent = sent_bytes(c, count, g->dtype, r.world);
    r.spans.push_back(s);
  }
  std::stable_sort(r.spans.begin(), r.spans.end(),
                   [](const SpanEvent& a, const SpanEvent& b) { return a.t_end < b.t_end; });
  return r;
}

namespace {

std::vector<std::string> trace_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    if (!is_directory(in)) {
      files.push_back(in);
      continue;
    }
    for (const std::string& n : list_dir(in))
      if (ends_with(n, ".json") || ends_with(n, ".json.gz")) files.push_back(join_path(in, n));
  }
  if (files.empty()) SL_THROW(InvalidArgument, "import: no traces (*.json, *.json.gz) given");
  return files;
}

std::string span_line(int rank, const SpanEvent& s) {
  json j = {{"t", s.t_end},         {"rank", rank},
            {"kind", "span"},       {"lane", lane_name(s.lane)},
            {"op", s.op},           {"unit", s.unit},
            {"bytes", s.bytes},     {"dtype", dtype_name(s.dtype)},
            {"t_issue", s.t_issue}, {"t_start", s.t_start},
            {"t_end", s.t_end},     {"t_wait", -1}};
  if (s.lane == Lane::comm) j["sent"] = s.sent;
  return j.dump();
}

std::string step_line(int rank, const StepEvent& s) {
  return json({{"t", s.t},
               {"rank", rank},
               {"kind", "step"},
               {"step", s.step},
               {"loss", nullptr},
               {"tokens", 0},
               {"step_time", s.step_time}})
      .dump();
}

}  // namespace

std::vector<int> import_torch_traces(const std::vector<std::string>& traces,
                                     const std::string& out_dir) {
  const std::vector<std::string> files = trace_files(traces);
  if (path_exists(out_dir) && (!is_directory(out_dir) || !list_dir(out_dir).empty()))
    SL_THROW(IoError, out_dir,
             ": exists and is not an empty directory (import writes a new run "
             "directory)");
  std::vector<TorchRank> ranks;
  for (const std::string& f : files) ranks.push_back(read_torch_trace(f));
  std::sort(ranks.begin(), ranks.end(),
            [](const TorchRank& a, const TorchRank& b) { return a.rank < b.rank; });
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i].world != ranks[0].world)
      SL_THROW(InvalidArgument, ranks[i].path, ": world_size ", ranks[i].world, ", but ",
               ranks[0].path, " has ", ranks[0].world, ": traces of one job only");
    if (i > 0 && ranks[i].rank == ranks[i - 1].rank)
      SL_THROW(InvalidArgument, ranks[i].path, " and ", ranks[i - 1].path, " are both rank ",
               ranks[i].rank);
  }
  // Every rank of the job: the summary and the viewer read a run of world_size ranks.
  if (static_cast<int>(ranks.size()) != ranks[0].world) {
    std::string have;
    for (const TorchRank& r : ranks) have += (have.empty() ? "" : ", ") + std::to_string(r.rank);
    SL_THROW(InvalidArgument, "import: the traces are ranks ", have, " of a ", ranks[0].world,
             "-rank job (", ranks[0].path,
             "): give every rank's trace (a subset is not "
             "imported yet)");
  }
  int64_t t0 = ranks[0].start_ns;
  for (const TorchRank& r : ranks) t0 = std::min(t0, r.start_ns);

  // Units: the union of every rank's names, in first-seen order.
  std::vector<std::string> units;
  for (const TorchRank& r : ranks)
    for (const std::string& u : r.units)
      if (std::find(units.begin(), units.end(), u) == units.end()) units.push_back(u);
  const bool fsdp2 = units.size() > 1;

  make_dirs(out_dir);
  std::vector<int> written;
  int64_t rs_as_ar = 0, unmatched = 0;
  json sources = json::array();
  for (const TorchRank& r : ranks) {
    auto remap = [&](int u) {
      if (u < 0) return -1;
      return static_cast<int>(
          std::find(units.begin(), units.end(), r.units[static_cast<size_t>(u)]) - units.begin());
    };
    std::vector<std::pair<int64_t, std::string>> lines;
    for (SpanEvent s : r.spans) {
      s.t_issue -= t0, s.t_start -= t0, s.t_end -= t0;
      s.unit = remap(s.unit);
      lines.emplace_back(s.t_end, span_line(r.rank, s));
    }
    for (StepEvent s : r.steps) {
      s.t -= t0;
      lines.emplace_back(s.t, step_line(r.rank, s));
    }
    for (const UnitEvent& u : r.unit_events)
      lines.emplace_back(u.t - t0, json({{"t", u.t - t0},
                                         {"rank", r.rank},
                                         {"kind", "unit"},
                                         {"unit", remap(u.unit)},
                                         {"state", unit_state_name(u.state)}})
                                       .dump());
    std::stable_sort(lines.begin(), lines.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string text;
    for (const auto& [t, l] : lines) text += l + "\n";
    write_file_atomic(join_path(out_dir, "rank" + std::to_string(r.rank) + ".jsonl"), text,
                      "import");
    written.push_back(r.rank);
    rs_as_ar += r.reduce_scatters_as_all_reduce;
    unmatched += r.unmatched_comm;
    sources.push_back({{"rank", r.rank}, {"trace", r.path}});
  }
  json unit_list = json::array();
  for (const std::string& u : units)
    unit_list.push_back({{"name", u.empty() ? "root" : u}, {"numel", nullptr}, {"stages", {}}});
  json meta = {{"version", SHARDLAB_VERSION},
               {"strategy", fsdp2 ? "FSDP2 (PyTorch)" : "PyTorch (no FSDP2 labels: DDP or FSDP1)"},
               {"world_size", ranks[0].world},
               {"backend", ranks[0].backend},
               {"device", "cpu"},
               {"units", unit_list},
               {"config", {{"wrap", fsdp2 ? "fully_shard modules" : "?"}}},
               {"imported",
                {{"from", "torch.profiler"},
                 {"sources", sources},
                 {"ranks", written},
                 {"clock",
                  "host clock per rank (baseTimeNanoseconds + ts), shifted to the earliest "
                  "rank's first ProfilerStep; across hosts the clocks' offsets are in the waits"},
                 {"units", fsdp2 ? "inferred from FSDP2's record_function labels" : "none"},
                 {"compute", "the main thread's outermost operators, merged within 50 us"},
                 {"reduce_scatter_as_all_reduce", rs_as_ar},
                 {"comm_without_issuing_call", unmatched},
                 {"not_imported", "memory ([memory] events), losses, GPU kernels"}}}};
  write_file_atomic(join_path(out_dir, "meta.json"), meta.dump(2) + "\n", "import");
  // A finished run: its summary, as shardlab train leaves one.
  write_file_atomic(join_path(out_dir, "summary.json"),
                    summary_to_json(compute_summary(read_run(out_dir))).dump(2) + "\n", "import");
  return written;
}

}  // namespace shardlab
