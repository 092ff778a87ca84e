// Sealed entries: what the remote tier stores. A shared store (a Redis every node can write) must not
// be able to make a process run code nobody in the deployment compiled, so each value carries an
// HMAC-SHA256 tag under the deployment secret, over the name it is filed under and the entry bytes:
//
//   0   char[8]  magic "KJITRS1\0"
//   8   u8[32]   HMAC-SHA256(secret, name || '\0' || entry)
//   40  ...      entry: exactly the disk encoding (entry.hpp), validated after the tag like a disk entry
//
// Binding the name means a valid value copied under another key or target is refused too.
#pragma once

#include <string>
#include <string_view>

namespace kjit::cache {

inline constexpr std::string_view kSealMagic{"KJITRS1\0", 8};
inline constexpr std::size_t kSealHeaderBytes = 8 + 32;

// The value to store under `name`.
std::string seal_entry(std::string_view secret, std::string_view name, std::string_view entry_bytes);

struct Unsealed {
  std::string_view entry;  // into the value; empty when refused
  std::string error;       // why the value is refused (empty when its tag is valid)
};

// Checks `value`'s magic and tag (in constant time); the entry bytes still need decoding and checking.
Unsealed unseal_entry(std::string_view secret, std::string_view name, std::string_view value);

}  // namespace kjit::cache
