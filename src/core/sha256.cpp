#include "core/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "core/error.h"

namespace kiln {
namespace {

struct Digest {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), EVP_MD_CTX_free};
  Digest() {
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
      fail("OpenSSL could not start a SHA-256 digest");
  }
  void update(const void* p, size_t n) { EVP_DigestUpdate(ctx.get(), p, n); }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx.get(), md, &len);
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; i++) {
      out.push_back(digits[md[i] >> 4]);
      out.push_back(digits[md[i] & 15]);
    }
    return out;
  }
};

}  // namespace

std::string sha256_hex(const void* data, size_t bytes) {
  Digest d;
  d.update(data, bytes);
  return d.hex();
}

std::string sha256_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read {}: {}", path, std::strerror(errno));
  Digest d;
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    d.update(buf.data(), static_cast<size_t>(f.gcount()));
  }
  return d.hex();
}

}  // namespace kiln
