// JsonLine: appends one JSON object to a std::string without building a DOM, so recording an event
// costs a few number conversions and a memcpy (no allocation once the string has grown).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

namespace shardlab {

class JsonLine {
 public:
  explicit JsonLine(std::string& out) : out_(out) { out_ += '{'; }

  JsonLine& key(const char* k) {
    if (!first_) out_ += ',';
    first_ = false;
    out_ += '"';
    out_ += k;  // keys are identifiers chosen in code: no escaping needed
    out_ += "\":";
    return *this;
  }
  JsonLine& i64(const char* k, int64_t v) {
    key(k);
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, r.ptr);
    return *this;
  }
  // Shortest text that reads back to the same double; NaN and infinities become null.
  JsonLine& f64(const char* k, double v) {
    key(k);
    if (!std::isfinite(v)) {
      out_ += "null";
      return *this;
    }
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, r.ptr);
    return *this;
  }
  JsonLine& str(const char* k, const char* v) {
    key(k);
    append_string(out_, v ? v : "");
    return *this;
  }
  JsonLine& str(const char* k, const std::string& v) { return str(k, v.c_str()); }
  void end_line() { out_ += "}\n"; }
  void end() { out_ += '}'; }

  // Appends v as a quoted JSON string (control characters, quotes and backslashes escaped).
  static void append_string(std::string& out, const char* v) {
    out += '"';
    for (const char* p = v; *p; ++p) {
      const unsigned char c = static_cast<unsigned char>(*p);
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c < 0x20) {
        static const char kHex[] = "0123456789abcdef";
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 15];
      } else {
        out += static_cast<char>(c);
      }
    }
    out += '"';
  }

 private:
  std::string& out_;
  bool first_ = true;
};

}  // namespace shardlab
