// safetensors reader and streaming writer.
#include "core/checkpoint/safetensors.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"
#include "core/base/json_get.hpp"
#include "core/checkpoint/index.hpp"

namespace shardlab {

using json = nlohmann::json;

namespace {

// A header larger than this is not a model file but damage (the reference reader uses 100 MB).
constexpr int64_t kMaxHeaderBytes = 100 * 1000 * 1000;

int64_t dtype_bytes(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

uint64_t read_le64(const unsigned char* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

}  // namespace

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    default: return "F16";
  }
}

// ---- reader

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path), file_(FileHandle::open_read(path)) {
  int64_t size = file_.size();
  if (size < 8) SL_THROW(IoError, path, ": ", size, " bytes, too short for a safetensors header");
  unsigned char len_bytes[8];
  file_.read_at(len_bytes, 8, 0);
  uint64_t n = read_le64(len_bytes);
  if (n > static_cast<uint64_t>(kMaxHeaderBytes) || static_cast<int64_t>(n) > size - 8)
    SL_THROW(IoError, path, ": header length ", n, " does not fit the file of ", size, " bytes");
  header_bytes_ = static_cast<int64_t>(n);
  std::string text(static_cast<size_t>(n), '\0');
  file_.read_at(text.data(), header_bytes_, 8);
  SafetensorsHeader h = parse_safetensors_header(text, size - 8 - header_bytes_, path);
  entries_ = std::move(h.entries);
  metadata_ = std::move(h.metadata);
}

SafetensorsHeader parse_safetensors_header(const std::string& text, int64_t data_bytes,
                                           const std::string& path) {
  SafetensorsHeader out;
  // Duplicate keys would let one tensor name point at two ranges (nlohmann keeps the last).
  json h = parse_json_strict(text, path + ": header");
  if (!h.is_object()) SL_THROW(IoError, path, ": header is not a JSON object");
  for (auto& [key, v] : h.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) SL_THROW(IoError, path, ": __metadata__ is not an object");
      for (auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) SL_THROW(IoError, path, ": __metadata__.", mk, " is not a string");
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    SafetensorsEntry e;
    e.name = key;
    const std::string where = path + ": tensor " + key;
    // Strict integers: 1.5 or 1e30 in a shape or an offset is damage, not a value to truncate.
    e.dtype = json_string(v, "dtype", where);
    const json* off = v.is_object() && v.contains("data_offsets") ? &v.at("data_offsets") : nullptr;
    if (!off || !off->is_array() || off->size() != 2)
      SL_THROW(IoError, where, ": data_offsets needs 2 numbers");
    const int64_t kMax = std::numeric_limits<int64_t>::max();
    e.begin = json_int(json{{"data_offsets[0]", (*off)[0]}}, "data_offsets[0]", where, 0, kMax);
    e.end = json_int(json{{"data_offsets[1]", (*off)[1]}}, "data_offsets[1]", where, 0, kMax);
    if (!v.contains("shape") || !v.at("shape").is_array())
      SL_THROW(IoError, where, ": field 'shape' must be an array");
    const json& shape = v.at("shape");
    for (size_t i = 0; i < shape.size(); ++i) {
      const std::string field = "shape[" + std::to_string(i) + "]";
      e.shape.push_back(json_int(json{{field, shape[i]}}, field.c_str(), where, 0, kMax));
    }
    int64_t item = dtype_bytes(e.dtype);
    if (item == 0) SL_THROW(IoError, path, ": tensor ", key, ": unknown dtype ", e.dtype);
    if (e.end < e.begin || e.end > data_bytes)
      SL_THROW(IoError, path, ": tensor ", key, ": data_offsets [", e.begin, ", ", e.end,
               "] outside the data section of ", data_bytes, " bytes (truncated?)");
    // The byte size of the shape, without overflow: a product past the data section is damage.
    int64_t bytes = item;
    for (int64_t d : e.shape)
      if (__builtin_mul_overflow(bytes, d, &bytes))
        SL_THROW(IoError, path, ": tensor ", key, ": shape ", format_shape(e.shape),
                 " is larger than 2^63 bytes");
    if (e.end - e.begin != bytes)
      SL_THROW(IoError, path, ": tensor ", key, ": ", e.end - e.begin, " bytes for shape ",
               format_shape(e.shape), " of ", e.dtype, " (", bytes, " expected)");
    out.entries.push_back(std::move(e));
  }
  std::sort(out.entries.begin(), out.entries.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < out.entries.size(); ++i)
    if (out.entries[i].begin < out.entries[i - 1].end)
      SL_THROW(IoError, path, ": tensors ", out.entries[i - 1].name, " and ", out.entries[i].name,
               " overlap");
  return out;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

