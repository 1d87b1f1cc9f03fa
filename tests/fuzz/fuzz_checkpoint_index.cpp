// libFuzzer: a checkpoint's index.json, read as load, inspect and export read it (the strict
// parse, every field, the chunks' tiling, the index's own checksum).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/base/error.hpp"
#include "core/base/json_read.hpp"
#include "core/checkpoint/index.hpp"

using namespace shardlab;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json j = parse_json_strict(text, "fuzz/index.json");
    const CheckpointIndex ix = index_from_json(j, "fuzz/index.json");
    index_checksum(j);
    // What inspect and the loaders compute from an accepted index: sums that must not overflow.
    int64_t params = 0, bytes = 0;
    for (const auto& t : ix.tensors) params += t.numel;
    for (const auto& f : ix.files) bytes += f.bytes;
    for (const auto& t : ix.tensors) {
      ix.find(t.name);
      for (const auto& [state, chunks] : t.chunks)
        for (const CkptChunk& c : chunks) ix.find_file(c.file);
    }
    (void)params;
    (void)bytes;
  } catch (const Error&) {
  }
  return 0;
}
