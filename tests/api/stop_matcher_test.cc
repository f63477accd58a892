// Stop strings over streamed text, against the OpenAI rule: the text ends right before the
// first stop string, which is not returned; text that only might start one is held back
// until it cannot.
#include <gtest/gtest.h>

#include "api/stop_matcher.h"

namespace fathom::api {
namespace {

std::string feed(StopMatcher& m, const std::vector<std::string>& parts, bool* stopped) {
  std::string out;
  *stopped = false;
  for (const auto& p : parts)
    if (m.push(p, &out)) {
      *stopped = true;
      return out;
    }
  m.finish(&out);
  return out;
}

TEST(StopMatcher, EndsBeforeAStopStringSplitOverPieces) {
  StopMatcher m({"\n\n", "END"});
  bool stopped;
  EXPECT_EQ(feed(m, {"Hello", " wor", "ld\n", "\nmore"}, &stopped), "Hello world");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(m.matched(), "\n\n");
}

TEST(StopMatcher, HoldsBackOnlyWhatCouldStillMatch) {
  StopMatcher m({"STOP"});
  std::string out;
  EXPECT_FALSE(m.push("abcST", &out));
  EXPECT_EQ(out, "abc");  // "ST" may begin "STOP"
  EXPECT_FALSE(m.push("X", &out));
  EXPECT_EQ(out, "abcSTX");
  EXPECT_FALSE(m.push("S", &out));
  m.finish(&out);
  EXPECT_EQ(out, "abcSTXS");
}

TEST(StopMatcher, EarliestStopWinsAndNoStopsPassEverything) {
  StopMatcher m({"cd", "bcd"});
  bool stopped;
  EXPECT_EQ(feed(m, {"abcde"}, &stopped), "a");
  EXPECT_EQ(m.matched(), "bcd");
  StopMatcher none({});
  EXPECT_EQ(feed(none, {"x", "y"}, &stopped), "xy");
  EXPECT_FALSE(stopped);
}

// vLLM's min_tokens: unchecked text (the first tokens') never ends a stop string; one that
// starts there and ends in checked text does.
TEST(StopMatcher, UncheckedTextEndsNoStopStringButMayStartOne) {
  {
    StopMatcher m({"END"});
    std::string out;
    EXPECT_FALSE(m.push("a END b E", &out, false));
    EXPECT_FALSE(m.push("N", &out, false));
    EXPECT_TRUE(m.push("D c", &out, true));  // "END" begun unchecked, ended here
    EXPECT_EQ(out, "a END b ");
  }
  {
    StopMatcher m({"END"});
    std::string out;
    EXPECT_FALSE(m.push("xEND", &out, false));
    EXPECT_FALSE(m.push("y", &out, true));  // the only END ended in unchecked text
    EXPECT_TRUE(m.push(" END", &out, true));
    EXPECT_EQ(out, "xENDy ");
  }
}

// vLLM's include_stop_str_in_output: the stop string that ends the text is sent with it.
TEST(StopMatcher, IncludedStopStringIsSentWithTheText) {
  StopMatcher m({"END", "ENDING"}, true);
  bool stopped;
  EXPECT_EQ(feed(m, {"a EN", "DING b"}, &stopped), "a ENDING");
  EXPECT_TRUE(stopped);
}

}  // namespace
}  // namespace fathom::api
