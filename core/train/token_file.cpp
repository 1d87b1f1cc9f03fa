// Reading and writing llm.c token shards, and reading raw files, with errors that name the file.
#include "core/train/token_file.hpp"

#include <cstring>

#include "core/base/error.hpp"
#include "core/base/file_io.hpp"

namespace shardlab {

namespace {

// A regular file opened for reading: a directory or a FIFO is refused, never blocked on.
FileHandle open_for_read(const std::string& path) { return FileHandle::open_read(path); }

}  // namespace

std::vector<uint16_t> read_token_file(const std::string& path) {
  const FileHandle in = open_for_read(path);
  const int64_t size = in.size();
  if (size < kTokenFileHeaderBytes)
    SL_THROW(IoError, "token file '", path, "': ", size, " bytes, shorter than the ",
             kTokenFileHeaderBytes, "-byte header of an llm.c .bin shard");
  int32_t header[kTokenFileHeaderInts];
  in.read_at(header, kTokenFileHeaderBytes, 0);
  if (header[0] != kTokenFileMagic)
    SL_THROW(IoError, "token file '", path, "': bad magic ", header[0], " (expected ",
             kTokenFileMagic, ", an llm.c .bin token shard)");
  if (header[1] != kTokenFileVersion)
    SL_THROW(IoError, "token file '", path, "': unsupported version ", header[1], " (expected ",
             kTokenFileVersion, ": uint16 tokens)");
  const int64_t count = header[2];
  if (count < 0) SL_THROW(IoError, "token file '", path, "': negative token count ", count);
  const int64_t expected = kTokenFileHeaderBytes + 2 * count;
  if (size < expected)
    SL_THROW(IoError, "token file '", path, "': truncated: header says ", count,
             " tokens, expected ", expected, " bytes, file has ", size);
  if (size > expected)
    SL_THROW(IoError, "token file '", path, "': header says ", count, " tokens, expected ",
             expected, " bytes, file has ", size, " (trailing data)");
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  in.read_at(tokens.data(), 2 * count, kTokenFileHeaderBytes);
  return tokens;
}

void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    SL_THROW(IoError, "token file '", path, "': ", tokens.size(),
             " tokens do not fit the int32 count of the header");
  int32_t header[kTokenFileHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::string bytes(kTokenFileHeaderBytes + 2 * tokens.size(), '\0');
  std::memcpy(&bytes[0], header, kTokenFileHeaderBytes);
  if (!tokens.empty()) std::memcpy(&bytes[kTokenFileHeaderBytes], tokens.data(), 2 * tokens.size());
  write_file_atomic(path, bytes);  // readers never see a half-written shard
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  const FileHandle in = open_for_read(path);
  std::vector<uint8_t> bytes(static_cast<size_t>(in.size()));
  in.read_at(bytes.data(), static_cast<int64_t>(bytes.size()), 0);
  return bytes;
}

}  // namespace shardlab
