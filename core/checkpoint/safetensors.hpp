// The safetensors format, read and written by the project (no dependency):
//   8 bytes   N, the header length, unsigned little-endian
//   N bytes   a JSON object: {"__metadata__": {str: str}, "<name>": {"dtype": "F32"|"BF16"|...,
//             "shape": [...], "data_offsets": [begin, end]}, ...}, padded with spaces so that N
//             is a multiple of 8
//   the rest  the tensors' bytes, little-endian, row-major; data_offsets are relative to here
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/base/dtype.hpp"
#include "core/base/file_io.hpp"

namespace shardlab {

// One tensor of a safetensors header.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as written: "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte range in the data section
  int64_t numel() const;
};

// "F32" / "BF16" / "F16" for the project's dtypes.
const char* safetensors_dtype(DType t);

// A parsed header: the tensors (sorted by data offset, checked not to overlap and to lie inside a
// data section of `data_bytes`) and the metadata.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
};
// Parses and validates header `text` (the N bytes after the length); IoError naming `path` and
// the tensor or field on any problem. What SafetensorsFile runs on every file it opens.
SafetensorsHeader parse_safetensors_header(const std::string& text, int64_t data_bytes,
                                           const std::string& path);

// Reads a file's header on construction (validating sizes, offsets and dtypes against the file)
// and tensor data on demand.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // by data offset
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsEntry* find(const std::string& name) const;
  int64_t header_bytes() const { return header_bytes_; }
  // Elements [begin, begin + count) of a floating-point tensor, converted to f32.
  void read_f32(const SafetensorsEntry& e, int64_t begin, int64_t count, float* out) const;

 private:
  std::string path_;
  FileHandle file_;
  int64_t header_bytes_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors one after another in the order declared, converting f32 data to `dtype`. The
// file appears at `path` only after finish() (written as path.tmp-<pid>, fsynced, renamed).
class SafetensorsWriter {
 public:
  struct Decl {
    std::string name;
    std::vector<int64_t> shape;
  };
  SafetensorsWriter(const std::string& path, const std::vector<Decl>& tensors, DType dtype,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  // The next declared tensor's data: numel f32 values.
  void write_next(const float* data);
  void finish();

 private:
  std::string path_;
  std::vector<Decl> decls_;
  DType dtype_;
  size_t next_ = 0;
  AtomicFile file_;  // checks the destination, writes beside it, renames on finish()
};

}  // namespace shardlab
