// safetensors: the project's writer against a hand-computed byte layout, a file assembled by hand
// the way another tool writes it (prefixed keys, __metadata__, unordered keys, BF16, extra
// buffers) read by the project, checkpoint export -> import round trips, clear errors for a missing
// or mis-shaped tensor, and independent Python readers of the exported file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "apps/shardlab/checkpoint_commands.hpp"
#include "core/base/dtype.hpp"
#include "core/checkpoint/hf_safetensors.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "tests/checkpoint_fixture.hpp"

using namespace shardlab;
using namespace shardlab::ckpt_test;

namespace {

std::string le64(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

std::string f32_bytes(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) s.append(reinterpret_cast<const char*>(&v), 4);
  return s;
}

void expect_has(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nwanted: " << part;
}

// Runs a shell command, returns its stdout and exit code.
std::pair<std::string, int> run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {"", -1};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  return {out, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1};
}

// The export of a 4-rank checkpoint of `full`, as f32 or bf16.
std::string exported(const FullState& full, const std::string& name, const std::string& dtype) {
  std::string root = scratch_dir(name);
  std::string dir = save_as(full, root, 12, 4);
  std::string out = root + "/model.safetensors";
  std::ostringstream o, e;
  EXPECT_EQ(export_command(dir, out, dtype, o, e), 0) << e.str();
  return out;
}

}  // namespace

TEST(CheckpointSafetensors, WriterMatchesHandComputedBytes) {
  std::string dir = scratch_dir("st_bytes");
  const float a[2] = {1.0f, -2.0f};
  const float b[3] = {0.5f, 0.25f, -0.0f};
  {
    SafetensorsWriter w(dir + "/f32.safetensors", {{"a", {2}}, {"b.weight", {1, 3}}}, DType::f32,
                        {{"format", "pt"}});
    w.write_next(a);
    w.write_next(b);
    w.finish();
  }
  // 148 bytes of JSON + 4 spaces: the data section starts at 8 + 152, 8-byte aligned.
  std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b.weight\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[8,20]}}    ";
  ASSERT_EQ(header.size(), 152u);
  std::string want = std::string("\x98\0\0\0\0\0\0\0", 8) + header +
                     std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8) +  // 1.0, -2.0
                     std::string("\x00\x00\x00\x3f\x00\x00\x80\x3e\x00\x00\x00\x80", 12);
  EXPECT_EQ(read_text_file(dir + "/f32.safetensors"), want);

  {
    SafetensorsWriter w(dir + "/bf16.safetensors", {{"a", {2}}, {"b.weight", {1, 3}}}, DType::bf16,
                        {{"format", "pt"}});
    w.write_next(a);
    w.write_next(b);
    w.finish();
  }
  // 150 bytes + 2 spaces; bf16 1.0 = 0x3f80, -2.0 = 0xc000, 0.5 = 0x3f00, 0.25 = 0x3e80, -0 =
  // 0x8000.
  std::string header16 =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
      "\"b.weight\":{\"dtype\":\"BF16\",\"shape\":[1,3],\"data_offsets\":[4,10]}}  ";
  ASSERT_EQ(header16.size(), 152u);
  std::string want16 = std::string("\x98\0\0\0\0\0\0\0", 8) + header16 +
                       std::string("\x80\x3f\x00\xc0\x00\x3f\x80\x3e\x00\x80", 10);
  EXPECT_EQ(read_text_file(dir + "/bf16.safetensors"), want16);

  // And the project reads both back.
  for (const char* f : {"/f32.safetensors", "/bf16.safetensors"}) {
    SafetensorsFile st(dir + f);
    EXPECT_EQ(st.header_bytes(), 152);
    EXPECT_EQ(st.metadata().at("format"), "pt");
    ASSERT_EQ(st.entries().size(), 2u);
    float out[3];
    st.read_f32(*st.find("b.weight"), 0, 3, out);
    EXPECT_EQ(out[0], 0.5f);
    EXPECT_EQ(out[1], 0.25f);
    EXPECT_TRUE(std::signbit(out[2]) && out[2] == 0.0f);
    st.read_f32(*st.find("a"), 1, 1, out);
    EXPECT_EQ(out[0], -2.0f);
  }
}

