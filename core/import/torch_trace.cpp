// torch.profiler Chrome traces -> run directories (torch_trace.hpp).
#include "core/import/torch_trace.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <exception>
#include <istream>
#include <map>
#include <set>
#include <streambuf>
#include <thread>
#include <unordered_map>
#include <utility>

#include <simdjson.h>
#include <nlohmann/json.hpp>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/base/json_read.hpp"
#include "core/comm/traffic.hpp"
#include "core/trace/summary.hpp"

namespace shardlab {

namespace {

using json = nlohmann::json;
namespace od = simdjson::ondemand;

// A trace larger than this is refused before it is read (real ones run to hundreds of MB).
constexpr int64_t kMaxTraceBytes = int64_t(8) << 30;
// Outermost operators closer than this are one compute span.
constexpr double kMergeGapUs = 50.0;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool starts_with(const std::string& s, const char* head) { return s.rfind(head, 0) == 0; }

// A trace's bytes as a stream, gunzipped when they are gzip (zlib passes a plain file through), so
// that a trace of hundreds of MB is parsed as it is read, never held whole. What is not a regular
// file is refused without blocking on it (a FIFO); more than kMaxTraceBytes uncompressed, and a
// damaged gzip stream, end the stream with the reason kept for check().
class TraceStreamBuf : public std::streambuf {
 public:
  explicit TraceStreamBuf(const std::string& path) : path_(path) {
    const int fd = FileHandle::open_read(path).release();
    // The uncompressed size, to allocate once: the file's, or a gzip member's ISIZE trailer
    // (its size modulo 2^32: a hint only).
    struct stat st {};
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
      hint_ = st.st_size;
      unsigned char head[2] = {0, 0}, tail[4] = {0, 0, 0, 0};
      if (pread(fd, head, 2, 0) == 2 && head[0] == 0x1f && head[1] == 0x8b &&
          pread(fd, tail, 4, st.st_size - 4) == 4) {
        const int64_t isize = int64_t(tail[0]) | int64_t(tail[1]) << 8 | int64_t(tail[2]) << 16 |
                              int64_t(tail[3]) << 24;
        // JSON traces compress 10-20x; a larger claim (a damaged or hostile file) is not
        // believed.
        hint_ = std::min<int64_t>(std::max<int64_t>(isize, st.st_size), 32 * st.st_size);
      }
    }
    hint_ = std::min(hint_, kMaxTraceBytes);
    f_ = gzdopen(fd, "rb");
    if (!f_) SL_THROW(IoError, path, ": cannot open for reading");
    gzbuffer(f_, 1 << 17);
  }
  TraceStreamBuf(const TraceStreamBuf&) = delete;
  TraceStreamBuf& operator=(const TraceStreamBuf&) = delete;
  ~TraceStreamBuf() override { gzclose(f_); }

