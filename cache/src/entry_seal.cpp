#include "kjit/cache/entry_seal.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <array>
#include <cstdint>
#include <memory>

#include "kjit/error.hpp"

namespace kjit::cache {
namespace {

using Tag = std::array<unsigned char, 32>;

// HMAC-SHA256(secret, name || '\0' || entry) through OpenSSL 3's EVP_MAC, without copying the entry.
Tag tag_of(std::string_view secret, std::string_view name, std::string_view entry) {
  struct MacFree {
    void operator()(EVP_MAC* m) const { EVP_MAC_free(m); }
  };
  struct CtxFree {
    void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
  };
  std::unique_ptr<EVP_MAC, MacFree> mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr));
  std::unique_ptr<EVP_MAC_CTX, CtxFree> ctx(mac ? EVP_MAC_CTX_new(mac.get()) : nullptr);
  if (!ctx) throw Error("kjit cache: OpenSSL has no HMAC (EVP_MAC_fetch failed)");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  const unsigned char zero = 0;
  Tag tag{};
  std::size_t len = 0;
  if (EVP_MAC_init(ctx.get(), reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), params) != 1 ||
      EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(name.data()), name.size()) != 1 ||
      EVP_MAC_update(ctx.get(), &zero, 1) != 1 ||
      EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(entry.data()), entry.size()) != 1 ||
      EVP_MAC_final(ctx.get(), tag.data(), &len, tag.size()) != 1 || len != tag.size())
    throw Error("kjit cache: OpenSSL failed to compute an HMAC-SHA256");
  return tag;
}

}  // namespace

std::string seal_entry(std::string_view secret, std::string_view name, std::string_view entry_bytes) {
  const Tag tag = tag_of(secret, name, entry_bytes);
  std::string out;
  out.reserve(kSealHeaderBytes + entry_bytes.size());
  out.append(kSealMagic);
  out.append(reinterpret_cast<const char*>(tag.data()), tag.size());
  out.append(entry_bytes);
  return out;
}

Unsealed unseal_entry(std::string_view secret, std::string_view name, std::string_view value) {
  Unsealed u;
  if (value.size() < kSealHeaderBytes || value.substr(0, kSealMagic.size()) != kSealMagic) {
    u.error = value.size() < kSealMagic.size() || value.substr(0, kSealMagic.size()) != kSealMagic
                  ? "it is not a sealed kjit entry (no KJITRS1 header, so no authentication tag)"
                  : "it is truncated inside its authentication tag";
    return u;
  }
  const std::string_view entry = value.substr(kSealHeaderBytes);
  const Tag expected = tag_of(secret, name, entry);
  if (CRYPTO_memcmp(expected.data(), value.data() + kSealMagic.size(), expected.size()) != 0) {
    u.error =
        "its authentication tag does not match (changed or truncated after sealing, sealed under another "
        "name, or sealed with another KJIT_REMOTE_CACHE_SECRET)";
    return u;
  }
  u.entry = entry;
  return u;
}

}  // namespace kjit::cache
