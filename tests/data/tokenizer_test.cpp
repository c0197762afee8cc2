#include "data/tokenizer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

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

// The BPE as kiln ran it before the heap (tiktoken's byte_pair_merge, O(n^2) per piece), over
// ranks read back from the vocabulary: the reference the new merge loop must equal exactly.
class ReferenceBpe {
 public:
  explicit ReferenceBpe(const Tokenizer& tok, Pattern pattern = Pattern::kGpt2)
      : pattern_(pattern) {
    // The ordinary tokens: below the end of text in GPT-2, below the special tokens in Llama 3.
    const int32_t ordinary = pattern == Pattern::kGpt2 ? tok.vocab_size() : 128000;
    for (int32_t id = 0; id < ordinary; id++)
      if (id != tok.eot()) ranks_.emplace(tok.decode(&id, 1), id);
  }
  std::vector<int32_t> encode(const std::string& text) const {
    std::vector<std::pair<size_t, size_t>> pieces;
    pretokenize(pattern_, text, pieces);
    std::vector<int32_t> out;
    for (auto [b, e] : pieces) bpe(std::string_view(text).substr(b, e - b), out);
    return out;
  }

 private:
  int32_t rank(std::string_view s) const {
    auto it = ranks_.find(std::string(s));
    return it == ranks_.end() ? INT32_MAX : it->second;
  }
  void bpe(std::string_view piece, std::vector<int32_t>& out) const {
    if (int32_t whole = rank(piece); whole != INT32_MAX) return out.push_back(whole);
    const size_t n = piece.size();
    struct Part {
      size_t start;
      int32_t rank;
    };
    std::vector<Part> parts;
    for (size_t i = 0; i + 1 < n; i++) parts.push_back({i, rank(piece.substr(i, 2))});
    parts.push_back({n - 1, INT32_MAX});
    parts.push_back({n, INT32_MAX});
    auto rank_at = [&](size_t i) {
      if (i + 2 >= parts.size()) return INT32_MAX;
      return rank(piece.substr(parts[i].start, parts[i + 2].start - parts[i].start));
    };
    while (parts.size() > 2) {
      int32_t best = INT32_MAX;
      size_t at = 0;
      for (size_t i = 0; i + 1 < parts.size(); i++)
        if (parts[i].rank < best) best = parts[i].rank, at = i;
      if (best == INT32_MAX) break;
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
      parts[at].rank = rank_at(at);
      if (at > 0) parts[at - 1].rank = rank_at(at - 1);
    }
    for (size_t i = 0; i + 1 < parts.size(); i++)
      out.push_back(rank(piece.substr(parts[i].start, parts[i + 1].start - parts[i].start)));
  }
  Pattern pattern_;
  std::unordered_map<std::string, int32_t> ranks_;
};

TEST(Gpt2Tokenizer, LongPiecesMergeExactlyAsTheQuadraticLoopDid) {
  ReferenceBpe ref(gpt2());
  Rng rng(5);
  std::vector<std::string> texts;
  // Single long words from small alphabets (many merges, many equal-rank ties), repeated
  // patterns, digits, punctuation and whitespace runs, multi-byte letters, and random bytes;
  // lengths on both sides of the short-piece cut-off (64 bytes).
  const std::vector<std::string> alphabets = {
      "ab",         "aeiou",   "etaoinshrdlu",     "abcdefghijklmnopqrstuvwxyz",
      "0123456789", "!?.,;:-", "\xc3\xa9\xc3\xb6", " \n"};
  for (int i = 0; i < 300; i++) {
    const std::string& a = alphabets[i % alphabets.size()];
    size_t len = 1 + rng.below(i % 3 == 0 ? 3000 : 200);
    std::string t = i % 5 == 0 ? " " : "";
    while (t.size() < len) {
      if (a[0] == '\xc3')
        t += a.substr(2 * rng.below(a.size() / 2), 2);
      else
        t.push_back(a[rng.below(a.size())]);
    }
    texts.push_back(t);
  }
  for (int i = 0; i < 50; i++) {
    std::string t;
    for (size_t k = 0, n = rng.below(2000); k < n; k++)
      t.push_back(static_cast<char>(rng.below(256)));
    texts.push_back(t);
  }
  for (const std::string unit : {"a", "ab", "abc", "the", "ing", "\xc3\xa9"})
    for (size_t reps : {32, 33, 64, 65, 500, 1001}) {
      std::string t;
      for (size_t k = 0; k < reps; k++) t += unit;
      texts.push_back(t);
    }
  for (const auto& e : golden()) texts.push_back(e["text"].get<std::string>());
  for (const auto& t : texts) ASSERT_EQ(gpt2().encode(t, false), ref.encode(t)) << t;
}

