#include "data/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"
#include "data/prepare.h"
#include "data/shards.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::source_path;
using kiln::testing::TempDir;

// The GPT-2 vocabulary that scripts/setup.sh fetched into the source tree (unless the caller
// points elsewhere).
const bool kVocabDirSet =
    setenv("KILN_TOKENIZER_DIR", source_path("data/tokenizers/gpt2").c_str(), 0) == 0;

const Tokenizer& gpt2() {
  static std::unique_ptr<Tokenizer> tok = make_tokenizer("gpt2");
  return *tok;
}

nlohmann::json golden() {
  std::ifstream f(source_path("tests/fixtures/tokenizer/golden.json"));
  return nlohmann::json::parse(f);
}

// Golden ids made by OpenAI's tiktoken@1.0.22 (gpt2 encoding) under node; see the fixture README.
TEST(Gpt2Tokenizer, MatchesTiktokenOnEveryGoldenText) {
  auto g = golden();
  ASSERT_GE(g.size(), 40u);
  for (const auto& e : g) {
    std::string text = e["text"];
    auto ids = gpt2().encode(text, false);
    EXPECT_EQ(ids, e["ids"].get<std::vector<int32_t>>()) << e["name"];
    auto special = gpt2().encode(text, true);
    EXPECT_EQ(special, e["ids_special"].get<std::vector<int32_t>>()) << e["name"];
    EXPECT_EQ(gpt2().decode(ids.data(), ids.size()), text) << e["name"];
    EXPECT_EQ(gpt2().decode(special.data(), special.size()), text) << e["name"];
  }
}

TEST(Gpt2Tokenizer, CacheGivesTheSameIds) {
  EncodeCache cache;
  for (const auto& e : golden()) {
    std::string text = e["text"];
    std::vector<int32_t> a, b;
    gpt2().encode(text, false, a, &cache);
    gpt2().encode(text, false, b, &cache);  // second time from the cache
    EXPECT_EQ(a, e["ids"].get<std::vector<int32_t>>()) << e["name"];
    EXPECT_EQ(b, a) << e["name"];
  }
}

TEST(Gpt2Tokenizer, InvalidUtf8RoundTripsAsBytes) {
  Rng rng(11);
  std::vector<std::string> cases = {"\xff",
                                    "abc\x80"
                                    "def",
                                    "\xc3",
                                    "caf\xc3\xa9\xe2\x82",
                                    "\xed\xa0\x80 surrogate",
                                    "\xc0\xaf overlong",
                                    "\xf4\x90\x80\x80"};
  for (int i = 0; i < 200; i++) {
    std::string s;
    for (int k = 0, n = static_cast<int>(rng.below(40)); k < n; k++)
      s.push_back(static_cast<char>(rng.below(256)));
    cases.push_back(s);
  }
  for (const auto& s : cases) {
    auto ids = gpt2().encode(s, false);
    EXPECT_EQ(gpt2().decode(ids.data(), ids.size()), s);
  }
  // A lone invalid byte between letters is its own piece of class "other".
  auto ids = gpt2().encode(
      "ab\xff"
      "cd",
      false);
  std::string joined;
  for (auto id : ids) joined += gpt2().decode(&id, 1) + "|";
  EXPECT_EQ(joined, "ab|\xff|cd|");
}

TEST(Gpt2Tokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  int32_t bad = 50257;
  try {
    gpt2().decode(&bad, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("50257"), std::string::npos);
  }
}

TEST(Gpt2Tokenizer, MissingVocabularyIsAClearError) {
  TempDir dir;
  try {
    load_gpt2_tokenizer(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("setup.sh"), std::string::npos) << e.what();
  }
}

