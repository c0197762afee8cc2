#include "ckpt/safetensors.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::testing::error_of;
using kiln::testing::TempDir;

void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << data;
}

TEST(SafeTensors, RoundTripKeepsNamesShapesValuesAndMetadata) {
  TempDir dir;
  std::vector<float> a{1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, 7.0f};
  std::vector<int32_t> b{1, 2, 3};
  write_safetensors(dir / "t.safetensors",
                    {{"a.weight", "F32", {2, 3}, a.data()}, {"ids", "I32", {3}, b.data()}},
                    {{"format", "pt"}});
  SafeTensorsReader r(dir / "t.safetensors");
  EXPECT_EQ(r.metadata().at("format"), "pt");
  std::vector<float> a2(6);
  r.read_f32("a.weight", {2, 3}, a2.data());
  EXPECT_EQ(0, std::memcmp(a.data(), a2.data(), 24));
  EXPECT_EQ(r.read_i32("ids"), b);
}

TEST(SafeTensors, HeaderIsPaddedToEightBytes) {
  TempDir dir;
  float x = 1;
  write_safetensors(dir / "t.safetensors", {{"x", "F32", {1}, &x}}, {});
  std::ifstream f(dir / "t.safetensors", std::ios::binary);
  uint64_t n;
  f.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
}

TEST(SafeTensors, ReadsF64AndBf16AsFloat) {
  TempDir dir;
  double d[2] = {0.5, -4.0};
  uint16_t bf[2] = {0x3f80, 0xc000};  // 1.0, -2.0
  std::string data(reinterpret_cast<char*>(d), 16);
  data.append(reinterpret_cast<char*>(bf), 4);
  write_raw(dir / "t.safetensors",
            R"({"d":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},)"
            R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]}})",
            data);
  SafeTensorsReader r(dir / "t.safetensors");
  float out[2];
  r.read_f32("d", {2}, out);
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[1], -4.0f);
  r.read_f32("b", {2}, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
}

TEST(SafeTensors, BrokenHeaderIsAClearError) {
  TempDir dir;
  write_raw(dir / "bad.safetensors", "{not json", "");
  std::string e = error_of([&] { SafeTensorsReader r(dir / "bad.safetensors"); });
  EXPECT_NE(e.find("bad.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("broken safetensors header"), std::string::npos) << e;
}

TEST(SafeTensors, HeaderLongerThanFileIsAClearError) {
  TempDir dir;
  std::ofstream f(dir / "short.safetensors", std::ios::binary);
  uint64_t n = 1000;
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << "{}";
  f.close();
  std::string e = error_of([&] { SafeTensorsReader r(dir / "short.safetensors"); });
  EXPECT_NE(e.find("claims 1000 bytes"), std::string::npos) << e;
}

TEST(SafeTensors, OffsetsOutsideTheFileNameTheTensor) {
  TempDir dir;
  write_raw(dir / "t.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
            std::string(8, '\0'));
  std::string e = error_of([&] { SafeTensorsReader r(dir / "t.safetensors"); });
  EXPECT_NE(e.find("'w'"), std::string::npos) << e;
}

TEST(SafeTensors, WrongShapeNamesTheTensorAndBothShapes) {
  TempDir dir;
  std::vector<float> a(6, 1.0f);
  write_safetensors(dir / "t.safetensors", {{"h.0.attn.c_attn.weight", "F32", {2, 3}, a.data()}},
                    {});
  SafeTensorsReader r(dir / "t.safetensors");
  std::vector<float> out(6);
  std::string e = error_of([&] { r.read_f32("h.0.attn.c_attn.weight", {3, 2}, out.data()); });
  EXPECT_NE(e.find("h.0.attn.c_attn.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("(2, 3)"), std::string::npos) << e;
  EXPECT_NE(e.find("(3, 2)"), std::string::npos) << e;
}

TEST(SafeTensors, MissingTensorIsNamed) {
  TempDir dir;
  float x = 1;
  write_safetensors(dir / "t.safetensors", {{"x", "F32", {1}, &x}}, {});
  SafeTensorsReader r(dir / "t.safetensors");
  std::string e = error_of([&] { r.entry("ln_f.weight"); });
  EXPECT_NE(e.find("ln_f.weight"), std::string::npos) << e;
}

// ---- the format's own checks (each file here loaded, or loaded wrong, before they existed) ----

// The message of opening `file`, which must name the file and (when given) the tensor.
std::string refusal(const std::string& file, const std::string& tensor = "") {
  std::string e = error_of([&] { SafeTensorsReader r(file); });
  EXPECT_FALSE(e.empty()) << file << " was accepted";
  EXPECT_NE(e.find(file), std::string::npos) << e;
  if (!tensor.empty()) {
    EXPECT_NE(e.find("'" + tensor + "'"), std::string::npos) << e;
  }
  return e;
}

TEST(SafeTensors, OverlappingTensorBytesAreRefusedNamingBothTensors) {
  TempDir dir;
  // c_proj.weight's last 8 bytes are also the first 8 of c_proj.bias.
  write_raw(dir / "t.safetensors",
            R"({"h.0.attn.c_proj.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
            R"("h.0.attn.c_proj.bias":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
            std::string(24, '\0'));
  std::string e = refusal(dir / "t.safetensors", "h.0.attn.c_proj.bias");
  EXPECT_NE(e.find("overlaps"), std::string::npos) << e;
  EXPECT_NE(e.find("h.0.attn.c_proj.weight"), std::string::npos) << e;
}

TEST(SafeTensors, TwoTensorsOnTheSameBytesAreRefused) {
  TempDir dir;
  write_raw(dir / "t.safetensors",
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
            std::string(8, '\0'));
  refusal(dir / "t.safetensors", "b");
}

TEST(SafeTensors, BytesBetweenTensorsThatBelongToNoneAreRefused) {
  TempDir dir;
  write_raw(dir / "t.safetensors",
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
            std::string(12, '\0'));
  std::string e = refusal(dir / "t.safetensors", "b");
  EXPECT_NE(e.find("belong to no tensor"), std::string::npos) << e;
}

TEST(SafeTensors, BytesAfterTheLastTensorAreRefused) {
  TempDir dir;
  write_raw(dir / "t.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
            std::string(8, '\0'));
  std::string e = refusal(dir / "t.safetensors", "a");
  EXPECT_NE(e.find("belong to no tensor"), std::string::npos) << e;
}

TEST(SafeTensors, ShapeWhoseByteCountOverflowsIsRefused) {
  TempDir dir;
  // 2^62 * 4 elements of 4 bytes wrap to 0 bytes in 64 bits: before the check, [0, 0] matched.
  write_raw(dir / "t.safetensors",
            R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", "");
  std::string e = refusal(dir / "t.safetensors", "w");
  EXPECT_NE(e.find("overflows"), std::string::npos) << e;
  SafeTensorEntry big{"F32", {int64_t{1} << 62, 4}, 0, 0};
  EXPECT_NE(error_of([&] { big.numel(); }), "");
}

TEST(SafeTensors, OffsetsAndDimensionsMustBeNonNegativeIntegers) {
  TempDir dir;
  const std::vector<std::string> headers = {
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})",
      R"({"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,4]}})",
      R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,1e300]}})",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})",
      R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})",
      R"({"w":{"dtype":"F32","shape":[1]}})",
      R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})",
      R"({"w":[1,2]})",
  };
  for (const auto& h : headers) {
    write_raw(dir / "t.safetensors", h, std::string(4, '\0'));
    refusal(dir / "t.safetensors", "w");
  }
}

