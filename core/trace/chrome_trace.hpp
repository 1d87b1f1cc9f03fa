// Chrome trace event format export (trace.json): opens in ui.perfetto.dev and chrome://tracing.
// One process per rank (pid = rank), one thread per lane (tid 0 compute, tid 1 comm; spans that
// overlap without nesting go to extra threads "compute #2", "comm #2", ...: tids 2, 3, ...; the
// copy lane of --offload, "copy", is tid 1000, its extra threads 1001, ...), complete events "X"
// for spans, a counter "C" "memory" with every category's bytes (and "host memory" for the host
// tier under --offload), instant events "i" for steps (process scope) and marks (thread scope).
// Times in microseconds.
#pragma once

#include <string>

#include "core/trace/run_reader.hpp"

namespace shardlab {

std::string chrome_trace_json(const RunData& run);

}  // namespace shardlab
