#include "kjit/cache/sha256.hpp"

#include <openssl/evp.h>

#include "kjit/error.hpp"

namespace kjit::cache {

// Owns the EVP context: EVP_MD_CTX_free runs on every path (normal, exception, early destruction).
struct Sha256::Ctx {
  struct Free {
    void operator()(EVP_MD_CTX* p) const noexcept { EVP_MD_CTX_free(p); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> md;
  bool finished = false;
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  ctx_->md.reset(EVP_MD_CTX_new());
  if (!ctx_->md) throw Error("SHA-256: OpenSSL could not allocate a digest context (out of memory?)");
  if (EVP_DigestInit_ex(ctx_->md.get(), EVP_sha256(), nullptr) != 1)
    throw Error(
        "SHA-256: OpenSSL refused to initialise the digest (EVP_DigestInit_ex failed); "
        "check that the OpenSSL default provider is available");
}

Sha256::~Sha256() = default;

Sha256& Sha256::update(const void* data, std::size_t size) {
  if (ctx_->finished) throw Error("SHA-256: update() after finish(); create a new Sha256 object");
  if (size == 0) return *this;
  if (EVP_DigestUpdate(ctx_->md.get(), data, size) != 1) throw Error("SHA-256: EVP_DigestUpdate failed");
  return *this;
}

Digest Sha256::finish() {
  if (ctx_->finished) throw Error("SHA-256: finish() called twice; create a new Sha256 object");
  ctx_->finished = true;
  Digest out{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_->md.get(), out.data(), &len) != 1 || len != out.size())
    throw Error("SHA-256: EVP_DigestFinal_ex failed");
  return out;
}

Digest Sha256::of(std::string_view bytes) { return Sha256().update(bytes).finish(); }

std::string to_hex(const Digest& digest) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(digest.size() * 2, '0');
  for (std::size_t i = 0; i < digest.size(); ++i) {
    out[2 * i] = kDigits[digest[i] >> 4];
    out[2 * i + 1] = kDigits[digest[i] & 0xf];
  }
  return out;
}

namespace {
int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // uppercase is rejected on purpose: keys have one spelling
}
}  // namespace

bool from_hex(std::string_view hex, Digest& out) {
  if (hex.size() != out.size() * 2) return false;
  Digest d{};
  for (std::size_t i = 0; i < d.size(); ++i) {
    int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    d[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  out = d;
  return true;
}

}  // namespace kjit::cache
