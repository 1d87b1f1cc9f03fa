// core/base: the depth bound and strict parse of user-supplied JSON, "did you mean", and virtual
// time that never wraps.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "core/base/error.hpp"
#include "core/base/json_read.hpp"
#include "core/base/suggest.hpp"
#include "core/base/virtual_clock.hpp"

using namespace shardlab;

namespace {
std::string nested(int depth, const char* open = "[", const char* close = "]") {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}
}  // namespace

TEST(JsonRead, DepthIsBoundedBeforeParsing) {
  EXPECT_EQ(json_depth_problem(nested(kMaxJsonDepth)), "");
  EXPECT_NE(json_depth_problem(nested(kMaxJsonDepth + 1)), "");
  // Brackets inside strings, escaped quotes included, are text, not nesting.
  EXPECT_EQ(json_depth_problem("{\"a\": \"[[[[[[\\\"[[[[\", \"b\": [1]}", 4), "");
  EXPECT_NE(json_depth_problem("{\"a\": {\"b\": {\"c\": {\"d\": {}}}}}", 4), "");
  // 10^5 levels (a stack overflow in the parser's walks before): refused, naming the file.
  for (const std::string& text : {"{\"nodes\": " + nested(100000) + "}",
                                  "{\"x\": " + nested(100000, "{\"a\": ", "}") + "}"}) {
    try {
      parse_json_strict(text, "cluster file deep.json");
      FAIL() << "no throw";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("cluster file deep.json: arrays and objects nest deeper "
                                           "than 64 levels (at byte "),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(JsonRead, StrictRefusesRepeatedKeysAndBrokenText) {
  EXPECT_EQ(parse_json_strict("{\"a\": {\"b\": 1}, \"b\": 2}", "f").at("b"), 2);
  try {
    parse_json_strict("{\"n\": 8, \"x\": {\"n\": 1}, \"n\": 4}", "spec.json");
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("spec.json: key 'n' appears twice in one object"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_json_strict("{\"a\": ", "f"), IoError);
}

TEST(Suggest, NearestNameIsATypoNotAnotherWord) {
  EXPECT_EQ(edit_distance("trian", "train"), 1);  // a transposition is one edit
  EXPECT_EQ(edit_distance("", "abc"), 3);
  const std::vector<std::string> cmds = {"train",  "demo", "plan",     "summary",  "inspect",
                                         "export", "data", "simulate", "calibrate"};
  EXPECT_EQ(nearest_name("trian", cmds), "train");
  EXPECT_EQ(nearest_name("simulte", cmds), "simulate");
  EXPECT_EQ(nearest_name("xyzzy", cmds), "");
  EXPECT_EQ(did_you_mean("gemm_eficiency", {"gemm_efficiency", "memory_efficiency"}),
            " (did you mean 'gemm_efficiency'?)");
  EXPECT_EQ(did_you_mean("zzz", {"gemm_efficiency"}), "");
}

TEST(VirtualClock, TimeNeverWraps) {
  EXPECT_EQ(virtual_ns(1.5, "x"), 1500000000);
  // Past 2^60 ns, or not a duration at all: refused, naming what was charged.
  for (double s : {1e300, 2e9, -1.0, std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::infinity()}) {
    try {
      virtual_ns(s, "all_gather");
      ADD_FAILURE() << s << " s accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("all_gather: "), std::string::npos) << e.what();
    }
  }
  VirtualClock c;
  c.advance(kMaxVirtualNs - 10);
  EXPECT_THROW(c.advance(10), InvalidArgument);
  EXPECT_EQ(c.now_ns, kMaxVirtualNs - 10);  // unchanged: the throw comes before the store
  EXPECT_THROW(c.join(kMaxVirtualNs), InvalidArgument);
  EXPECT_EQ(virtual_add_saturated(kMaxVirtualNs - 1, 5), kMaxVirtualNs);
  EXPECT_EQ(virtual_add_saturated(5, 5), 10);
}