  int64_t size_hint() const { return hint_; }
  // IoError naming the file when the stream ended on an error rather than at its end.
  void check() const {
    if (too_big_)
      SL_THROW(IoError, path_, ": more than ", kMaxTraceBytes >> 30, " GiB uncompressed");
    if (!why_.empty()) SL_THROW(IoError, path_, ": not a complete gzip stream (", why_, ")");
  }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    if (too_big_ || !why_.empty()) return traits_type::eof();
    const int n = gzread(f_, buf_, sizeof buf_);
    int err = 0;
    const char* why = gzerror(f_, &err);
    if (n < 0 || err < 0) {
      why_ = why && *why ? why : "read error";
      return traits_type::eof();
    }
    if (n == 0) return traits_type::eof();
    total_ += n;
    if (total_ > kMaxTraceBytes) {
      too_big_ = true;
      return traits_type::eof();
    }
    setg(buf_, buf_, buf_ + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  std::string path_;
  gzFile f_ = nullptr;
  char buf_[1 << 16];
  int64_t total_ = 0, hint_ = 0;
  bool too_big_ = false;
  std::string why_;
};

// One complete ("X") event of the trace, what the mapping needs of it.
struct Raw {
  std::string name, cat;
  int64_t tid = 0;
  double ts = 0, dur = 0;  // us
  // Collectives (gloo and c10d spans, NCCL kernels): the elements of the buffer the size
  // convention of traffic.hpp counts (-1: not known), and their type.
  int64_t numel = -1;
  DType dtype = DType::f32;
  int64_t correlation = -1;  // GPU kernels and the runtime calls that launched them
  std::string collective;    // NCCL kernels: "Collective name" (recent PyTorch), else empty
  int group = 0;  // NCCL kernels' "Group size", or a c10d gather's buffers' ratio; 0: not known
};

// The elements of one input of a profiler "Input Dims" entry: [n, m] -> n m, a TensorList
// [[n], [m]] -> n + m; -1 where the profiler kept no shape (a TensorList recorded as []).
int64_t numel_of(const json& dims, const std::string& type) {
  if (!dims.is_array()) return -1;
  if (dims.empty()) return type == "TensorList" ? -1 : 1;
  if (dims[0].is_array()) {
    int64_t s = 0;
    for (const json& d : dims) s += std::max<int64_t>(0, numel_of(d, ""));
    return s;
  }
  int64_t p = 1;
  for (const json& d : dims) p *= d.is_number_integer() ? d.get<int64_t>() : 0;
  return p;
}

// An element type as the profiler ("float", "c10::BFloat16", "unsigned char") or an NCCL
// kernel's "dtype" ("Float", "BFloat16", "Byte") names it: the DType it is counted as and its
// bytes. DType has floats only: other types are counted as the f32 elements of the same bytes, so
// bytes and traffic stay exact.
struct ElemType {
  DType dtype = DType::f32;
  int64_t bytes = 4;
};
ElemType elem_type(const std::string& t) {
  if (t == "c10::BFloat16" || t == "BFloat16") return {DType::bf16, 2};
  if (t == "c10::Half" || t == "Half") return {DType::f16, 2};
  for (const char* two : {"short", "Short"})
    if (t == two) return {DType::f32, 2};
  for (const char* eight : {"long", "long int", "double", "c10::complex<float>", "Long", "Double"})
    if (t == eight) return {DType::f32, 8};
  for (const char* one :
       {"bool", "unsigned char", "signed char", "char", "Bool", "Byte", "Char", "Float8_e4m3fn"})
    if (t == one) return {DType::f32, 1};
  return {};
}
int64_t as_elements(int64_t numel, ElemType e) {
  if (numel < 0 || e.dtype != DType::f32 || e.bytes == 4) return numel;
  return (numel * e.bytes + 3) / 4;
}

// The collective a gloo span, c10d call, NCCL kernel or "Collective name" stands for:
// "all_gather", "reduce_scatter", "all_reduce", "broadcast", "barrier", "all_to_all", "send",
// "recv"; "" for waits and the rest.
std::string collective_of(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("wait") || has("Wait")) return "";
  if (has("allgather") || has("all_gather") || has("AllGather")) return "all_gather";
  if (has("reduce_scatter") || has("ReduceScatter")) return "reduce_scatter";
  if (has("allreduce") || has("all_reduce") || has("AllReduce")) return "all_reduce";
  if (has("alltoall") || has("all_to_all") || has("AllToAll")) return "all_to_all";
  if (has("broadcast") || has("Broadcast")) return "broadcast";
  if (has("barrier")) return "barrier";
  if (has("send") || has("Send")) return "send";
  if (has("recv") || has("Recv")) return "recv";
  return "";
}
// The CommOp of a collective_of name, or -1 (all_to_all, send, recv: not engine collectives).
int comm_op_of(const std::string& op) {
  for (CommOp c : {CommOp::all_gather, CommOp::reduce_scatter, CommOp::all_reduce,
                   CommOp::broadcast, CommOp::barrier})
    if (op == comm_op_name(c)) return static_cast<int>(c);
  return -1;
}

bool is_nccl_kernel(const Raw& e) {
  return e.cat == "kernel" && (starts_with(e.name, "ncclKernel") || starts_with(e.name, "ncclDev"));
}

// One "[memory]" instant event: an allocation (bytes > 0) or a free (< 0) of the block at `addr`
// on a device (type 0 CPU, 1 CUDA), and the profiler's total on it after the change.
struct MemRaw {
  double ts = 0;  // us
  int64_t bytes = 0;
  uint64_t addr = 0;
  int64_t total = -1;  // "Total Allocated" (-1: absent)
  int device_type = -1, device_id = -1;
};

struct Parsed {
  std::vector<Raw> events;
  std::vector<MemRaw> memory;
  json root = json::object();  // the trace's members other than its events
};

// What a collective event carries: its buffer's elements (the per-rank count Communicator calls
// take: an all-gather's shard, a reduce-scatter's output, an all-to-all's input), type and group.
void read_collective_args(const json& e, Raw& r) {
  static const json kNone = json::object();
  const auto found = e.find("args");
  const json& args = found != e.end() && found->is_object() ? *found : kNone;
  if (is_nccl_kernel(r) && args.contains("Collective name") &&
      args["Collective name"].is_string()) {
    r.collective = args["Collective name"].get<std::string>();
    const std::string op = collective_of(r.collective);
    const char* key = op == "reduce_scatter" ? "Out msg nelems" : "In msg nelems";
    const ElemType t = elem_type(args.value("dtype", std::string("Float")));
    r.dtype = t.dtype;
    if (args.contains(key) && args[key].is_number_integer())
      r.numel = as_elements(args[key].get<int64_t>(), t);
    if (args.contains("Group size") && args["Group size"].is_number_integer())
      r.group = args["Group size"].get<int>();
    return;
  }
  if (!starts_with(r.name, "gloo:") && !starts_with(r.name, "c10d::")) return;
  const json& dims = args.value("Input Dims", json());
  const json& types = args.value("Input type", json());
  // c10d's all-gather and all-to-all take (output, input): the input is the second; gloo's spans
  // and the other calls name their buffer first.
  const std::string op = collective_of(r.name);
  const size_t k = starts_with(r.name, "c10d::") && (op == "all_gather" || op == "all_to_all");
  if (!dims.is_array() || dims.size() <= k) return;
  const std::string type = types.is_array() && types.size() > k && types[k].is_string()
                               ? types[k].get<std::string>()
                               : "";
  const ElemType t = elem_type(type);
  r.dtype = t.dtype;
  const int64_t numel = numel_of(dims[k], type);
  r.numel = as_elements(numel, t);
  // An all-gather's output (a reduce-scatter's input) is the group's size times the shard: the
  // group, which older traces do not record.
  if (starts_with(r.name, "c10d::") && (op == "all_gather" || op == "reduce_scatter") &&
      dims.size() >= 2) {
    const int64_t full = numel_of(dims[op == "all_gather" ? 0 : 1], "");
    const int64_t shard = op == "all_gather" ? numel : numel_of(dims[0], "");
    if (shard > 0 && full >= shard && full % shard == 0 && full / shard <= kMaxTraceRanks)
      r.group = static_cast<int>(full / shard);
  }
}

// JSON nested deeper than this is refused (a trace's deepest is an operator's TensorList shapes,
// 6 levels).
constexpr size_t kMaxTraceDepth = 64;

// The uncompressed trace, padded as simdjson reads it (its SIMD loads run past the end).
std::string read_trace_padded(const std::string& path, size_t& length) {
  TraceStreamBuf bytes(path);
  // Allocated once when the hint holds (reserved, not touched: a wrong hint costs nothing).
  std::string text;
  text.reserve(static_cast<size_t>(bytes.size_hint()) + simdjson::SIMDJSON_PADDING);
  std::vector<char> buf(size_t(1) << 20);
  std::streamsize n;
  while ((n = bytes.sgetn(buf.data(), static_cast<std::streamsize>(buf.size()))) > 0)
    text.append(buf.data(), static_cast<size_t>(n));
  const size_t used = text.size();
  text.resize(used);
  bytes.check();
  length = text.size();
  text.resize(length + simdjson::SIMDJSON_PADDING, ' ');
  return text;
}

// The arguments of an event that the mapping may read, as slices of the trace's text (valid
// while it lives); the shapes are parsed only for the events that need them.
struct ArgsView {
  int64_t correlation = -1, in_nelems = -1, out_nelems = -1, group = -1;
  // [memory] events
  bool has_bytes = false;
  int64_t bytes = 0, total_allocated = -1, device_type = -1, device_id = -1;
  uint64_t addr = 0;
  std::string_view collective, dtype, input_dims, input_type;
};

// The text of an array or object value.
template <typename T>
std::string_view raw(simdjson::simdjson_result<T> v) {
  T t = std::move(v);  // throws simdjson_error when v is of another type
  return t.raw_json();
}

ArgsView read_args(od::object args) {
  ArgsView a;
  for (auto field : args) {
    // Keys compared as they are in the text (the trace's keys have no escapes).
    const od::raw_json_string k = field.key();
    od::value v = field.value();
    if (k == "correlation")
      a.correlation = v.get_int64();
    else if (k == "Collective name")
      a.collective = v.get_string();
    else if (k == "In msg nelems")
      a.in_nelems = v.get_int64();
    else if (k == "Out msg nelems")
      a.out_nelems = v.get_int64();
    else if (k == "Group size")
      a.group = v.get_int64();
    else if (k == "dtype")
      a.dtype = v.get_string();
    else if (k == "Input Dims")
      a.input_dims = raw(v.get_array());
    else if (k == "Input type")
      a.input_type = raw(v.get_array());
    else if (k == "Bytes") {
      a.bytes = v.get_int64();
      a.has_bytes = true;
    } else if (k == "Addr")
      a.addr = v.get_uint64();
    else if (k == "Total Allocated")
      a.total_allocated = v.get_int64();
    else if (k == "Device Type")
      a.device_type = v.get_int64();
    else if (k == "Device Id")
      a.device_id = v.get_int64();
  }
  return a;
}

// One event of the trace as the mapping reads it, or nothing (what is not a complete "X" event
// with an integer tid). Values of another type than the field's are an error (simdjson's).
void read_event(od::value value, const std::string& path, Parsed& p) {
  od::object e;
  if (value.get_object().get(e) != simdjson::SUCCESS) return;  // not an object: not an event
  Raw r;
  bool complete = false, instant = false, tid = false;
  ArgsView args;
  for (auto field : e) {
    // Keys compared as they are in the text (the trace's keys have no escapes).
    const od::raw_json_string k = field.key();
    od::value v = field.value();
    if (k == "ph") {
      const std::string_view ph = v.get_string();
      complete = ph == "X";
      instant = ph == "i";
    } else if (k == "name") {
      r.name = std::string_view(v.get_string());
    } else if (k == "cat") {
      r.cat = std::string_view(v.get_string());
    } else if (k == "tid") {
      int64_t t = 0;
      tid = v.get_int64().get(t) == simdjson::SUCCESS;  // a string tid ("stream 7"): not read
      r.tid = t;
    } else if (k == "ts") {
      r.ts = v.get_double();
    } else if (k == "dur") {
      r.dur = v.get_double();
    } else if (k == "args") {
      od::object o;
      if (v.get_object().get(o) == simdjson::SUCCESS) args = read_args(o);
    }
  }
  if (instant && r.name == "[memory]" && args.has_bytes) {
    if (args.device_type < 0 || args.device_type > 1 << 16 || args.device_id < -1 ||
        args.device_id > 1 << 16)
      SL_THROW(IoError, path, ": a [memory] event of device type ", args.device_type, " id ",
               args.device_id);
    p.memory.push_back({r.ts, args.bytes, args.addr, args.total_allocated,
                        static_cast<int>(args.device_type), static_cast<int>(args.device_id)});
    return;
  }
  if (!complete || !tid) return;
  if (r.cat == "kernel" || r.cat == "cuda_runtime" || r.cat == "cuda_driver")
    r.correlation = args.correlation;
  if (is_nccl_kernel(r) || starts_with(r.name, "c10d::") || starts_with(r.name, "gloo:")) {
    json a = json::object();
    if (!args.collective.empty()) a["Collective name"] = std::string(args.collective);
    if (!args.dtype.empty()) a["dtype"] = std::string(args.dtype);
    if (args.in_nelems >= 0) a["In msg nelems"] = args.in_nelems;
    if (args.out_nelems >= 0) a["Out msg nelems"] = args.out_nelems;
    if (args.group >= 0) a["Group size"] = args.group;
    if (!args.input_dims.empty())
      a["Input Dims"] = parse_json_strict(std::string(args.input_dims), path + ": Input Dims");
    if (!args.input_type.empty())
      a["Input type"] = parse_json_strict(std::string(args.input_type), path + ": Input type");
    read_collective_args(json{{"args", std::move(a)}}, r);
  }
  p.events.push_back(std::move(r));
}

// The trace read with simdjson's On-Demand API: each event's fields are read where they lie in
// the text, the rest skipped unbuilt; the root's small members (distributedInfo,
// deviceProperties, baseTimeNanoseconds) become the JSON the mapping reads them from.
Parsed parse_trace(const std::string& path) {
  size_t length = 0;
  const std::string text = read_trace_padded(path, length);
  Parsed p;
  bool events = false;
  try {
    od::parser parser;
    if (parser.allocate(length, kMaxTraceDepth) != simdjson::SUCCESS)
      SL_THROW(IoError, path, ": cannot allocate the parser for ", length, " bytes");
    od::document doc =
        parser.iterate(simdjson::padded_string_view(text.data(), length, text.size()));
    od::object root;
    if (doc.get_object().get(root) != simdjson::SUCCESS)
      SL_THROW(IoError, path, ": not a torch.profiler trace (not a JSON object)");
    for (auto field : root) {
      const std::string_view k = field.unescaped_key();
      od::value v = field.value();
      if (k == "traceEvents") {
        events = true;
        for (od::value e : v.get_array()) read_event(e, path, p);
      } else if (k == "distributedInfo") {
        p.root["distributedInfo"] =
            parse_json_strict(std::string(raw(v.get_object())), path + ": distributedInfo");
      } else if (k == "deviceProperties") {
        p.root["deviceProperties"] =
            parse_json_strict(std::string(raw(v.get_array())), path + ": deviceProperties");
      } else if (k == "baseTimeNanoseconds") {
        p.root["baseTimeNanoseconds"] = int64_t(v.get_int64());
      }
    }
  } catch (const simdjson::simdjson_error& e) {
    SL_THROW(IoError, path, ": not a torch.profiler trace (", e.what(), ")");
  } catch (const json::exception& e) {
    SL_THROW(IoError, path, ": not a torch.profiler trace (", e.what(), ")");
  }
  if (!events) SL_THROW(IoError, path, ": not a torch.profiler trace (no traceEvents)");
  return p;
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

// A collective's two byte measures (traffic.hpp), for all_to_all, send and recv too. A call whose
// size the trace does not hold is named "<op>(?)", with no bytes: never a guessed size.
void set_comm_bytes(SpanEvent& s, const std::string& op, int64_t count, DType dtype, int n,
                    int64_t& unknown) {
  s.op = op;
  s.dtype = dtype;
  if (count < 0) {
    s.op = op + "(?)";
    s.bytes = 0;
    s.sent = -1;
    ++unknown;
    return;
  }
  const int c = comm_op_of(op);
  if (c >= 0) {
    s.bytes = collective_bytes(static_cast<CommOp>(c), count, dtype, n);
    s.sent = sent_bytes(static_cast<CommOp>(c), count, dtype, n);
    return;
  }
  const int64_t b = count * static_cast<int64_t>(dtype_size(dtype));
  s.bytes = b;
  s.sent = op == "all_to_all" ? b / n * (n - 1) : op == "send" ? b : 0;
}

// One rank's trace as the mapping reads it: its steps, main thread and FSDP2 labels.
class RankTimeline {
 public:
  RankTimeline(const Parsed& p, TorchRank& r) : p_(p), r_(r) {
    const json& base_j = p.root.value("baseTimeNanoseconds", json(0));
    base_ = base_j.is_number_integer() ? base_j.get<int64_t>() : 0;
  }

  // Exact to the ns for the microsecond times of a trace without baseTimeNanoseconds (epoch
  // microseconds, past where a double holds nanoseconds).
  int64_t ns(double us) const {
    const double whole = std::floor(us);
    return base_ + static_cast<int64_t>(whole) * 1000 + std::llround((us - whole) * 1000.0);
  }

  void read_steps() {
    std::vector<const Raw*> steps;
    for (const Raw& e : p_.events)
      if (starts_with(e.name, "ProfilerStep#")) steps.push_back(&e);
    if (steps.empty())
      SL_THROW(IoError, r_.path, ": no ProfilerStep#N spans (profile with a schedule)");
    std::sort(steps.begin(), steps.end(), [](const Raw* a, const Raw* b) { return a->ts < b->ts; });
    main_ = steps.front()->tid;
    first_ = steps.front()->ts;
    last_ = steps.back()->ts + steps.back()->dur;
    r_.start_ns = ns(first_);
    steps_ = steps;
    for (const Raw* s : steps)
      r_.steps.push_back(
          {ns(s->ts + s->dur), std::atoi(s->name.c_str() + 13), std::nan(""), 0, s->dur * 1e-6});
  }

  // Units and their states from FSDP2's labels (any thread: the backward's run on autograd's
  // device threads on GPUs), and the optimizer's spans.
  void read_labels() {
    std::vector<const Raw*> labels;
    for (const Raw& e : p_.events)
      if (e.cat == "user_annotation" && e.ts >= first_ && e.ts <= last_) labels.push_back(&e);
    std::sort(labels.begin(), labels.end(), by_start);
    std::map<std::string, int> unit_ids = {{"", 0}};
    r_.units = {""};
    for (const Raw* l : labels) {
      if (starts_with(l->name, "Optimizer.")) optimizer_.emplace_back(l->ts, l->ts + l->dur);
      if (!starts_with(l->name, "FSDP::")) continue;
      const auto [what, name] = fsdp_label(l->name);
      auto it = unit_ids.find(name);
      if (it == unit_ids.end()) {
        it = unit_ids.emplace(name, static_cast<int>(r_.units.size())).first;
        r_.units.push_back(name);
      }
      const int u = it->second;
      if (what == "pre_forward" || what == "pre_backward") marks_.push_back({l->ts, u});
      if (what == "post_forward") marks_.push_back({l->ts + l->dur, 0});
      if (what == "all_gather" || what == "post_backward_reduce") scoped_.emplace_back(l, u);
      // Unit states, as FSDP2 labels them: gathering from its all-gather, unsharded once copied
      // out, resharded after forward (the root stays gathered) and after backward.
      if (what == "all_gather") r_.unit_events.push_back({ns(l->ts), u, UnitState::gathering});
      if (what == "all_gather_copy_out")
        r_.unit_events.push_back({ns(l->ts + l->dur), u, UnitState::unsharded});
      if ((what == "post_forward" && u != 0) || what == "post_backward_reshard")
        r_.unit_events.push_back({ns(l->ts + l->dur), u, UnitState::resharded});
    }
    fsdp_ = r_.units.size() > 1 || !marks_.empty();
  }

  void map_cpu();
  void map_gpu();
  void map_memory();

 private:
  static bool by_start(const Raw* a, const Raw* b) {
    return a->ts != b->ts ? a->ts < b->ts : a->dur > b->dur;
  }
  bool in_steps(double ts) const { return ts >= first_ && ts <= last_; }
  // The FSDP2 unit a time of the program belongs to (-1 without FSDP2).
  int unit_at(double ts) const {
    if (!fsdp_) return -1;
    int u = 0;
    for (const Mark& m : marks_) {
      if (m.ts > ts) break;
      u = m.unit;
    }
    return u;
  }
  bool in_optimizer(double ts) const {
    for (const auto& [a, b] : optimizer_)
      if (ts >= a && ts < b) return true;
    return false;
  }
  // The unit whose FSDP2 all-gather or reduce label holds a collective issued at `ts`.
  int comm_unit_at(double ts) const {
    int unit = -1;
    for (const auto& [l, u] : scoped_)
      if (ts >= l->ts && ts <= l->ts + l->dur) unit = u;
    return unit;
  }
  // Appends a compute span, merged into the last one when it continues it (same phase and unit,
  // within `gap_us`).
  void add_compute(const char* phase, int unit, double ts, double end, double gap_us) {
    SpanEvent s{Lane::compute, phase, unit, 0, DType::f32, ns(ts), ns(ts), ns(end), -1};
    if (!compute_.empty()) {
      SpanEvent& prev = compute_.back();
      if (prev.op == s.op && prev.unit == s.unit &&
          static_cast<double>(s.t_start - prev.t_end) <= gap_us * 1000.0) {
        prev.t_end = std::max(prev.t_end, s.t_end);
        return;
      }
    }
    compute_.push_back(s);
  }
  void finish() {
    r_.spans.insert(r_.spans.end(), compute_.begin(), compute_.end());
    std::stable_sort(r_.spans.begin(), r_.spans.end(),
                     [](const SpanEvent& a, const SpanEvent& b) { return a.t_end < b.t_end; });
  }

  struct Mark {
    double ts;
    int unit;
  };
  const Parsed& p_;
  TorchRank& r_;
  int64_t base_ = 0, main_ = 0;
  double first_ = 0, last_ = 0;
  std::vector<const Raw*> steps_;
  bool fsdp_ = false;
  std::vector<Mark> marks_;                         // where the current unit changes
  std::vector<std::pair<const Raw*, int>> scoped_;  // all_gather / post_backward_reduce (unit)
  std::vector<std::pair<double, double>> optimizer_;
  std::vector<SpanEvent> compute_;
};

// CPU (gloo): compute is the main thread's outermost operators; communication is each gloo span
// with the c10d call that issued it, in order per collective (gloo's all-reduces serve both
// all_reduce and reduce_scatter calls).
void RankTimeline::map_cpu() {
  std::vector<const Raw*> ops, calls, gloo;
  for (const Raw& e : p_.events) {
    if (!in_steps(e.ts)) continue;
    if (starts_with(e.name, "gloo:")) gloo.push_back(&e);
    if (e.tid != main_) continue;
    if (starts_with(e.name, "c10d::")) {
      if (comm_op_of(collective_of(e.name)) >= 0) calls.push_back(&e);
    } else if (e.cat == "cpu_op") {
      ops.push_back(&e);
    }
  }
  for (auto* v : {&ops, &calls, &gloo}) std::sort(v->begin(), v->end(), by_start);

  double outer_end = -1;
  for (const Raw* o : ops) {
    if (o->ts < outer_end) continue;  // inside the previous outermost one
    outer_end = o->ts + o->dur;
    const char* phase = in_optimizer(o->ts)                  ? "optimizer"
                        : starts_with(o->name, "autograd::") ? "backward"
                                                             : "forward";
    add_compute(phase, unit_at(o->ts), o->ts, o->ts + o->dur, kMergeGapUs);
  }

  std::map<std::string, std::deque<const Raw*>> issued;
  for (const Raw* c : calls) {
    std::string op = collective_of(c->name);
    issued[op == "reduce_scatter" ? "all_reduce" : op].push_back(c);
  }
  for (const Raw* g : gloo) {
    const std::string op = collective_of(g->name.substr(5));
    if (comm_op_of(op) < 0 || g->numel < 0) continue;
    const Raw* call = nullptr;
    auto& q = issued[op];
    if (!q.empty() && q.front()->ts <= g->ts) {
      call = q.front();
      q.pop_front();
    }
    if (!call) ++r_.unmatched_comm;
    if (call && collective_of(call->name) == "reduce_scatter") ++r_.reduce_scatters_as_all_reduce;
    SpanEvent s{Lane::comm,
                "",
                call ? comm_unit_at(call->ts) : -1,
                0,
                g->dtype,
                ns(call ? call->ts : g->ts),
                ns(g->ts),
                ns(g->ts + g->dur),
                -1};
    set_comm_bytes(s, op, g->numel, g->dtype, r_.world, r_.comm_size_unknown);
    r_.spans.push_back(s);
  }
  finish();
}

// GPU (NCCL): communication is the NCCL kernels, compute every other kernel (memcpy and memset
// are neither, as HTA counts them). A kernel is joined to the CPU call that launched it by its
// correlation id: that call's time gives its phase and FSDP2 unit, and the c10d call around it
// the collective where the kernel's own arguments do not name it (older PyTorch; kernel names
// are not reliable: one real trace runs every collective as ncclKernel_SendRecv).
void RankTimeline::map_gpu() {
  std::map<int64_t, const Raw*> launch;             // correlation -> runtime call
  std::map<int64_t, std::vector<const Raw*>> c10d;  // by thread, by start
  std::vector<const Raw*> kernels;
  for (const Raw& e : p_.events) {
    if ((e.cat == "cuda_runtime" || e.cat == "cuda_driver") && e.correlation >= 0)
      launch[e.correlation] = &e;
    else if (starts_with(e.name, "c10d::") && !collective_of(e.name).empty())
      c10d[e.tid].push_back(&e);
    else if (e.cat == "kernel")
      kernels.push_back(&e);
  }
  for (auto& [tid, v] : c10d) std::sort(v.begin(), v.end(), by_start);
  std::sort(kernels.begin(), kernels.end(), by_start);
  // A kernel belongs to the steps when its launch does (a kernel runs after its launch: the last
  // step's may end after the step's CPU span); one with no launch in the trace, by its own time.
  std::vector<double> step_gpu_end(steps_.size(), 0);
  for (const Raw* k : kernels) {
    const auto it = launch.find(k->correlation);
    const Raw* l = it != launch.end() ? it->second : nullptr;
    const double at = l ? l->ts : k->ts;
    if (!in_steps(at)) continue;
    for (size_t i = 0; i < steps_.size(); ++i)
      if (at >= steps_[i]->ts && at <= steps_[i]->ts + steps_[i]->dur)
        step_gpu_end[i] = std::max(step_gpu_end[i], k->ts + k->dur);
    if (!is_nccl_kernel(*k)) {
      const char* phase = in_optimizer(at)       ? "optimizer"
                          : l && l->tid != main_ ? "backward"
                                                 : "forward";
      add_compute(phase, unit_at(at), k->ts, k->ts + k->dur, 0.0);
      continue;
    }
    // The innermost c10d call around the launch, on the launching thread.
    const Raw* call = nullptr;
    if (l)
      for (const Raw* c : c10d[l->tid]) {
        if (c->ts > l->ts) break;
        if (l->ts <= c->ts + c->dur) call = c;
      }
    std::string op = collective_of(k->collective);
    int64_t count = k->numel;
    DType dtype = k->dtype;
    int group = k->group;
    if (op.empty() && call) {
      op = collective_of(call->name);
      count = call->numel;
      dtype = call->dtype;
      group = call->group;
    }
    if (op.empty()) op = collective_of(k->name.substr(4));  // ncclKernel_AllReduce_...: the name
    if (op.empty()) op = "nccl";
    if (!call && k->collective.empty()) ++r_.unmatched_comm;
    const double issue = call ? call->ts : at;
    SpanEvent s{Lane::comm,
                "",
                comm_unit_at(issue),
                0,
                dtype,
                ns(std::min(issue, k->ts)),
                ns(k->ts),
                ns(k->ts + k->dur),
                -1};
    set_comm_bytes(s, op, count, dtype, group > 0 ? group : r_.world, r_.comm_size_unknown);
    r_.spans.push_back(s);
  }
  // On a GPU a step ends when its last kernel does.
  for (size_t i = 0; i < steps_.size(); ++i) {
    const double end = std::max(steps_[i]->ts + steps_[i]->dur, step_gpu_end[i]);
    r_.steps[i].t = ns(end);
    r_.steps[i].step_time = (end - steps_[i]->ts) * 1e-6;
  }
  r_.gpu = true;
  finish();
}

// Memory: the [memory] events of the rank's device replayed block by block (a block is an
// allocation at an address until the free at that address). What the profiler reports is the
// bytes and the total; the category of each block is inferred, by these rules, first match:
//   comm_buffers      allocated while a collective was in flight (issue to end) and freed by
//                     kCommSlackUs after it ended;
//   params_unsharded  FSDP2: allocated while a unit was gathering (its all-gather to its copy-out)
//                     and alive after its copy-out;
//   activations       allocated in forward, freed after it in the same step (in backward, where
//                     autograd drops what forward saved, or after: the batch, the loss);
//   grads             allocated in backward and alive into the optimizer (freed there, in a later
//                     step, or never);
//   optimizer_state   allocated in the optimizer and alive after its step (freed in a later step,
//                     or never): Adam's moments, created at the first step;
//   workspace         allocated and freed within one phase of one step (temporaries);
//   unattributed      the rest, and what was held before the first event (the first event's
//                     "Total Allocated" less its bytes, or what later frees of blocks allocated
//                     before need, whichever is larger).
void RankTimeline::map_memory() {
  constexpr double kCommSlackUs = 100;
  const int type = r_.gpu ? 1 : 0;  // the profiler's device types: 0 CPU, 1 CUDA
  std::map<int, int64_t> by_id;
  for (const MemRaw& m : p_.memory)
    if (m.device_type == type) ++by_id[m.device_id];
  if (by_id.empty()) return;
  int dev = by_id.begin()->first;  // the GPU with the most events: the rank's own
  for (const auto& [id, n] : by_id)
    if (n > by_id[dev]) dev = id;
  r_.mem_device = r_.gpu ? "cuda:" + std::to_string(dev) : "cpu";
  std::vector<const MemRaw*> ev;
  for (const MemRaw& m : p_.memory)
    if (m.device_type == type && m.device_id == dev && m.ts >= first_) ev.push_back(&m);
  std::stable_sort(ev.begin(), ev.end(),
                   [](const MemRaw* a, const MemRaw* b) { return a->ts < b->ts; });
  if (ev.empty()) return;
  r_.mem_events = static_cast<int64_t>(ev.size());

  // The phases: compute spans by start (the phase at t is the last one begun), collectives by
  // issue, FSDP2's gathering windows, the steps by start.
  std::vector<const SpanEvent*> compute, comm;
  for (const SpanEvent& sp : r_.spans) (sp.lane == Lane::compute ? compute : comm).push_back(&sp);
  std::sort(compute.begin(), compute.end(),
            [](const SpanEvent* a, const SpanEvent* b) { return a->t_start < b->t_start; });
  std::sort(comm.begin(), comm.end(),
            [](const SpanEvent* a, const SpanEvent* b) { return a->t_issue < b->t_issue; });
  const auto phase_at = [&](int64_t t) -> std::string {
    auto it = std::upper_bound(compute.begin(), compute.end(), t,
                               [](int64_t x, const SpanEvent* c) { return x < c->t_start; });
    return it == compute.begin() ? std::string() : (*std::prev(it))->op;
  };
  const auto comm_at = [&](int64_t t) -> const SpanEvent* {
    auto it = std::upper_bound(comm.begin(), comm.end(), t,
                               [](int64_t x, const SpanEvent* c) { return x < c->t_issue; });
    for (int back = 0; it != comm.begin() && back < 16; ++back) {
      --it;
      if ((*it)->t_end >= t) return *it;
    }
    return nullptr;
  };
  std::vector<std::pair<int64_t, int64_t>> gathering;  // [gathering, unsharded] of a unit
  {
    std::map<int, int64_t> open;
    for (const UnitEvent& u : r_.unit_events) {
      if (u.state == UnitState::gathering) open[u.unit] = u.t;
      if (u.state == UnitState::unsharded && open.count(u.unit)) {
        gathering.emplace_back(open[u.unit], u.t);
        open.erase(u.unit);
      }
    }
  }
  std::vector<int64_t> step_start;
  for (const Raw* st : steps_) step_start.push_back(ns(st->ts));
  const auto step_of = [&](int64_t t) {
    return static_cast<int>(std::upper_bound(step_start.begin(), step_start.end(), t) -
                            step_start.begin()) -
           1;
  };

  struct Block {
    int64_t t_alloc = 0, bytes = 0, t_free = -1;  // -1: never freed in the trace
    std::string phase, free_phase;
    int step = -1, free_step = -1;
    const SpanEvent* comm = nullptr;
  };
  std::vector<Block> blocks;
  std::unordered_map<uint64_t, size_t> open;
  std::vector<std::pair<int64_t, int64_t>> before_frees;  // (t, bytes) of blocks from before
  int64_t replay = 0;  // the bytes the events replayed add to the baseline, after each
  std::vector<int64_t> replayed(ev.size());
  for (size_t i = 0; i < ev.size(); ++i) {
    const MemRaw& m = *ev[i];
    const int64_t t = ns(m.ts);
    if (m.bytes > 0) {
      Block b;
      b.t_alloc = t;
      b.bytes = m.bytes;
      b.phase = phase_at(t);
      b.step = step_of(t);
      b.comm = comm_at(t);
      open[m.addr] = blocks.size();
      blocks.push_back(std::move(b));
    } else if (m.bytes < 0) {
      auto it = open.find(m.addr);
      if (it != open.end() && blocks[it->second].bytes == -m.bytes) {
        Block& b = blocks[it->second];
        b.t_free = t;
        b.free_phase = phase_at(t);
        b.free_step = step_of(t);
        open.erase(it);
      } else {
        before_frees.emplace_back(t, -m.bytes);
      }
    }
    replay += m.bytes;
    replayed[i] = replay;
  }
  const auto category = [&](const Block& b) {
    const bool freed = b.t_free >= 0;
    if (b.comm && freed && static_cast<double>(b.t_free - b.comm->t_end) <= kCommSlackUs * 1000.0)
      return MemCategory::comm_buffers;
    for (const auto& [g0, g1] : gathering)
      if (b.t_alloc >= g0 && b.t_alloc <= g1 && (!freed || b.t_free > g1))
        return MemCategory::params_unsharded;
    const bool later = !freed || b.free_step > b.step;
    if (b.phase == "forward" && freed && b.free_step == b.step && b.free_phase != "forward")
      return MemCategory::activations;
    if (b.phase == "backward" && (later || b.free_phase == "optimizer")) return MemCategory::grads;
    if (b.phase == "optimizer" && later) return MemCategory::optimizer_state;
    if (freed && b.free_step == b.step && b.free_phase == b.phase && !b.phase.empty())
      return MemCategory::workspace;
    return MemCategory::unattributed;
  };

  // The changes in time order (allocations before frees at one time), then their totals.
  struct Change {
    int64_t t;
    int64_t bytes;
    MemCategory c;
  };
  std::vector<Change> changes;
  changes.reserve(2 * blocks.size() + before_frees.size());
  for (const Block& b : blocks) {
    const MemCategory c = category(b);
    ++r_.mem_blocks[static_cast<int>(c)];
    changes.push_back({b.t_alloc, b.bytes, c});
    if (b.t_free >= 0) changes.push_back({b.t_free, -b.bytes, c});
  }
  for (const auto& [t, bytes] : before_frees)
    changes.push_back({t, -bytes, MemCategory::unattributed});
  std::stable_sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) {
    return a.t != b.t ? a.t < b.t : a.bytes > b.bytes;
  });
  // The baseline, held as unattributed from the first step on: what the first event's total
  // says was held before it, or what the frees of blocks from before need so that no total goes
  // below zero (on the CPU the profiler's total counts only what it saw), the larger.
  const int64_t reported = ev.front()->total >= 0 ? ev.front()->total - ev.front()->bytes : 0;
  int64_t low = 0, total = 0, unattributed = 0;
  for (const Change& c : changes) {
    total += c.bytes;
    if (c.c == MemCategory::unattributed) unattributed += c.bytes;
    low = std::min({low, total, unattributed});
  }
  const int64_t baseline = std::max(reported, -low);
  r_.mem_baseline = baseline;
  for (size_t i = 0; i < ev.size(); ++i)
    if (ev[i]->total >= 0 && ev[i]->total != baseline + replayed[i]) ++r_.mem_mismatches;
  MemArray cur{};
  total = 0;
  if (baseline > 0) {
    cur[static_cast<int>(MemCategory::unattributed)] = total = baseline;
    r_.mem.push_back({r_.start_ns, MemCategory::unattributed, baseline, baseline, baseline});
  }
  for (const Change& c : changes) {
    cur[static_cast<int>(c.c)] += c.bytes;
    total += c.bytes;
    r_.mem.push_back({std::max(c.t, r_.start_ns), c.c, c.bytes, cur[static_cast<int>(c.c)], total});
  }
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
  if (r.world < 1 || r.world > kMaxTraceRanks || r.rank < 0 || r.rank >= r.world)
    SL_THROW(IoError, path, ": distributedInfo rank ", r.rank, " of world_size ", r.world,
             " (at most ", kMaxTraceRanks, " ranks)");
  r.backend = info.value("backend", "");
  const json& props = p.root.value("deviceProperties", json());
  if (props.is_array() && !props.empty() && props[0].is_object())
    r.device_name = props[0].value("name", "");

