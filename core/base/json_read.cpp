// The depth scan and the strict parse of user-supplied JSON (json_read.hpp).
#include "core/base/json_read.hpp"

#include <set>
#include <vector>

#include "core/base/error.hpp"

namespace shardlab {

using json = nlohmann::json;

std::string json_depth_problem(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character, a quote included, is part of the string
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return "arrays and objects nest deeper than " + std::to_string(max_depth) +
               " levels (at byte " + std::to_string(i) + ")";
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced text is the parser's to report
    }
  }
  return "";
}

json parse_json_strict(const std::string& text, const std::string& where) {
  const std::string deep = json_depth_problem(text);
  if (!deep.empty()) SL_THROW(IoError, where, ": ", deep);
  // One set of keys per open object; the parser reports keys in order, so a repeat is seen.
  std::vector<std::set<std::string>> open;
  std::string repeated;
  auto cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) {
      open.emplace_back();
    } else if (ev == json::parse_event_t::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (ev == json::parse_event_t::key && !open.empty()) {
      if (!open.back().insert(parsed.get<std::string>()).second && repeated.empty())
        repeated = parsed.get<std::string>();
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, cb);
  } catch (const nlohmann::json::exception& e) {
    SL_THROW(IoError, where, ": not valid JSON (truncated?): ", e.what());
  }
  if (!repeated.empty())
    SL_THROW(IoError, where, ": key '", repeated.substr(0, 64), "' appears twice in one object");
  return j;
}

}  // namespace shardlab