TEST(CheckpointSafetensors, ReadsAFileWrittenByAnotherTool) {
  // A GPT-2 with V 8, T 4, L 1, C 4, written as GPT2LMHeadModel.save_pretrained would: keys
  // prefixed "transformer.", lm_head.weight and the causal-mask buffer present, keys in no
  // particular order, data in yet another order, wpe stored as BF16.
  GPTConfig cfg;
  cfg.vocab_size = 8;
  cfg.max_seq_len = 4;
  cfg.n_layer = 1;
  cfg.n_head = 1;
  cfg.n_embd = 4;
  struct T {
    std::string key;
    std::string shape;
    int64_t numel;
    bool bf16;
  };
  // Data order (how the bytes are laid out).
  std::vector<T> data_order = {
      {"transformer.h.0.mlp.c_proj.weight", "[16,4]", 64, false},
      {"transformer.wte.weight", "[8,4]", 32, false},
      {"transformer.h.0.attn.bias", "[1,1,4,4]", 16, false},
      {"transformer.h.0.ln_1.bias", "[4]", 4, false},
      {"transformer.h.0.attn.c_attn.weight", "[4,12]", 48, false},
      {"transformer.wpe.weight", "[4,4]", 16, true},
      {"lm_head.weight", "[8,4]", 32, false},
      {"transformer.h.0.attn.c_attn.bias", "[12]", 12, false},
      {"transformer.ln_f.weight", "[4]", 4, false},
      {"transformer.h.0.ln_1.weight", "[4]", 4, false},
      {"transformer.h.0.attn.c_proj.weight", "[4,4]", 16, false},
      {"transformer.h.0.attn.c_proj.bias", "[4]", 4, false},
      {"transformer.h.0.ln_2.weight", "[4]", 4, false},
      {"transformer.h.0.ln_2.bias", "[4]", 4, false},
      {"transformer.h.0.mlp.c_fc.weight", "[4,16]", 64, false},
      {"transformer.h.0.mlp.c_fc.bias", "[16]", 16, false},
      {"transformer.h.0.mlp.c_proj.bias", "[4]", 4, false},
      {"transformer.ln_f.bias", "[4]", 4, false},
  };
  // Element i of the tensor at data position k: k + i / 64 (exact in f32; BF16 rounds it).
  auto value = [](size_t k, int64_t i) {
    return static_cast<float>(k) + static_cast<float>(i) / 64.0f;
  };
  std::string data;
  std::vector<std::string> fields(data_order.size());
  for (size_t k = 0; k < data_order.size(); ++k) {
    const T& t = data_order[k];
    size_t begin = data.size();
    for (int64_t i = 0; i < t.numel; ++i) {
      float v = value(k, i);
      if (t.bf16) {
        uint16_t h = f32_to_bf16_bits(v);
        data += static_cast<char>(h & 0xff);
        data += static_cast<char>(h >> 8);
      } else {
        data += f32_bytes({v});
      }
    }
    fields[k] = "\"" + t.key + "\": {\"dtype\": \"" + (t.bf16 ? "BF16" : "F32") +
                "\", \"shape\": " + t.shape + ", \"data_offsets\": [" + std::to_string(begin) +
                ", " + std::to_string(data.size()) + "]}";
  }
  // Header order: reversed data order with __metadata__ in the middle, spaces after separators.
  std::string header = "{";
  for (size_t k = fields.size(); k-- > 0;) {
    header += fields[k] + ", ";
    if (k == fields.size() / 2)
      header += "\"__metadata__\": {\"format\": \"pt\", \"tool\": \"hand\"}, ";
  }
  header.resize(header.size() - 2);
  header += "}";
  while (header.size() % 8) header += ' ';
  std::string dir = scratch_dir("st_foreign");
  std::string path = dir + "/foreign.safetensors";
  {
    FileHandle f = FileHandle::create(path);
    std::string all = le64(header.size()) + header + data;
    f.write_all(all.data(), static_cast<int64_t>(all.size()));
  }

  SafetensorsFile st(path);
  EXPECT_EQ(st.metadata().at("tool"), "hand");
  EXPECT_EQ(st.entries().size(), data_order.size());

  // Load into 3 ranks' shards (padding to a multiple of 3) and check every element.
  FullState shapes = make_full_state(cfg, 0);
  for (int r = 0; r < 3; ++r) {
    RankHolding h = make_holding(shapes, r, 3, false, false);
    EXPECT_EQ(load_safetensors_into(path, h.shards), 4 + 12);
    for (const CkptShard& u : h.shards) {
      const float* p = u.states.at(kStateParams);
      for (const CkptTensor& t : u.tensors) {
        size_t k = 0;
        while (data_order[k].key != "transformer." + t.name) ++k;
        for (int64_t i = std::max(t.offset, u.begin); i < std::min(t.offset + t.numel, u.end);
             ++i) {
          float want = value(k, i - t.offset);
          if (data_order[k].bf16) want = round_to(DType::bf16, want);
          ASSERT_EQ(p[i - u.begin], want) << t.name << " element " << i - t.offset;
        }
      }
      for (int64_t i = std::max(u.begin, shapes.layouts[u.unit].numel); i < u.end; ++i)
        EXPECT_EQ(p[i - u.begin], 0.0f) << "padding of unit " << u.unit;
    }
  }
}

