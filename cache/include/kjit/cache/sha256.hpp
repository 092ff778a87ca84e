// SHA-256 through OpenSSL's EVP interface (RAII over EVP_MD_CTX).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kjit::cache {

using Digest = std::array<std::uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& update(const void* data, std::size_t size);
  Sha256& update(std::string_view bytes) { return update(bytes.data(), bytes.size()); }
  // Finishes the digest; the object must not be updated afterwards.
  Digest finish();

  static Digest of(std::string_view bytes);

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

std::string to_hex(const Digest& digest);
// Parses 64 lowercase hex digits; false when `hex` is not such a string.
bool from_hex(std::string_view hex, Digest& out);

}  // namespace kjit::cache
