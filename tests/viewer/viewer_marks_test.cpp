// `--mark` specs: what parses, and that every malformed part is named in the message.
#include <gtest/gtest.h>

#include "viewer/model/marks.hpp"

namespace shardlab::viewer {

TEST(ViewerMarks, ParsesEveryPanelWithAndWithoutARun) {
  Mark m;
  std::string err;
  ASSERT_TRUE(parse_mark("3:comm:1:403120000", &m, &err)) << err;
  EXPECT_EQ(m.number, 3);
  EXPECT_EQ(m.panel, MarkPanel::comm);
  EXPECT_EQ(m.row, 1);
  EXPECT_EQ(m.t, 403120000);
  EXPECT_EQ(m.run, 0);
  ASSERT_TRUE(parse_mark("12:units:5:0:1", &m, &err)) << err;
  EXPECT_EQ(m.panel, MarkPanel::units);
  EXPECT_EQ(m.run, 1);
  for (const char* p : {"memory", "compute", "comm", "units"}) {
    ASSERT_TRUE(parse_mark(std::string("1:") + p + ":0:7", &m, &err)) << err;
    EXPECT_STREQ(mark_panel_name(m.panel), p);
  }
}

TEST(ViewerMarks, RefusesMalformedSpecsSayingWhichPart) {
  struct Case {
    const char* spec;
    const char* says;
  };
  for (Case c : {Case{"1:comm:0", "needs 4 or 5 fields"}, Case{"1:comm:0:5:0:1", "needs 4 or 5"},
                 Case{"0:comm:0:5", "number must be 1..99"}, Case{"x:comm:0:5", "number"},
                 Case{"1:network:0:5", "unknown panel 'network'"}, Case{"1:comm:-1:5", "row"},
                 Case{"1:comm:0:5ms", "time must be ns"}, Case{"1:comm:0:-5", "time"},
                 Case{"1:comm:0:5:a", "run must be"}}) {
    Mark m;
    m.number = 42;
    std::string err;
    EXPECT_FALSE(parse_mark(c.spec, &m, &err)) << c.spec;
    EXPECT_NE(err.find(c.says), std::string::npos) << c.spec << ": " << err;
    EXPECT_NE(err.find(std::string("'") + c.spec + "'"), std::string::npos) << err;
    EXPECT_EQ(m.number, 42) << "a refused spec leaves the output alone";
  }
}

}  // namespace shardlab::viewer
