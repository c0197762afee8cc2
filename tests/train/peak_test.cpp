// Where MFU's peak comes from: kiln bench peak's per-machine cache (written, read back, keyed by
// CPU model, threads and dtype, a corrupt file ignored with a note), and the order config, cache,
// start-up probe. Every test points KILN_CACHE_DIR at its own directory: none reads or writes
// the developer's ~/.cache.
#include "train/peak.h"

#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "test_util.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::ScopedEnv;
using kiln::testing::TempDir;

class PeakCache : public ::testing::Test {
 protected:
  TempDir dir_;
  ScopedEnv cache_dir_{"KILN_CACHE_DIR", dir_.path()};
  std::string path_ = dir_ / "peak.json";
};

TEST_F(PeakCache, PathFollowsKilnCacheDirThenXdgThenHome) {
  EXPECT_EQ(peak_cache_path(), path_);
  ScopedEnv none("KILN_CACHE_DIR", std::nullopt);
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/x/cache");
    EXPECT_EQ(peak_cache_path(), "/x/cache/kiln/peak.json");
  }
  ScopedEnv xdg("XDG_CACHE_HOME", std::nullopt);
  ScopedEnv home("HOME", "/home/someone");
  EXPECT_EQ(peak_cache_path(), "/home/someone/.cache/kiln/peak.json");
}

TEST_F(PeakCache, StoredEntriesReadBackAndOnlyTheirOwnKeyMatches) {
  std::string note;
  store_peak(path_, {"CPU A", 2, "fp32", 200.5, "2026-11-25"}, &note);
  store_peak(path_, {"CPU A", 2, "bf16", 410, "2026-11-25"}, &note);
  store_peak(path_, {"CPU A", 1, "fp32", 105, "2026-11-24"}, &note);
  EXPECT_EQ(note, "");
  auto entries = read_peak_cache(path_, &note);
  EXPECT_EQ(note, "");
  ASSERT_EQ(entries.size(), 3u);
  auto e = find_peak(entries, "CPU A", 2, "fp32");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->gflops, 200.5);
  EXPECT_EQ(e->date, "2026-11-25");
  EXPECT_EQ(find_peak(entries, "CPU A", 1, "fp32")->gflops, 105);
  EXPECT_EQ(find_peak(entries, "CPU A", 2, "bf16")->gflops, 410);
  // Another CPU, thread count or dtype is another machine's peak.
  EXPECT_FALSE(find_peak(entries, "CPU B", 2, "fp32"));
  EXPECT_FALSE(find_peak(entries, "CPU A", 4, "fp32"));
  EXPECT_FALSE(find_peak(entries, "CPU A", 1, "bf16"));
  // A new measurement replaces the entry with its key, and keeps the others.
  store_peak(path_, {"CPU A", 2, "fp32", 190, "2026-11-26"}, &note);
  entries = read_peak_cache(path_, &note);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(find_peak(entries, "CPU A", 2, "fp32")->gflops, 190);
  EXPECT_EQ(find_peak(entries, "CPU A", 2, "fp32")->date, "2026-11-26");
  // Written atomically: no temporary file is left beside it.
  for (const auto& f : fs::directory_iterator(dir_.path()))
    EXPECT_EQ(f.path().filename(), "peak.json") << f.path();
}

TEST_F(PeakCache, MissingFileIsEmptyWithoutANote) {
  std::string note;
  EXPECT_TRUE(read_peak_cache(path_, &note).empty());
  EXPECT_EQ(note, "");
}

TEST_F(PeakCache, CorruptFileIsIgnoredWithANoteNamingItAndThenReplaced) {
  const std::string bad[] = {
      "{\"format\": \"kiln peak cache\", \"version\": 1, \"entries\": [",  // truncated
      "\x7f"
      "ELF garbage",
      "[1, 2, 3]",
      "{\"entries\": []}",  // not kiln's format
      "{\"format\": \"kiln peak cache\", \"version\": 99, \"entries\": []}",
      "{\"format\": \"kiln peak cache\", \"version\": 1, \"entries\": {}}",
      "{\"format\": \"kiln peak cache\", \"version\": 1, \"entries\": [{\"cpu\": \"A\"}]}",
      "{\"format\": \"kiln peak cache\", \"version\": 1, \"entries\": [{\"cpu\": \"A\", "
      "\"threads\": 2, \"dtype\": \"fp32\", \"gflops\": -5, \"date\": \"2026-11-25\"}]}",
      "",
  };
  for (const auto& text : bad) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << text;
    std::string note;
    EXPECT_TRUE(read_peak_cache(path_, &note).empty()) << text;
    EXPECT_NE(note.find(path_), std::string::npos) << text << ": " << note;
    EXPECT_NE(note.find("kiln bench peak"), std::string::npos) << note;
  }
  // The trainer then probes instead, and passes the note on.
  std::ofstream(path_, std::ios::binary | std::ios::trunc) << bad[0];
  std::vector<std::string> notes;
  Peak p = resolve_peak(0, "fp32", 1, true, &notes);
  EXPECT_EQ(p.source, "start-up probe");
  EXPECT_GT(p.gflops, 0);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find(path_), std::string::npos) << notes[0];
  // kiln bench peak writes a good file over it, saying what it replaced.
  std::string note;
  store_peak(path_, {"CPU A", 2, "fp32", 200, "2026-11-25"}, &note);
  EXPECT_NE(note.find(path_), std::string::npos) << note;
  note.clear();
  EXPECT_EQ(read_peak_cache(path_, &note).size(), 1u);
  EXPECT_EQ(note, "");
}

TEST_F(PeakCache, ResolveTakesTheConfigThenTheCacheThenProbes) {
  store_peak(path_, {cpu_model_name(), 1, "fp32", 123.5, "2026-11-25"}, nullptr);
  std::vector<std::string> notes;
  Peak p = resolve_peak(50, "fp32", 1, true, &notes);
  EXPECT_EQ(p.gflops, 50);
  EXPECT_EQ(p.source, "hardware.peak_gflops");
  EXPECT_EQ(p.describe(), "hardware.peak_gflops");
  p = resolve_peak(0, "fp32", 1, true, &notes);
  EXPECT_EQ(p.gflops, 123.5);
  EXPECT_EQ(p.source, "kiln bench peak");
  EXPECT_EQ(p.describe(), "cached by kiln bench peak on 2026-11-25");
  // Not for another thread count or dtype: those are probed.
  p = resolve_peak(0, "bf16", 1, true, &notes);
  EXPECT_EQ(p.source, "start-up probe");
  EXPECT_GT(p.gflops, 0);
  EXPECT_EQ(p.describe(), "start-up probe");
  EXPECT_TRUE(notes.empty());
  // Without measuring (tests): the config or nothing.
  p = resolve_peak(0, "fp32", 1, false, &notes);
  EXPECT_EQ(p.gflops, 0);
  EXPECT_EQ(p.source, "none");
}

TEST(Peak, DescribeSaysWhenAStepRaisedIt) {
  Peak p;
  p.gflops = 10;
  p.source = "start-up probe";
  p.raised_at_step = 3;
  EXPECT_EQ(p.describe(), "raised to step 3's rate; was start-up probe");
}

}  // namespace
}  // namespace kiln
