#include "data/shards.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <set>

#include "core/error.h"
#include "data/loader.h"
#include "data/manifest.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::testing::error_of;
using kiln::testing::TempDir;

std::vector<uint16_t> iota_tokens(int n, int start = 0) {
  std::vector<uint16_t> t(n);
  for (int i = 0; i < n; i++) t[i] = static_cast<uint16_t>((start + i) % 1000);
  return t;
}

TEST(Shards, ConcatenationReadsAcrossShardBoundaries) {
  TempDir dir;
  write_shard(dir / "a_000.bin", iota_tokens(10, 0));
  write_shard(dir / "a_001.bin", iota_tokens(7, 10));
  ShardSet s(expand_shard_pattern(dir / "a_*.bin", "data.train"), "data.train");
  EXPECT_EQ(s.num_tokens(), 17);
  std::vector<int32_t> out(9);
  s.read(6, 9, out.data(), 1000);
  for (int i = 0; i < 9; i++) EXPECT_EQ(out[i], 6 + i);
}

TEST(Shards, UnshuffledLoaderFollowsLlmcOrder) {
  TempDir dir;
  write_shard(dir / "t.bin", iota_tokens(100));
  ShardSet s({dir / "t.bin"}, "data.train");
  const int B = 2, T = 4;
  Loader l(s, B, T, 1000, false, 0);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int k = 0; k < 30; k++) {
    l.next(in.data(), tg.data());
    int64_t start = (k % ((100 - 1) / (B * T))) * B * T;  // wraps after the last whole window
    for (int i = 0; i < B * T; i++) {
      ASSERT_EQ(in[i], start + i) << "micro-batch " << k;
      ASSERT_EQ(tg[i], start + i + 1) << "micro-batch " << k;
    }
  }
}

TEST(Shards, ShuffledLoaderIsSeeded) {
  TempDir dir;
  write_shard(dir / "t.bin", iota_tokens(801));
  ShardSet s({dir / "t.bin"}, "data.train");
  Loader a(s, 2, 4, 1000, true, 7), b(s, 2, 4, 1000, true, 7), c(s, 2, 4, 1000, true, 8);
  std::vector<int32_t> in(8), tg(8), in2(8), in3(8);
  bool differs = false;
  for (int k = 0; k < 100; k++) {
    a.next(in.data(), tg.data());
    b.next(in2.data(), tg.data());
    c.next(in3.data(), tg.data());
    EXPECT_EQ(in, in2);
    differs |= in != in3;
  }
  EXPECT_TRUE(differs);
}

TEST(Shards, LoaderResumesFromItsPosition) {
  TempDir dir;
  write_shard(dir / "t.bin", iota_tokens(801));
  ShardSet s({dir / "t.bin"}, "data.train");
  Loader a(s, 2, 4, 1000, true, 3), b(s, 2, 4, 1000, true, 3);
  std::vector<int32_t> in(8), tg(8), in2(8), tg2(8);
  for (int k = 0; k < 150; k++) a.next(in.data(), tg.data());
  b.set_position(a.position());
  for (int k = 0; k < 60; k++) {
    a.next(in.data(), tg.data());
    b.next(in2.data(), tg2.data());
    ASSERT_EQ(in, in2);
    ASSERT_EQ(tg, tg2);
  }
}

TEST(Shards, RanksShareEverySequenceExactlyOncePerEpoch) {
  TempDir dir;
  const int B = 2, T = 4;
  write_shard(dir / "t.bin", iota_tokens(T * 120 + 1));  // 120 sequences of T+1 tokens
  ShardSet s({dir / "t.bin"}, "data.train");
  for (bool shuffle : {false, true}) {
    for (int R : {1, 2, 3}) {
      std::vector<std::unique_ptr<Loader>> ranks;
      for (int r = 0; r < R; r++)
        ranks.push_back(std::make_unique<Loader>(s, B, T, 1000, shuffle, 9, r, R));
      const int64_t E = ranks[0]->sequences_per_epoch();
      ASSERT_EQ(E, 120 / (B * R) * (B * R));
      // Two epochs of global batches: micro-batch k of every rank in rank order.
      std::vector<int> seen(120, 0);
      std::vector<int32_t> in(B * T), tg(B * T);
      int64_t position = 0;
      for (int64_t k = 0; k < 2 * E / (B * R); k++) {
        for (int r = 0; r < R; r++) {
          ranks[r]->next(in.data(), tg.data());
          for (int b = 0; b < B; b++, position++) {
            int32_t first = in[b * T];
            ASSERT_EQ(first % T, 0);
            ASSERT_EQ(tg[b * T], first + 1);
            seen[first / T]++;
            // Without shuffling, rank r's micro-batch k starts at token (k*R + r)*B*T.
            if (!shuffle) {
              ASSERT_EQ(first, (position % E) * T) << "R=" << R << " k=" << k;
            }
          }
        }
        if (position == E || position == 2 * E) {
          const int epochs = position == E ? 1 : 2;
          int64_t total = 0;
          for (int64_t q = 0; q < 120; q++) {
            total += seen[q];
            ASSERT_LE(seen[q], epochs) << "R=" << R << " sequence " << q;  // never twice an epoch
            if (!shuffle) {
              ASSERT_EQ(seen[q], q < E ? epochs : 0) << "R=" << R << " sequence " << q;
            }
          }
          ASSERT_EQ(total, epochs * E);
        }
      }
    }
  }
}

