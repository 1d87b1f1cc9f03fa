// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78): the checksum of every range
// a checkpoint stores. Table-driven, slicing by 8 bytes, no dependency; on x86-64 CPUs with SSE4.2
// the crc32 instruction computes the same value several times faster.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardlab {

// Extends `crc` (the value returned for the bytes before) by `n` bytes. crc32c("123456789") is
// 0xE3069283; crc32c(a+b) == crc32c_extend(crc32c(a), b).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }
// The table-driven path alone (what crc32c_extend uses without SSE4.2), for tests.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);

}  // namespace shardlab