TEST(SafeTensors, DuplicateTensorNamesAreRefused) {
  TempDir dir;
  write_raw(dir / "t.safetensors",
            R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
            R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
            std::string(8, '\0'));
  std::string e = refusal(dir / "t.safetensors", "w");
  EXPECT_NE(e.find("twice"), std::string::npos) << e;
}

TEST(SafeTensors, MetadataMustMapStringsToStrings) {
  TempDir dir;
  for (const std::string meta : {R"({"step":3})", R"("pt")", R"({"a":{"b":"c"}})"}) {
    write_raw(
        dir / "t.safetensors",
        R"({"__metadata__":)" + meta + R"(,"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
        std::string(4, '\0'));
    std::string e = refusal(dir / "t.safetensors");
    EXPECT_NE(e.find("__metadata__"), std::string::npos) << e;
  }
}

TEST(SafeTensors, HeaderMustBeAJsonObjectStartingWithABrace) {
  TempDir dir;
  for (const std::string h : {R"( {})", R"([])", R"("w")", ""}) {
    write_raw(dir / "t.safetensors", h, "");
    refusal(dir / "t.safetensors");
  }
}

TEST(SafeTensors, HeaderLargerThanTheFormatLimitIsRefusedUnread) {
  TempDir dir;
  // A sparse file of 100 MB + 16 whose header claims 100 MB + 1.
  std::string path = dir / "big.safetensors";
  {
    std::ofstream f(path, std::ios::binary);
    uint64_t n = kSafeTensorsMaxHeaderBytes + 1;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "{";
  }
  ASSERT_EQ(0, truncate(path.c_str(), kSafeTensorsMaxHeaderBytes + 16));
  std::string e = refusal(path);
  EXPECT_NE(e.find("limit"), std::string::npos) << e;
}

TEST(SafeTensors, EmptyTensorsAndTrailingHeaderSpacesAreAccepted) {
  TempDir dir;
  int32_t v = 7;
  write_raw(dir / "t.safetensors",
            R"({"e":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},)"
            R"("v":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}   )",
            std::string(reinterpret_cast<char*>(&v), 4));
  SafeTensorsReader r(dir / "t.safetensors");
  EXPECT_EQ(r.entry("e").numel(), 0);
  EXPECT_TRUE(r.read_f64("e").empty());
  EXPECT_EQ(r.read_i32("v"), std::vector<int32_t>{7});
}

TEST(SafeTensors, AFifoOrADirectoryIsRefusedWithoutBlocking) {
  TempDir dir;
  std::string fifo = dir / "model.safetensors";
  ASSERT_EQ(0, mkfifo(fifo.c_str(), 0600));
  EXPECT_NE(refusal(fifo).find("FIFO"), std::string::npos);
  EXPECT_NE(refusal(dir.path()).find("directory"), std::string::npos);
}

TEST(SafeTensors, EveryFileKilnWritesPassesTheChecks) {
  TempDir dir;
  std::vector<float> a(6, 1.0f), empty;
  std::vector<int32_t> b{1, 2, 3};
  write_safetensors(dir / "t.safetensors",
                    {{"a", "F32", {2, 3}, a.data()},
                     {"none", "F32", {0}, empty.data()},
                     {"b", "I32", {3}, b.data()}},
                    {{"format", "pt"}});
  SafeTensorsReader r(dir / "t.safetensors");
  EXPECT_EQ(r.entries().size(), 3u);
  SafeTensorsReader fixture(kiln::testing::source_path("tests/fixtures/gpt2_tiny_ref.safetensors"));
  EXPECT_FALSE(fixture.entries().empty());
}

}  // namespace
}  // namespace kiln