TEST(Shards, LayoutsWithTheSameGlobalBatchSeeTheSameSequences) {
  TempDir dir;
  write_shard(dir / "t.bin", iota_tokens(4 * 97 + 1));
  ShardSet s({dir / "t.bin"}, "data.train");
  for (bool shuffle : {false, true}) {
    Loader one(s, 4, 4, 1000, shuffle, 5);                                            // dp=1, B=4
    Loader r0(s, 2, 4, 1000, shuffle, 5, 0, 2), r1(s, 2, 4, 1000, shuffle, 5, 1, 2);  // dp=2, B=2
    std::vector<int32_t> a(16), at(16), b(8), bt(8);
    for (int k = 0; k < 60; k++) {
      one.next(a.data(), at.data());
      r0.next(b.data(), bt.data());
      ASSERT_TRUE(std::equal(b.begin(), b.end(), a.begin())) << k;
      r1.next(b.data(), bt.data());
      ASSERT_TRUE(std::equal(b.begin(), b.end(), a.begin() + 8)) << k;
    }
  }
}

TEST(Shards, PrefetchingLoaderGivesTheSameBatchesAndResumes) {
  TempDir dir;
  write_shard(dir / "t.bin", iota_tokens(801));
  ShardSet s({dir / "t.bin"}, "data.train");
  Loader plain(s, 2, 4, 1000, true, 4, 1, 2), ahead(s, 2, 4, 1000, true, 4, 1, 2, true);
  std::vector<int32_t> a(8), at(8), b(8), bt(8);
  for (int k = 0; k < 120; k++) {
    plain.next(a.data(), at.data());
    ahead.next(b.data(), bt.data());
    ASSERT_EQ(a, b) << k;
    ASSERT_EQ(at, bt) << k;
    if (k == 50) {  // reposition both, as a resume does
      plain.set_position(7);
      ahead.set_position(7);
    }
  }
}

TEST(Shards, PrefetchedReadErrorsReachTheCaller) {
  TempDir dir;
  write_shard(dir / "t.bin", iota_tokens(100));
  ShardSet s({dir / "t.bin"}, "data.train");
  Loader l(s, 2, 4, 50, false, 0, 0, 1, true);  // tokens 50..99 are outside a vocabulary of 50
  std::vector<int32_t> in(8), tg(8);
  std::string e;
  for (int k = 0; k < 12 && e.empty(); k++) e = error_of([&] { l.next(in.data(), tg.data()); });
  EXPECT_NE(e.find("outside the vocabulary"), std::string::npos) << e;
}

