#include "obs/metrics_log.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"

namespace kiln {
namespace {

TEST(MetricsLog, TextCutInsideAUtf8SequenceIsWrittenNotThrown) {
  kiln::testing::TempDir dir;
  {
    MetricsLog log(dir / "m.jsonl");
    log.write({{"type", "sample"}, {"text", std::string("caf\xc3", 4)}});  // a cut "é"
    log.write({{"step", 2}});
  }
  std::ifstream f(dir / "m.jsonl");
  std::string a, b;
  std::getline(f, a);
  std::getline(f, b);
  auto j = nlohmann::json::parse(a);
  EXPECT_EQ(j["text"], "caf\xef\xbf\xbd");  // U+FFFD replaces the stray byte
  EXPECT_EQ(nlohmann::json::parse(b)["step"], 2);
}

TEST(MetricsLog, ALineTornByACrashIsEndedBeforeTheNextRecord) {
  kiln::testing::TempDir dir;
  std::ofstream(dir / "m.jsonl") << "{\"step\": 1}\n{\"step\": 2, \"lo";  // died mid-write
  {
    MetricsLog log(dir / "m.jsonl");
    log.write({{"step", 3}});
  }
  std::ifstream f(dir / "m.jsonl");
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "{\"step\": 2, \"lo");
  EXPECT_EQ(nlohmann::json::parse(lines[2])["step"], 3);
  {
    MetricsLog again(dir / "m.jsonl");  // a whole file gets no empty line
    again.write({{"step", 4}});
  }
  std::ifstream g(dir / "m.jsonl");
  int n = 0;
  for (std::string l; std::getline(g, l);) n++;
  EXPECT_EQ(n, 4);
}

TEST(MetricsLog, DurationsReadLikeAClock) {
  EXPECT_EQ(format_duration(12), "12s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3725), "1h02m");
}

TEST(MetricsLog, WriteErrorsAreReportedOnceAndCounted) {
  // /dev/full fails every write with ENOSPC, as a full disk does.
  MetricsLog log("/dev/full");
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; i++) log.write({{"step", i}});
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.write_errors(), 3);
  EXPECT_NE(err.find("/dev/full"), std::string::npos) << err;
  EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
  EXPECT_EQ(err.find("cannot write"), err.rfind("cannot write")) << "reported more than once";
}

}  // namespace
}  // namespace kiln
