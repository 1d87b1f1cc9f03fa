// CRC-32C by slicing-by-8: eight 256-entry tables let the loop consume 8 bytes per step
// (Intel's "slicing-by-8", Kounavis & Berry 2005); on x86-64 with SSE4.2, the crc32 instruction
// (which implements exactly this polynomial), chosen at run time.
#include "core/checkpoint/crc32c.hpp"

#include <array>
#include <cstring>

namespace shardlab {

namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPolyReflected : c >> 1;
      t[0][i] = c;
    }
    // t[k][i]: the CRC of byte i followed by k zero bytes.
    for (uint32_t i = 0; i < 256; ++i)
      for (int k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xffu];
  }
};

const Tables& tables() {
  static const Tables kTables;
  return kTables;
}

}  // namespace

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n) {
  const auto& t = tables().t;
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  // Bytes are read explicitly in little-endian order, so the result does not depend on the host.
  while (n >= 8) {
    uint32_t lo =
        c ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
    c = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^ t[4][lo >> 24] ^
        t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xffu];
  return ~c;
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}

const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  return kHaveSse42 ? crc32c_sse42(crc, data, n) : crc32c_extend_portable(crc, data, n);
}
#else
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  return crc32c_extend_portable(crc, data, n);
}
#endif

}  // namespace shardlab