TEST(CheckpointSafetensors, ExportImportRoundTripF32AndBf16) {
  FullState full = make_full_state(tiny_config(), 31);
  std::string f32 = exported(full, "st_export_f32", "f32");
  SafetensorsFile st(f32);
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.metadata().at("shardlab.step"), "12");
  EXPECT_EQ(nlohmann::json::parse(st.metadata().at("shardlab.model_config")),
            gpt_config_json(tiny_config()));
  ASSERT_EQ(st.entries().size(), 4u + 2 * 12);
  EXPECT_EQ(st.entries()[0].name, "wte.weight");  // unit order, no prefix
  EXPECT_EQ(st.find("h.1.mlp.c_fc.weight")->shape, (std::vector<int64_t>{12, 48}));
  EXPECT_EQ((8 + st.header_bytes()) % 8, 0);

  // Import on 3 ranks: params bit-identical to what was saved.
  for (int r = 0; r < 3; ++r) {
    RankHolding h = make_holding(full, r, 3, false, false);
    for (auto& u : h.shards) {
      u.states.erase(kStateExpAvg);
      u.states.erase(kStateExpAvgSq);
    }
    load_safetensors_into(f32, h.shards);
    expect_holding_matches(full, h, "f32 import rank " + std::to_string(r));
  }

  // bf16: every value is the f32 one rounded to nearest even.
  std::string bf16 = exported(full, "st_export_bf16", "bf16");
  EXPECT_EQ(SafetensorsFile(bf16).entries()[0].dtype, "BF16");
  FullState rounded = full;
  for (auto& unit : rounded.data[kStateParams])
    for (auto& v : unit) v = round_to(DType::bf16, v);
  RankHolding h = make_holding(full, 0, 1, false, false);
  for (auto& u : h.shards) {
    u.states.erase(kStateExpAvg);
    u.states.erase(kStateExpAvgSq);
  }
  load_safetensors_into(bf16, h.shards);
  expect_holding_matches(rounded, h, "bf16 import");
}