  RankTimeline t(p, r);
  t.read_steps();
  t.read_labels();
  const bool gpu =
      std::any_of(p.events.begin(), p.events.end(), [](const Raw& e) { return e.cat == "kernel"; });
  if (gpu)
    t.map_gpu();
  else
    t.map_cpu();
  t.map_memory();
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
  if (s.lane == Lane::comm && s.sent >= 0) j["sent"] = s.sent;  // none: not known
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
  // The traces are read in parallel, one per core at most; an error is the first file's.
  std::vector<TorchRank> ranks(files.size());
  std::vector<std::exception_ptr> errors(files.size());
  std::atomic<size_t> next{0};
  const size_t workers =
      std::min<size_t>(files.size(), std::max<size_t>(1, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t w = 0; w < workers; ++w)
    pool.emplace_back([&] {
      for (size_t i; (i = next++) < files.size();) {
        try {
          ranks[i] = read_torch_trace(files[i]);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      }
    });
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  std::sort(ranks.begin(), ranks.end(),
            [](const TorchRank& a, const TorchRank& b) { return a.rank < b.rank; });
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i].world != ranks[0].world)
      SL_THROW(InvalidArgument, ranks[i].path, ": world_size ", ranks[i].world, ", but ",
               ranks[0].path, " has ", ranks[0].world, ": traces of one job only");
    if (i > 0 && ranks[i].rank == ranks[i - 1].rank)
      SL_THROW(InvalidArgument, ranks[i].path, " and ", ranks[i - 1].path, " are both rank ",
               ranks[i].rank);
    if (ranks[i].gpu != ranks[0].gpu)
      SL_THROW(InvalidArgument, ranks[i].path, " is a ", ranks[i].gpu ? "GPU" : "CPU",
               " trace, but ", ranks[0].path, " is a ", ranks[0].gpu ? "GPU" : "CPU",
               " trace: traces of one job only");
  }
  if (static_cast<int64_t>(ranks.size()) > kMaxRunRanks)
    SL_THROW(InvalidArgument, "import: ", ranks.size(), " traces; a run directory holds at most ",
             kMaxRunRanks, " ranks (import a subset)");
  // A subset of the job: row k holds the job's rank ranks[k].rank.
  const bool subset = static_cast<int>(ranks.size()) != ranks[0].world;
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
  int64_t rs_as_ar = 0, unmatched = 0, unknown = 0;
  json sources = json::array(), memory = json::array();
  for (size_t row = 0; row < ranks.size(); ++row) {
    const TorchRank& r = ranks[row];
    const int k = static_cast<int>(row);
    auto remap = [&](int u) {
      if (u < 0) return -1;
      return static_cast<int>(
          std::find(units.begin(), units.end(), r.units[static_cast<size_t>(u)]) - units.begin());
    };
    std::vector<std::pair<int64_t, std::string>> lines;
    for (SpanEvent s : r.spans) {
      s.t_issue -= t0, s.t_start -= t0, s.t_end -= t0;
      s.unit = remap(s.unit);
      lines.emplace_back(s.t_end, span_line(k, s));
    }
    for (StepEvent s : r.steps) {
      s.t -= t0;
      lines.emplace_back(s.t, step_line(k, s));
    }
    for (const MemEvent& m : r.mem)
      lines.emplace_back(m.t - t0, json({{"t", m.t - t0},
                                         {"rank", k},
                                         {"kind", "mem"},
                                         {"category", mem_category_name(m.category)},
                                         {"bytes", m.bytes},
                                         {"cat_total", m.cat_total},
                                         {"total", m.total}})
                                       .dump());
    for (const UnitEvent& u : r.unit_events)
      lines.emplace_back(u.t - t0, json({{"t", u.t - t0},
                                         {"rank", k},
                                         {"kind", "unit"},
                                         {"unit", remap(u.unit)},
                                         {"state", unit_state_name(u.state)}})
                                       .dump());
    std::stable_sort(lines.begin(), lines.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string text;
    for (const auto& [t, l] : lines) text += l + "\n";
    write_file_atomic(join_path(out_dir, "rank" + std::to_string(k) + ".jsonl"), text, "import");
    written.push_back(r.rank);
    rs_as_ar += r.reduce_scatters_as_all_reduce;
    unmatched += r.unmatched_comm;
    unknown += r.comm_size_unknown;
    sources.push_back({{"row", k}, {"rank", r.rank}, {"trace", r.path}});
    if (r.mem_events > 0) {
      json blocks = json::object();
      for (int c = 0; c < kNumMemCategories; ++c)
        if (r.mem_blocks[c] > 0)
          blocks[mem_category_name(static_cast<MemCategory>(c))] = r.mem_blocks[c];
      memory.push_back({{"row", k},
                        {"device", r.mem_device},
                        {"events", r.mem_events},
                        {"baseline_bytes", r.mem_baseline},
                        {"total_mismatches", r.mem_mismatches},
                        {"blocks_by_category", blocks}});
    }
  }
  const bool gpu = ranks[0].gpu;
  json unit_list = json::array();
  for (const std::string& u : units)
    unit_list.push_back({{"name", u.empty() ? "root" : u}, {"numel", nullptr}, {"stages", {}}});
  json meta = {
      {"version", SHARDLAB_VERSION},
      {"strategy", fsdp2 ? "FSDP2 (PyTorch)" : "PyTorch (no FSDP2 labels: DDP or FSDP1)"},
      {"world_size", static_cast<int>(ranks.size())},
      {"backend", ranks[0].backend},
      {"device", gpu ? "cuda" : "cpu"},
      {"units", unit_list},
      {"config", {{"wrap", fsdp2 ? "fully_shard modules" : "?"}}},
      {"imported",
       {{"from", "torch.profiler"},
        {"sources", sources},
        {"ranks", written},
        {"job_world_size", ranks[0].world},
        {"subset", subset},
        {"clock",
         "host clock per rank (baseTimeNanoseconds + ts), shifted to the earliest rank's first "
         "ProfilerStep; across hosts the clocks' offsets are in the waits"},
        {"units", fsdp2 ? "inferred from FSDP2's record_function labels" : "none"},
        {"compute", gpu ? "the GPU kernels other than NCCL's, memcpy and memset"
                        : "the main thread's outermost operators, merged within 50 us"},
        {"comm", gpu ? "the NCCL kernels; op and size from their arguments or the c10d call "
                       "that launched them"
                     : "the gloo spans, each with the c10d call that issued it"},
        {"reduce_scatter_as_all_reduce", rs_as_ar},
        {"comm_without_issuing_call", unmatched},
        {"comm_size_unknown", unknown},
        {"memory",
         memory.empty()
             ? json("none: the traces have no [memory] events (profile with profile_memory=True)")
             : json({{"categories",
                      "inferred from when each block was allocated and freed (docs/import.md); "
                      "unattributed: what the rules cannot place, and what was held before the "
                      "first event (baseline_bytes)"},
                     {"bytes", "measured: the profiler's allocations and frees"},
                     {"ranks", memory}})},
        {"not_imported", "losses, tokens"}}}};
  if (gpu && !ranks[0].device_name.empty()) meta["imported"]["gpu"] = ranks[0].device_name;
  write_file_atomic(join_path(out_dir, "meta.json"), meta.dump(2) + "\n", "import");
  // A finished run: its summary, as shardlab train leaves one.
  write_file_atomic(join_path(out_dir, "summary.json"),
                    summary_to_json(compute_summary(read_run(out_dir))).dump(2) + "\n", "import");
  return written;
}

}  // namespace shardlab