void SafetensorsFile::read_f32(const SafetensorsEntry& e, int64_t begin, int64_t count,
                               float* out) const {
  SL_CHECK(begin >= 0 && count >= 0 && begin <= e.numel() && count <= e.numel() - begin, path_,
           ": tensor ", e.name, ": elements [", begin, ", +", count, ") outside its ", e.numel());
  DType t;
  if (e.dtype == "F32")
    t = DType::f32;
  else if (e.dtype == "BF16")
    t = DType::bf16;
  else if (e.dtype == "F16")
    t = DType::f16;
  else
    SL_THROW(InvalidArgument, path_, ": tensor ", e.name, " is ", e.dtype,
             "; only F32, BF16 and F16 load into parameters");
  int64_t item = static_cast<int64_t>(dtype_size(t));
  int64_t pos = 8 + header_bytes_ + e.begin + begin * item;
  if (t == DType::f32) {
    file_.read_at(out, count * 4, pos);
    return;
  }
  std::vector<uint16_t> raw(static_cast<size_t>(count));
  file_.read_at(raw.data(), count * 2, pos);
  for (int64_t i = 0; i < count; ++i) out[i] = load_as_f32(raw.data(), static_cast<size_t>(i), t);
}

// ---- writer

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<Decl>& tensors,
                                     DType dtype,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), decls_(tensors), dtype_(dtype), file_(path, "safetensors output") {
  nlohmann::ordered_json h;
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  int64_t offset = 0;
  int64_t item = static_cast<int64_t>(dtype_size(dtype));
  for (const auto& d : decls_) {
    SL_CHECK(d.name != "__metadata__" && !h.contains(d.name), path, ": tensor name ", d.name,
             " is reserved or repeated");
    int64_t n = 1;
    for (int64_t s : d.shape) n *= s;
    nlohmann::ordered_json e;
    e["dtype"] = safetensors_dtype(dtype);
    e["shape"] = d.shape;
    e["data_offsets"] = {offset, offset + n * item};
    h[d.name] = e;
    offset += n * item;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  unsigned char len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<unsigned char>((uint64_t(text.size()) >> (8 * i)) & 0xffu);
  file_.write_all(len, 8);
  file_.write_all(text.data(), static_cast<int64_t>(text.size()));
}

SafetensorsWriter::~SafetensorsWriter() = default;  // unfinished: AtomicFile removes its temp

void SafetensorsWriter::write_next(const float* data) {
  SL_CHECK(next_ < decls_.size(), path_, ": more tensors written than declared (", decls_.size(),
           ")");
  const Decl& d = decls_[next_++];
  int64_t n = 1;
  for (int64_t s : d.shape) n *= s;
  if (dtype_ == DType::f32) {
    file_.write_all(data, n * 4);
    return;
  }
  std::vector<uint16_t> raw(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    store_from_f32(raw.data(), static_cast<size_t>(i), dtype_, data[i]);
  file_.write_all(raw.data(), n * 2);
}

void SafetensorsWriter::finish() {
  SL_CHECK(next_ == decls_.size(), path_, ": ", next_, " of ", decls_.size(), " tensors written");
  file_.commit();
}

}  // namespace shardlab
