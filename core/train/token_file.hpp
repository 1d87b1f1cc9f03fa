// llm.c token shards (.bin): a header of 256 int32 (magic 20240520, version 1, token count), then
// the tokens as uint16. The format llm.c's dev/data scripts write, so their shards load unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardlab {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderInts = 256;
inline constexpr int64_t kTokenFileHeaderBytes = kTokenFileHeaderInts * 4;

// Reads a shard. Throws IoError naming the file when it cannot be opened, is shorter than the
// header, has the wrong magic or version, or its size disagrees with the token count
// ("expected N bytes, file has M").
std::vector<uint16_t> read_token_file(const std::string& path);

// Writes a shard atomically: to "<path>.tmp<pid>" first, then renamed over path, so a reader never
// sees a half-written file. Throws IoError naming the file.
void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens);

// The whole file as bytes (byte-level text: one token per byte). Throws IoError naming the file.
std::vector<uint8_t> read_file_bytes(const std::string& path);

}  // namespace shardlab
