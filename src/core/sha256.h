// SHA-256 through OpenSSL's libcrypto: the identity of data files and vocabularies.
#pragma once
#include <cstddef>
#include <string>

namespace kiln {

std::string sha256_hex(const void* data, size_t bytes);
// Streams the file; throws naming it if unreadable.
std::string sha256_file(const std::string& path);

}  // namespace kiln
