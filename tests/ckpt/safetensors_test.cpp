#include "ckpt/safetensors.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kiln
