// The project's log (core/utils/log.h): the line's fields, the minimum level, and whole lines
// from concurrent threads.
#include "core/utils/log.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace kernelserve::logging {
namespace {

// Restores the minimum level a test changed.
class LogTest : public ::testing::Test {
 protected:
  void TearDown() override { SetMinLevel(Level::kInfo); }
};

TEST_F(LogTest, LineHasUtcTimeLevelLocationAndText) {
  const absl::Time time = absl::FromUnixMicros(1764252628123456);  // 2025-11-27 14:10:28.123456
  EXPECT_EQ(FormatLine(time, Level::kWarning, "server/listener.cc", 562, "", "in trouble"),
            "2025-11-27T14:10:28.123456Z WARNING server/listener.cc:562] in trouble");
  EXPECT_EQ(FormatLine(time, Level::kError, "server/call.cc", 7, "42", "lost"),
            "2025-11-27T14:10:28.123456Z ERROR server/call.cc:7 request=42] lost");
}

TEST_F(LogTest, LevelsParseByName) {
  EXPECT_EQ(*ParseLevel("info"), Level::kInfo);
  EXPECT_EQ(*ParseLevel("WARNING"), Level::kWarning);
  EXPECT_EQ(*ParseLevel("Error"), Level::kError);
  EXPECT_FALSE(ParseLevel("debug").ok());
  EXPECT_EQ(LevelName(Level::kInfo), "INFO");
}

TEST_F(LogTest, WritesOneLineToStderrWithTheSourceFile) {
  ::testing::internal::CaptureStderr();
  KS_LOG(WARNING).RequestId("r7") << "kernelserve-server: " << 3 << " things";
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(absl::EndsWith(out, " request=r7] kernelserve-server: 3 things\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, " WARNING tests/core/utils/log_test.cc:")) << out;
  EXPECT_TRUE(absl::StrContains(out.substr(0, 40), "Z WARNING")) << out;
}

TEST_F(LogTest, LinesBelowTheMinimumAreNotWrittenNorFormatted) {
  SetMinLevel(Level::kWarning);
  int evaluated = 0;
  auto count = [&evaluated] { return ++evaluated; };
  ::testing::internal::CaptureStderr();
  KS_LOG(INFO) << "hidden " << count();
  KS_LOG(ERROR) << "shown " << count();
  Write(Level::kInfo, "x.cc", 1, "hidden too");
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(evaluated, 1);
  EXPECT_FALSE(absl::StrContains(out, "hidden")) << out;
  EXPECT_TRUE(absl::StrContains(out, "] shown 1\n")) << out;
}

TEST_F(LogTest, ConcurrentLinesDoNotInterleave) {
  constexpr int kThreads = 8;
  constexpr int kLines = 200;
  const std::string filler(300, 'x');
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &filler] {
      for (int i = 0; i < kLines; ++i) KS_LOG(INFO) << "thread " << t << " " << filler << " end";
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::string out = ::testing::internal::GetCapturedStderr();
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    ++lines;
    EXPECT_TRUE(absl::EndsWith(line, filler + " end")) << line;
    const size_t text = line.find("] thread ");  // one event per line
    EXPECT_TRUE(text != absl::string_view::npos && text == line.rfind("] thread ")) << line;
  }
  EXPECT_EQ(lines, kThreads * kLines);
}

}  // namespace
}  // namespace kernelserve::logging