TEST(CheckpointSafetensors, MissingMisShapedAndUnusedTensorsAreNamed) {
  FullState full = make_full_state(tiny_config(), 32);
  std::string path = exported(full, "st_errors", "f32");
  auto import_error = [&](const GPTConfig& cfg, bool allow_unused) -> std::string {
    RankHolding h = make_holding(make_full_state(cfg, 0), 0, 1, false, false);
    SafetensorsImportOptions opt;
    opt.allow_unused = allow_unused;
    try {
      load_safetensors_into(path, h.shards, opt);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  GPTConfig deeper = tiny_config();
  deeper.n_layer = 3;
  expect_has(import_error(deeper, false),
             "model.safetensors: tensor h.2.ln_1.weight [12] (unit 3) is missing (looked for "
             "\"h.2.ln_1.weight\" and \"transformer.h.2.ln_1.weight\" among 28 tensors)");
  GPTConfig wider = tiny_config();
  wider.n_embd = 16;
  expect_has(import_error(wider, false),
             "model.safetensors: tensor wte.weight has shape [32, 12], the model expects [32, 16]");
  GPTConfig shallower = tiny_config();
  shallower.n_layer = 1;
  expect_has(import_error(shallower, false),
             "model.safetensors: tensor h.1.ln_1.weight [12] matches no tensor of the model");
  EXPECT_EQ(import_error(shallower, true), "");

  // A damaged file: header length past the end.
  std::string bytes = read_text_file(path);
  std::string bad = scratch_dir("st_bad") + "/bad.safetensors";
  {
    FileHandle f = FileHandle::create(bad);
    std::string damaged = le64(bytes.size()) + bytes.substr(8);
    f.write_all(damaged.data(), static_cast<int64_t>(damaged.size()));
  }
  try {
    SafetensorsFile st(bad);
    FAIL() << "no throw";
  } catch (const IoError& e) {
    expect_has(e.what(), "bad.safetensors: header length");
  }
  // Truncated data: the last tensor's offsets run past the end.
  {
    FileHandle f = FileHandle::create(bad);
    f.write_all(bytes.data(), static_cast<int64_t>(bytes.size()) - 4);
  }
  try {
    SafetensorsFile st(bad);
    FAIL() << "no throw";
  } catch (const IoError& e) {
    expect_has(e.what(), "outside the data section");
  }
}

namespace {

// A Python reader that knows only the format (struct + json): name, dtype, shape, and the sum of
// the values in file order, printed as exact hex floats.
const char* kStdlibReader = R"PY(
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
assert n % 8 == 0, "header not padded"
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
for name, e in header.items():
    if name == "__metadata__":
        continue
    b, end = e["data_offsets"]
    vals = struct.unpack("<%df" % ((end - b) // 4), data[b:end])
    s = 0.0
    for v in vals:
        s += v
    print(name, e["dtype"], "x".join(str(d) for d in e["shape"]), s.hex())
)PY";

// The same through the safetensors package (numpy backend).
const char* kPackageReader = R"PY(
import sys
from safetensors.numpy import load_file
for name, a in load_file(sys.argv[1]).items():
    s = 0.0
    for v in a.reshape(-1).tolist():
        s += v
    print(name, "F32", "x".join(str(d) for d in a.shape), s.hex())
)PY";

// What those readers must print for `full`'s params: one line per tensor, sorted.
std::vector<std::string> expected_lines(const FullState& full) {
  std::vector<std::string> lines;
  for (size_t u = 0; u < full.layouts.size(); ++u)
    for (const auto& e : full.layouts[u].entries) {
      double s = 0.0;
      for (int64_t i = 0; i < e.numel; ++i) s += full.data.at(kStateParams)[u][e.offset + i];
      std::string shape;
      for (size_t d = 0; d < e.shape.size(); ++d)
        shape += (d ? "x" : "") + std::to_string(e.shape[d]);
      char hex[64];
      std::snprintf(hex, sizeof hex, "%a", s);
      lines.push_back(e.name + " F32 " + shape + " " + hex);
    }
  std::sort(lines.begin(), lines.end());
  return lines;
}

std::vector<std::string> sorted_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream is(text);
  for (std::string l; std::getline(is, l);)
    if (!l.empty()) lines.push_back(l);
  std::sort(lines.begin(), lines.end());
  return lines;
}

// Python's float.hex() and C's %a spell the same double differently; compare values instead.
void expect_same_sums(const std::vector<std::string>& got, const std::vector<std::string>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    std::string g = got[i].substr(0, got[i].rfind(' ')), w = want[i].substr(0, want[i].rfind(' '));
    EXPECT_EQ(g, w);
    double gs = std::strtod(got[i].substr(got[i].rfind(' ') + 1).c_str(), nullptr);
    double ws = std::strtod(want[i].substr(want[i].rfind(' ') + 1).c_str(), nullptr);
    EXPECT_EQ(gs, ws) << got[i] << " vs " << want[i];
  }
}

}  // namespace

// The interpreter for the Python checks: $SHARDLAB_PYTHON, else the system /usr/bin/python3.
std::string python() {
  const char* p = std::getenv("SHARDLAB_PYTHON");
  return p && *p ? p : "/usr/bin/python3";
}

TEST(CheckpointSafetensors, PythonStdlibReaderAgrees) {
  if (!path_exists(python())) GTEST_SKIP() << python() << " not present";
  FullState full = make_full_state(tiny_config(), 33);
  std::string path = exported(full, "st_python", "f32");
  std::string script = parent_dir(path) + "/reader.py";
  write_file_atomic(script, kStdlibReader);
  auto [out, rc] = run(python() + " " + script + " " + path);
  ASSERT_EQ(rc, 0) << out;
  expect_same_sums(sorted_lines(out), expected_lines(full));
}

TEST(CheckpointSafetensors, PythonSafetensorsPackageReadsTheExport) {
  if (!path_exists(python()) ||
      run(python() + " -c 'import safetensors.numpy' 2>/dev/null").second != 0)
    GTEST_SKIP() << "the Python safetensors package is not installed for " << python()
                 << " (set SHARDLAB_PYTHON to an interpreter that has it)";
  FullState full = make_full_state(tiny_config(), 34);
  std::string path = exported(full, "st_package", "f32");
  std::string script = parent_dir(path) + "/reader.py";
  write_file_atomic(script, kPackageReader);
  auto [out, rc] = run(python() + " " + script + " " + path);
  ASSERT_EQ(rc, 0) << out;
  expect_same_sums(sorted_lines(out), expected_lines(full));
}

