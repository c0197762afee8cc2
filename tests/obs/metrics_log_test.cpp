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

TEST(MetricsLog, DurationsReadLikeAClock) {
  EXPECT_EQ(format_duration(12), "12s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3725), "1h02m");
}

}  // namespace
}  // namespace kiln