TEST(Gpt2Tokenizer, OneMegabyteWordEncodesAndRoundTrips) {
  // One pre-token of 1 MB: the quadratic merge loop never finished it (the ctest timeout is the
  // bound here; docs/performance.md has the times).
  Rng rng(3);
  std::string word;
  while (word.size() < (1u << 20)) word.push_back(static_cast<char>('a' + rng.below(26)));
  std::string line = "Start " + word + "\n";
  EncodeCache cache;
  std::vector<int32_t> ids;
  gpt2().encode(line, false, ids, &cache);
  EXPECT_GT(ids.size(), 100000u);
  EXPECT_EQ(gpt2().decode(ids.data(), ids.size()), line);
  std::string same(1u << 20, 'x');
  auto xs = gpt2().encode(same, false);
  EXPECT_EQ(gpt2().decode(xs.data(), xs.size()), same);
}

// ---- Llama 3 and cl100k: the same BPE with Llama 3's pattern -----------------------------------

const Tokenizer& llama3() {
  static std::unique_ptr<Tokenizer> tok =
      load_llama3_tokenizer(source_path("data/tokenizers/llama3"));
  return *tok;
}

const Tokenizer& cl100k() {
  static std::unique_ptr<Tokenizer> tok =
      load_cl100k_tokenizer(source_path("data/tokenizers/cl100k"));
  return *tok;
}

nlohmann::json llama3_golden() {
  std::ifstream f(source_path("tests/fixtures/tokenizer/llama3_golden.json"));
  return nlohmann::json::parse(f);
}

// Golden ids made by OpenAI's tiktoken@1.0.22 loaded with Llama 3's ranks, pattern and special
// tokens (Meta's reference is tiktoken); see the fixture README.
TEST(Llama3Tokenizer, MatchesTiktokenOnEveryGoldenText) {
  auto g = llama3_golden();
  ASSERT_GE(g.size(), 90u);
  EXPECT_EQ(llama3().vocab_size(), 128256);
  EXPECT_EQ(llama3().eot(), 128001);
  EXPECT_EQ(llama3().name(), "llama3");
  for (const auto& e : g) {
    std::string text = e["text"];
    auto ids = llama3().encode(text, false);
    EXPECT_EQ(ids, e["ids"].get<std::vector<int32_t>>()) << e["name"];
    auto special = llama3().encode(text, true);
    EXPECT_EQ(special, e["ids_special"].get<std::vector<int32_t>>()) << e["name"];
    EXPECT_EQ(llama3().decode(ids.data(), ids.size()), text) << e["name"];
    EXPECT_EQ(llama3().decode(special.data(), special.size()), text) << e["name"];
  }
}

TEST(Llama3Tokenizer, CacheGivesTheSameIds) {
  EncodeCache cache;
  for (const auto& e : llama3_golden()) {
    std::string text = e["text"];
    std::vector<int32_t> a, b;
    llama3().encode(text, true, a, &cache);
    llama3().encode(text, true, b, &cache);
    EXPECT_EQ(a, e["ids_special"].get<std::vector<int32_t>>()) << e["name"];
    EXPECT_EQ(b, a) << e["name"];
  }
}

