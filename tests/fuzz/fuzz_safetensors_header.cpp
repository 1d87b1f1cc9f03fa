// libFuzzer: a safetensors header, read as --init-from reads it: the strict parse, dtypes,
// shapes and offsets against a data section. The first 8 bytes of the input give the data
// section's size, the rest is the header text.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/base/error.hpp"
#include "core/checkpoint/safetensors.hpp"

using namespace shardlab;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t n = 0;
  std::memcpy(&n, data, 8);
  const int64_t data_bytes = static_cast<int64_t>(n >> 1);  // >= 0
  const std::string text(reinterpret_cast<const char*>(data) + 8, size - 8);
  try {
    const SafetensorsHeader h = parse_safetensors_header(text, data_bytes, "fuzz.safetensors");
    for (const SafetensorsEntry& e : h.entries) {
      if (e.begin < 0 || e.end < e.begin || e.end > data_bytes) __builtin_trap();
      e.numel();
    }
  } catch (const Error&) {
  }
  return 0;
}
