// Strict reads of JSON fields from files a user may have edited or damaged (checkpoint indexes,
// run directories, safetensors headers). nlohmann's get<int64_t>() truncates 1.5 to 1 and turns
// 1e30 into an undefined conversion; these name the file and the field instead, and check ranges.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"

namespace shardlab {

// j[key] as an integer in [lo, hi]. Accepts JSON integers only (5, not 5.0 or "5"); throws
// IoError "WHERE: field 'KEY' ..." naming what is wrong.
inline int64_t json_int(const nlohmann::json& j, const char* key, const std::string& where,
                        int64_t lo = std::numeric_limits<int64_t>::min(),
                        int64_t hi = std::numeric_limits<int64_t>::max()) {
  if (!j.is_object() || !j.contains(key))
    SL_THROW(IoError, where, ": field '", key, "' is missing");
  const nlohmann::json& v = j.at(key);
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      SL_THROW(IoError, where, ": field '", key, "' = ", u, " is out of range [", lo, ", ", hi,
               "]");
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    SL_THROW(IoError, where, ": field '", key, "' must be an integer, not ", v.dump());
  }
  if (x < lo || x > hi)
    SL_THROW(IoError, where, ": field '", key, "' = ", x, " is out of range [", lo, ", ", hi, "]");
  return x;
}

// j[key] as a string; throws IoError naming the file and field when absent or of another type.
inline std::string json_string(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    SL_THROW(IoError, where, ": field '", key, "' is missing");
  const nlohmann::json& v = j.at(key);
  if (!v.is_string())
    SL_THROW(IoError, where, ": field '", key, "' must be a string, not ", v.dump());
  return v.get<std::string>();
}

}  // namespace shardlab