TEST(Llama3Tokenizer, SpecialTokensMapToTheirIdsOnlyWhenAllowed) {
  const std::string text = "<|begin_of_text|>Hi<|reserved_special_token_250|><|end_of_text|>";
  auto ids = llama3().encode(text, true);
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[0], 128000);
  EXPECT_EQ(ids[2], 128255);
  EXPECT_EQ(ids[3], 128001);
  for (int32_t id : llama3().encode(text, false)) EXPECT_LT(id, 128000);
  // Every id decodes, and each special token encodes back to itself.
  for (int32_t id = 128000; id < 128256; id++) {
    std::string t = llama3().decode(&id, 1);
    EXPECT_EQ(llama3().encode(t, true), std::vector<int32_t>{id}) << t;
  }
  int32_t bad = 128256;
  EXPECT_THROW(llama3().decode(&bad, 1), Error);
}

TEST(Llama3Tokenizer, AnyBytesRoundTrip) {
  Rng rng(12);
  for (int i = 0; i < 300; i++) {
    std::string s;
    for (int k = 0, n = static_cast<int>(rng.below(60)); k < n; k++)
      s.push_back(static_cast<char>(i % 2 ? rng.below(256) : " \t\r\n'aZ1<|>."[rng.below(14)]));
    for (bool special : {false, true}) {
      auto ids = llama3().encode(s, special);
      EXPECT_EQ(llama3().decode(ids.data(), ids.size()), s);
    }
  }
}

TEST(Llama3Tokenizer, LongPiecesMergeExactlyAsTheQuadraticLoop) {
  ReferenceBpe ref(llama3(), Pattern::kLlama3);
  Rng rng(8);
  std::vector<std::string> texts;
  for (const auto& e : llama3_golden()) texts.push_back(e["text"].get<std::string>());
  for (int i = 0; i < 60; i++) {
    std::string t;
    for (size_t k = 0, n = 1 + rng.below(1500); k < n; k++)
      t.push_back(i % 3 ? "etaoinshrdlu"[rng.below(12)] : static_cast<char>(rng.below(256)));
    texts.push_back(t);
  }
  for (const auto& t : texts) ASSERT_EQ(llama3().encode(t, false), ref.encode(t)) << t;
}

TEST(Llama3Tokenizer, PreTokenizerSplitsAsThePattern) {
  auto split = [](const std::string& text) {
    std::vector<std::pair<size_t, size_t>> pieces;
    pretokenize(Pattern::kLlama3, text, pieces);
    std::string out;
    for (auto [b, e] : pieces) out += text.substr(b, e - b) + "|";
    return out;
  };
  EXPECT_EQ(split("I'LL go"), "I|'LL| go|");
  EXPECT_EQ(split("12345 abc"), "123|45| abc|");
  EXPECT_EQ(split("(hello) \tworld"), "(hello|)| |\tworld|");
  EXPECT_EQ(split("end.\n\nNext"), "end|.\n\n|Next|");
  EXPECT_EQ(split("a  \n  b   "), "a|  \n| | b|   |");
  EXPECT_EQ(split("x\r\n\r\ny"), "x|\r\n\r\n|y|");
}

TEST(Cl100kTokenizer, MatchesTiktokenOnEveryGoldenText) {
  EXPECT_EQ(cl100k().vocab_size(), 100277);
  EXPECT_EQ(cl100k().eot(), 100257);
  for (const auto& e : llama3_golden()) {
    std::string text = e["text"];
    auto ids = cl100k().encode(text, false);
    EXPECT_EQ(ids, e["cl100k_ids"].get<std::vector<int32_t>>()) << e["name"];
    auto special = cl100k().encode(text, true);
    EXPECT_EQ(special, e["cl100k_ids_special"].get<std::vector<int32_t>>()) << e["name"];
    EXPECT_EQ(cl100k().decode(special.data(), special.size()), text) << e["name"];
  }
  int32_t hole = 100256;  // no token has this rank
  EXPECT_THROW(cl100k().decode(&hole, 1), Error);
}

