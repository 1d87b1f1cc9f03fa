// Parsing JSON text that came from a file a user may have edited, damaged or crafted (cluster
// specs, checkpoint indexes and manifests, run directories, safetensors headers). One bound and
// one set of refusals for every reader:
//  - depth: at most kMaxJsonDepth levels of arrays and objects. The text is scanned before it is
//    parsed, so no parser, walk, copy or dump ever recurses deeper (10^5 levels of "[[[[" used
//    to overflow the stack);
//  - duplicate keys: an object with the same key twice is refused (nlohmann keeps the last one
//    silently, so `"ranks_per_node"` twice meant whichever came last).
// Errors are IoError "WHERE: ..." naming the file (and line, for run-directory lines).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace shardlab {

// Deeper than any file the project writes (a checkpoint index nests 6 levels, a cluster spec 5).
inline constexpr int kMaxJsonDepth = 64;

// "" when `text` nests arrays and objects at most `max_depth` levels deep (strings are skipped,
// escapes included); else what is wrong, with the byte offset where the bound is crossed.
std::string json_depth_problem(std::string_view text, int max_depth = kMaxJsonDepth);

// Parses `text` as one JSON value: within kMaxJsonDepth, no key twice in one object.
nlohmann::json parse_json_strict(const std::string& text, const std::string& where);

}  // namespace shardlab