TEST(BytesTokenizer, RoundTripsAndKnowsEndOfText) {
  auto tok = make_tokenizer("bytes");
  std::string s = "a\xff\n<|endoftext|>z";
  auto ids = tok->encode(s, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', 0xff, '\n', 256, 'z'}));
  EXPECT_EQ(tok->decode(ids.data(), ids.size()), s);
  EXPECT_EQ(tok->encode(s, false).size(), s.size());
}

std::string sample_text() {
  std::string t;
  for (const auto& e : golden()) t += e["text"].get<std::string>() + "\n";
  for (int i = 0; i < 300; i++)
    t += "Call me Ishmael. Some years ago-never mind how long precisely-having\nlittle or no "
         "money in my purse,\n\n  and nothing particular " +
         std::to_string(i) + " to interest me on shore.\n";
  return t;
}

TEST(PrepareSplit, CuttingAtSafePointsKeepsTheSamePieces) {
  std::string t = sample_text();
  auto cuts = safe_split_points(t, 300);
  ASSERT_GT(cuts.size(), 20u);
  std::vector<int32_t> whole = gpt2().encode(t, true), pieces;
  size_t begin = 0;
  cuts.push_back(t.size());
  for (size_t c : cuts) {
    gpt2().encode(std::string_view(t).substr(begin, c - begin), true, pieces);
    begin = c;
  }
  EXPECT_EQ(pieces, whole);
}

TEST(Prepare, OutputDoesNotDependOnThreadsAndHasAManifest) {
  TempDir dir;
  std::ofstream(dir / "a.txt") << sample_text();
  std::string big;
  for (int i = 0; i < 40; i++) big += sample_text();
  std::ofstream(dir / "b.txt") << big;
  PrepareOptions o;
  o.inputs = {dir / "a.txt", dir / "b.txt"};
  o.progress = false;
  o.shard_tokens = 100000;
  o.output = dir / "t1";
  o.threads = 1;
  PrepareSummary s1 = prepare_dataset(o);
  o.output = dir / "t2";
  o.threads = 2;
  prepare_dataset(o);
  for (const auto& e : fs::directory_iterator(dir / "t1")) {
    std::string name = e.path().filename().string();
    if (name == "manifest.json") continue;
    std::ifstream a(e.path(), std::ios::binary), b(dir / ("t2/" + name), std::ios::binary);
    EXPECT_TRUE(
        std::equal(std::istreambuf_iterator<char>(a), {}, std::istreambuf_iterator<char>(b)))
        << name;
  }
  auto m = nlohmann::json::parse(std::ifstream(dir / "t1/manifest.json"));
  EXPECT_EQ(m["tokenizer"]["name"], "gpt2");
  EXPECT_EQ(m["tokenizer"]["hash"].get<std::string>().size(), 64u);
  EXPECT_EQ(m["sources"].size(), 2u);
  EXPECT_EQ(m["sources"][0]["sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(m["train"]["tokens"].get<int64_t>(), s1.train_tokens);
  EXPECT_GT(m["train"]["shards"].size(), 1u);
  // The shards hold the two documents, each opened by end-of-text, and decode to the text.
  ShardSet train(expand_shard_pattern(dir / "t1/train_*.bin", "train"), "train");
  std::vector<int32_t> ids(train.num_tokens());
  train.read(0, train.num_tokens(), ids.data(), 50257);
  EXPECT_EQ(ids[0], 50256);
  std::string text = gpt2().decode(ids.data() + 1, 2000);
  EXPECT_EQ(text.substr(0, 30), sample_text().substr(0, 30));
}

TEST(Prepare, BadInputIsAClearErrorAndWritesNothing) {
  TempDir dir;
  auto err = [&](PrepareOptions o) {
    o.output = dir / "out";
    o.progress = false;
    try {
      prepare_dataset(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  PrepareOptions o;
  o.inputs = {dir / "missing.txt"};
  EXPECT_NE(err(o).find("missing.txt"), std::string::npos);
  std::ofstream(dir / "empty.txt").close();
  o.inputs = {dir / "empty.txt"};
  EXPECT_NE(err(o).find("empty"), std::string::npos);
  std::ofstream(dir / "binary.txt") << std::string("text then \xff\xfe binary", 21);
  o.inputs = {dir / "binary.txt"};
  std::string e = err(o);
  EXPECT_NE(e.find("binary.txt"), std::string::npos) << e;
  EXPECT_NE(e.find("not UTF-8"), std::string::npos) << e;
  EXPECT_NE(e.find("offset 10"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir / "out/manifest.json"));
  o.allow_invalid_utf8 = true;
  EXPECT_EQ(err(o), "");
  EXPECT_TRUE(fs::exists(dir / "out/manifest.json"));
}

}  // namespace
}  // namespace kiln