// A NaN or Inf parameter is refused at import, naming the file, the tensor and the element: it
// would otherwise make every loss non-finite from the first step (`shardlab train --init-from`).
TEST(CheckpointSafetensors, NonFiniteTensorIsRefusedNamingTensorAndElement) {
  FullState full = make_full_state(tiny_config(), 33);
  const UnitLayout block0 = unit_layout(tiny_config(), 1);
  const ParamEntry& ln = block0.find("h.0.ln_1.weight");
  full.data[kStateParams][1][ln.offset + 3] = std::numeric_limits<float>::quiet_NaN();
  const std::string path = exported(full, "st_nan", "f32");
  // Rank 0 of 1 reads it all; of 3 ranks only the one whose range holds the element refuses it.
  int refused = 0;
  for (int world : {1, 3})
    for (int r = 0; r < world; ++r) {
      RankHolding h = make_holding(full, r, world, false, false);
      for (auto& u : h.shards) {
        u.states.erase(kStateExpAvg);
        u.states.erase(kStateExpAvgSq);
      }
      try {
        load_safetensors_into(path, h.shards);
      } catch (const InvalidArgument& e) {
        ++refused;
        expect_has(e.what(), "model.safetensors: tensor h.0.ln_1.weight holds nan at element 3 of");
      }
    }
  EXPECT_EQ(refused, 2);
}

// A save_pretrained directory with its tensors in two shards and model.safetensors.index.json
// ("model."-prefixed names, as LlamaForCausalLM writes them) loads as one file would; a directory
// with model.safetensors alone too; a broken index is refused naming the index and the entry.
TEST(CheckpointSafetensors, ShardedSaveWithIndexLoads) {
  const GPTConfig cfg = tiny_config();
  const FullState full = make_full_state(cfg, 5);
  const std::string dir = scratch_dir("st_sharded");
  // Units 0 and 1 in the first shard, the rest in the second.
  nlohmann::json map = nlohmann::json::object();
  for (int part = 0; part < 2; ++part) {
    const std::string file = "model-0000" + std::to_string(part + 1) + "-of-00002.safetensors";
    std::vector<SafetensorsWriter::Decl> decls;
    std::vector<const float*> data;
    for (size_t u = 0; u < full.layouts.size(); ++u) {
      if ((u < 2) != (part == 0)) continue;
      for (const ParamEntry& e : full.layouts[u].entries) {
        decls.push_back({"model." + e.name, e.shape});
        data.push_back(full.data.at(kStateParams)[u].data() + e.offset);
        map["model." + e.name] = file;
      }
    }
    SafetensorsWriter w(dir + "/" + file, decls, DType::f32);
    for (const float* d : data) w.write_next(d);
    w.finish();
  }
  write_file_atomic(dir + "/model.safetensors.index.json",
                    nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump());
  for (int r = 0; r < 2; ++r) {
    RankHolding h = make_holding(full, r, 2, false, false);
    EXPECT_EQ(load_safetensors_into(dir, h.shards), 4 + 2 * 12);
    for (const CkptShard& u : h.shards) {
      const std::vector<float>& want = full.data.at(kStateParams)[static_cast<size_t>(u.unit)];
      const float* got = u.states.at(kStateParams);
      for (int64_t i = u.begin; i < std::min<int64_t>(u.end, static_cast<int64_t>(want.size()));
           ++i)
        ASSERT_EQ(got[i - u.begin], want[static_cast<size_t>(i)])
            << "unit " << u.unit << " at " << i;
    }
  }
  // The index names a file that does not hold the tensor.
  map["model.wte.weight"] = "model-00002-of-00002.safetensors";
  write_file_atomic(dir + "/model.safetensors.index.json",
                    nlohmann::json{{"weight_map", map}}.dump());
  RankHolding h = make_holding(full, 0, 1, false, false);
  try {
    load_safetensors_into(dir, h.shards);
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    expect_has(e.what(),
               "model.safetensors.index.json: weight_map['model.wte.weight'] = "
               "\"model-00002-of-00002.safetensors\", which does not hold it");
  }
  // No index and no model.safetensors.
  const std::string empty = scratch_dir("st_sharded_empty");
  try {
    load_safetensors_into(empty, h.shards);
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    expect_has(e.what(), "holds neither model.safetensors nor model.safetensors.index.json");
  }
}