TEST(Shards, DataSmallerThanOneGlobalBatchIsAClearError) {
  TempDir dir;
  write_shard(dir / "small.bin", iota_tokens(20));  // 2 windows of 8
  ShardSet s({dir / "small.bin"}, "data.train");
  std::string e = error_of([&] { Loader l(s, 2, 4, 1000, false, 0, 0, 3); });
  EXPECT_NE(e.find("small.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("3 data-parallel ranks"), std::string::npos) << e;
  e = error_of([&] { Loader l(s, 4, 8, 1000, false, 0); });
  EXPECT_NE(e.find("shorter than one micro-batch"), std::string::npos) << e;
}

TEST(Shards, WrongMagicNamesTheFile) {
  TempDir dir;
  std::ofstream f(dir / "bad.bin", std::ios::binary);
  std::vector<int32_t> header(256, 0);
  header[0] = 12345;
  f.write(reinterpret_cast<const char*>(header.data()), 1024);
  f.close();
  std::string e = error_of([&] { ShardSet s({dir / "bad.bin"}, "data.train"); });
  EXPECT_NE(e.find("bad.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("magic number 12345"), std::string::npos) << e;
}

TEST(Shards, TruncatedShardIsDetected) {
  TempDir dir;
  write_shard(dir / "t.bin", iota_tokens(100));
  std::filesystem::resize_file(dir / "t.bin", 1024 + 150);
  std::string e = error_of([&] { ShardSet s({dir / "t.bin"}, "data.train"); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("t.bin"), std::string::npos) << e;
}

TEST(Shards, MissingShardPatternNamesTheKey) {
  TempDir dir;
  std::string e = error_of([&] { expand_shard_pattern(dir / "nothing_*.bin", "data.val"); });
  EXPECT_NE(e.find("data.val"), std::string::npos) << e;
  EXPECT_NE(e.find("matches no file"), std::string::npos) << e;
}

TEST(Shards, TokenOutsideVocabularyIsReported) {
  TempDir dir;
  write_shard(dir / "t.bin", iota_tokens(100));
  ShardSet s({dir / "t.bin"}, "data.train");
  std::vector<int32_t> out(100);
  std::string e = error_of([&] { s.read(0, 100, out.data(), 50); });
  EXPECT_NE(e.find("outside the vocabulary"), std::string::npos) << e;
}

// A shard file with the given header fields and `tokens` tokens after it.
void write_shard_header(const std::string& path, int32_t magic, int32_t version, int32_t count,
                        size_t tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), 1024);
  f << std::string(tokens * 2, '\0');
}

TEST(Shards, AFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  std::string fifo = dir / "train_000000.bin";
  ASSERT_EQ(0, mkfifo(fifo.c_str(), 0600));
  std::string e = error_of([&] { ShardSet s({fifo}, "data.train"); });  // blocked forever before
  EXPECT_NE(e.find("data.train"), std::string::npos) << e;
  EXPECT_NE(e.find(fifo), std::string::npos) << e;
  EXPECT_NE(e.find("FIFO"), std::string::npos) << e;
}

TEST(Shards, DirectoriesDevicesAndEmptyFilesAreRefusedByName) {
  TempDir dir;
  std::ofstream(dir / "empty.bin").close();
  for (const std::string& path : {dir.path(), std::string("/dev/null"), dir / "empty.bin"}) {
    std::string e = error_of([&] { ShardSet s({path}, "data.val"); });
    EXPECT_NE(e.find("data.val"), std::string::npos) << e;
    EXPECT_NE(e.find(path), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { ShardSet s({dir.path()}, "data.val"); }).find("directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ShardSet s({"/dev/null"}, "data.val"); }).find("character device"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ShardSet s({dir / "empty.bin"}, "data.val"); }).find("empty"),
            std::string::npos);
}

TEST(Shards, HeaderFieldsOutOfRangeAreRefused) {
  TempDir dir;
  struct Case {
    int32_t version, count;
    size_t tokens;
    const char* says;
  };
  for (const Case& c : {Case{2, 4, 4, "version 2"}, Case{1, -5, 0, "negative token count"},
                        Case{1, 2147483647, 4, "truncated"}, Case{1, 3, 4, "bytes after"}}) {
    write_shard_header(dir / "s.bin", kShardMagic, c.version, c.count, c.tokens);
    std::string e = error_of([&] { ShardSet s({dir / "s.bin"}, "data.train"); });
    EXPECT_NE(e.find(dir / "s.bin"), std::string::npos) << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << e;
  }
}

TEST(Shards, AUint16ShardIsLlmcsVersionOneByteForByte) {
  // GPT-2 shards are llm.c's bytes as before: magic 20240520, version 1, count, zeros to 1024
  // bytes, then little-endian uint16 tokens.
  TempDir dir;
  write_shard(dir / "t.bin", std::vector<uint16_t>{1, 50256, 65535});
  std::ifstream f(dir / "t.bin", std::ios::binary);
  std::string bytes(std::istreambuf_iterator<char>(f), {});
  std::string expect(1024 + 6, '\0');
  const int32_t header[3] = {20240520, 1, 3};
  std::memcpy(expect.data(), header, sizeof(header));
  const uint8_t tokens[6] = {1, 0, 0x50, 0xC4, 0xFF, 0xFF};
  std::memcpy(expect.data() + 1024, tokens, sizeof(tokens));
  EXPECT_EQ(bytes, expect);
}

TEST(Shards, Uint32ShardsHoldIdsAbove65535AndMixWithUint16Ones) {
  TempDir dir;
  std::vector<uint32_t> big = {128000, 9906, 128001, 65536, 0, 128255};
  write_shard(dir / "a_000.bin", big);
  write_shard(dir / "a_001.bin", std::vector<uint16_t>{7, 8, 9});
  std::ifstream f(dir / "a_000.bin", std::ios::binary);
  std::string bytes(std::istreambuf_iterator<char>(f), {});
  ASSERT_EQ(bytes.size(), 1024u + 4 * big.size());
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240801);  // llm.c's Llama 3 shards
  EXPECT_EQ(header[1], 7);
  EXPECT_EQ(header[2], 6);
  ShardSet s(expand_shard_pattern(dir / "a_*.bin", "data.train"), "data.train");
  ASSERT_EQ(s.num_tokens(), 9);
  std::vector<int32_t> out(9);
  s.read(0, 9, out.data(), 128256);
  EXPECT_EQ(out, (std::vector<int32_t>{128000, 9906, 128001, 65536, 0, 128255, 7, 8, 9}));
  std::string e = error_of([&] { s.read(0, 9, out.data(), 128000); });
  EXPECT_NE(e.find("token id 128000"), std::string::npos) << e;
  EXPECT_EQ(shard_token_bytes(50257), 2);
  EXPECT_EQ(shard_token_bytes(65536), 2);
  EXPECT_EQ(shard_token_bytes(65537), 4);
  EXPECT_EQ(shard_token_bytes(128256), 4);
}

TEST(Shards, AnUnknownVersionIsRefusedNamingTheFileAndTheKnownOnes) {
  TempDir dir;
  for (auto [magic, version] :
       {std::pair{kShardMagic, 7}, std::pair{kShardMagicU32, 1}, std::pair{kShardMagic, 3}}) {
    write_shard_header(dir / "v.bin", magic, version, 2, 4);
    std::string e = error_of([&] { ShardSet s({dir / "v.bin"}, "data.train"); });
    EXPECT_NE(e.find(dir / "v.bin"), std::string::npos) << e;
    EXPECT_NE(e.find(fmt::format("has version {}", version)), std::string::npos) << e;
    EXPECT_NE(e.find("uint32"), std::string::npos) << e;
  }
  // A uint32 shard whose size is that of uint16 tokens is truncated.
  write_shard_header(dir / "w.bin", kShardMagicU32, kShardVersionU32, 4, 4);
  std::string e = error_of([&] { ShardSet s({dir / "w.bin"}, "data.train"); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

// ---- the data manifest ------------------------------------------------------------------------

const char* kGoodManifest = R"({"tokenizer": {"name": "gpt2", "vocab_size": 50257, "hash": "ab"},
  "train": {"tokens": 30, "shards": [{"file": "train_000000.bin", "tokens": 20},
                                     {"file": "train_000001.bin", "tokens": 10}]},
  "val": {"tokens": 0, "shards": []}})";

TEST(DataManifest, AManifestKilnWritesParses) {
  DataManifest m = parse_data_manifest(kGoodManifest, "d/manifest.json");
  EXPECT_EQ(m.tokenizer, "gpt2");
  EXPECT_EQ(m.vocab_size, 50257);
  ASSERT_EQ(m.train.shards.size(), 2u);
  EXPECT_EQ(m.train.shards[1].tokens, 10);
}

TEST(DataManifest, BrokenManifestsAreRefusedNamingTheFileAndKey) {
  struct Case {
    std::string text, says;
  };
  const std::vector<Case> cases = {
      {"", "not valid JSON"},
      {"[1]", "not a JSON object"},
      {R"({"tokenizer": "gpt2"})", "tokenizer"},
      {R"({"tokenizer": {"name": 3, "vocab_size": 10}})", "tokenizer.name"},
      {R"({"tokenizer": {"name": "gpt2", "vocab_size": "50257"}})", "tokenizer.vocab_size"},
      {R"({"tokenizer": {"name": "gpt2", "vocab_size": 2000000}})", "tokenizer.vocab_size"},
      {R"({"tokenizer": {"name": "gpt2", "vocab_size": 1e300}})", "tokenizer.vocab_size"},
      {R"({"tokenizer": {"name": "gpt2", "vocab_size": 10}, "train": {"tokens": -5, "shards": []}})",
       "\"train\""},
      {R"({"tokenizer": {"name": "gpt2", "vocab_size": 10}, "val": {"tokens": 3, "shards": []}})",
       "its shards hold 0"},
      {R"({"tokenizer": {"name": "gpt2", "vocab_size": 10},
           "train": {"tokens": 1, "shards": [{"file": "../x.bin", "tokens": 1}]}})",
       "plain file name"},
  };
  for (const auto& c : cases) {
    std::string e = error_of([&] { parse_data_manifest(c.text, "d/manifest.json"); });
    EXPECT_NE(e.find("d/manifest.json"), std::string::npos) << c.text << " -> " << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << c.text << " -> " << e;
  }
}

TEST(DataManifest, AFifoOrDirectoryIsRefusedWithoutBlocking) {
  TempDir dir;
  std::string fifo = dir / "manifest.json";
  ASSERT_EQ(0, mkfifo(fifo.c_str(), 0600));
  std::string e = error_of([&] { read_data_manifest(fifo); });
  EXPECT_NE(e.find("FIFO"), std::string::npos) << e;
  e = error_of([&] { read_data_manifest(dir.path()); });
  EXPECT_NE(e.find("directory"), std::string::npos) << e;
}

}  // namespace
}  // namespace kiln
