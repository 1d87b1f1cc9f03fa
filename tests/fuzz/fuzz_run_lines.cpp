// libFuzzer: the lines of a run directory's rank file, read as `shardlab summary` and the viewer
// read them, then the summary computed on whatever was accepted (a summary never computes on
// what cannot be, and must not overflow on what can).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/base/error.hpp"
#include "core/trace/run_reader.hpp"
#include "core/trace/summary.hpp"

using namespace shardlab;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  RunData run;
  run.dir = "fuzz";
  run.meta = {{"world_size", 1}};
  run.ranks.resize(1);
  size_t begin = 0;
  int line = 0;
  while (begin < text.size()) {
    size_t nl = text.find('\n', begin);
    if (nl == std::string::npos) nl = text.size();
    add_run_event_line(text.substr(begin, nl - begin), 0, run.ranks[0],
                       "rank0.jsonl:" + std::to_string(++line));
    begin = nl + 1;
  }
  try {
    const RunSummary s = compute_summary(run);
    summary_to_json(s).dump();
  } catch (const Error&) {
  }
  return 0;
}