TEST(Llama3Tokenizer, BadVocabularyFilesAreClearErrors) {
  TempDir dir;
  try {
    load_llama3_tokenizer(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("setup.sh"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {}}})";
  try {
    load_llama3_tokenizer(dir.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
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

TEST(Prepare, Llama3WritesUint32ShardsThatDecodeToTheText) {
  TempDir dir;
  setenv("KILN_TOKENIZER_DIR", source_path("data/tokenizers").c_str(), 1);  // <dir>/llama3
  std::ofstream(dir / "a.txt") << sample_text() << "<|end_of_text|>second document\n";
  PrepareOptions o;
  o.tokenizer = "llama3";
  o.inputs = {dir / "a.txt"};
  o.progress = false;
  o.val_fraction = 0;
  o.output = dir / "out";
  PrepareSummary s = prepare_dataset(o);
  setenv("KILN_TOKENIZER_DIR", source_path("data/tokenizers/gpt2").c_str(), 1);
  auto m = nlohmann::json::parse(std::ifstream(dir / "out/manifest.json"));
  EXPECT_EQ(m["tokenizer"]["name"], "llama3");
  EXPECT_EQ(m["tokenizer"]["vocab_size"], 128256);
  EXPECT_EQ(m["tokenizer"]["hash"].get<std::string>().size(), 64u);
  EXPECT_EQ(m["format"], "llm.c token shards, version 7 (uint32)");
  ShardSet train(expand_shard_pattern(dir / "out/train_*.bin", "train"), "train");
  ASSERT_EQ(train.num_tokens(), s.train_tokens);
  std::vector<int32_t> ids(train.num_tokens());
  train.read(0, train.num_tokens(), ids.data(), 128256);
  EXPECT_EQ(ids[0], 128001);  // each document opens with the end of text
  std::vector<int32_t> want = {128001};
  llama3().encode(sample_text() + "<|end_of_text|>second document\n", true, want);
  EXPECT_EQ(ids, want);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128001), 2);
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
  std::ofstream(dir / "binary.txt") << std::string("text then \xff\xfe binary");
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

TEST(Prepare, OptionsOutOfRangeAreRefusedNamingTheFlag) {
  TempDir dir;
  std::ofstream(dir / "a.txt") << "Some text.\n";
  auto err = [&](PrepareOptions o) {
    o.inputs = {dir / "a.txt"};
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
  o.val_fraction = std::nan("");  // wrote a manifest with negative token counts
  EXPECT_NE(err(o).find("--val-fraction"), std::string::npos);
  o.val_fraction = 1.0;
  EXPECT_NE(err(o).find("--val-fraction"), std::string::npos);
  o = PrepareOptions();
  o.threads = 100000;  // crashed libgomp
  EXPECT_NE(err(o).find("--threads"), std::string::npos);
  o.threads = -1;
  EXPECT_NE(err(o).find("--threads"), std::string::npos);
  o = PrepareOptions();
  o.shard_tokens = int64_t{1} << 31;  // the header's int32 count would wrap
  EXPECT_NE(err(o).find("--shard-tokens"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "out/manifest.json"));
}

TEST(Prepare, InputsThatAreNotFilesOrDirectoriesAreNamedForWhatTheyAre) {
  TempDir dir;
  std::string fifo = dir / "pipe.txt";
  ASSERT_EQ(0, mkfifo(fifo.c_str(), 0600));
  auto err = [&](const std::string& in) {
    PrepareOptions o;
    o.inputs = {in};
    o.output = dir / "out";
    o.progress = false;
    try {
      prepare_dataset(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string e = err("/dev/zero");  // said "no such file"
  EXPECT_NE(e.find("/dev/zero is a character device"), std::string::npos) << e;
  e = err(fifo);
  EXPECT_NE(e.find("FIFO"), std::string::npos) << e;
  // In a directory, a FIFO is skipped, not read (which would block).
  std::ofstream(dir / "a.txt") << "Some text.\n";
  e = err(dir.path());
  EXPECT_EQ(e, "");
}

}  // namespace
}  // namespace kiln
