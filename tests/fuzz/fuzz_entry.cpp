// libFuzzer target: cache entry files as a load reads them (decode_entry, check_entry_bytes).
//
// A load must turn any bytes into either an entry or a rejection with a reason: it never throws,
// crashes or allocates more than the file. The input is tried twice:
//   1. as it is, with and without an expected key (magic, version, lengths, key field, checksums);
//   2. with the header's lengths made consistent and both SHA-256 fields recomputed, so that the
//      fuzzer gets past the checksums into the metadata parser and the target check, where a damaged
//      entry with a matching checksum (a bug in a writer, a hand-edited file) would land.
// Whatever decodes must encode again into bytes that decode to the same entry.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "kjit/cache/cache_key.hpp"
#include "kjit/cache/entry.hpp"
#include "kjit/cache/entry_check.hpp"
#include "kjit/cache/sha256.hpp"

namespace {

using namespace kjit::cache;

// The header layout of entry.hpp, for the checksum fix-up.
constexpr std::size_t kOffMetaLen = 12, kOffPayloadLen = 16, kOffKey = 24, kOffMetaSum = 88, kOffPayloadSum = 120,
                      kHeaderSize = 152;

[[noreturn]] void finding(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "fuzz_entry: %s %s\n", what, detail.c_str());
  std::abort();
}

std::uint64_t get_le(const std::string& s, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= std::uint64_t(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}
void put_le(std::string& s, std::size_t at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

void expect_well_formed(const DecodeResult& r) {
  if (r.entry.has_value() == !r.error.empty())
    finding("a DecodeResult must hold either an entry or a reason, not both or neither:", r.error);
}

// Encoding what was decoded gives bytes that decode to the same entry (encoding is canonical).
void expect_round_trip(const Entry& e) {
  const std::string once = encode_entry(e);
  const DecodeResult back = check_entry_bytes(once, e.key, filed_target(e.meta));
  if (!back.entry) finding("a decoded entry, encoded again, does not decode:", back.error);
  if (encode_entry(*back.entry) != once) finding("encode(decode(encode(e))) != encode(e)");
}

void decode_as_found(std::string_view bytes) {
  const DecodeResult any = decode_entry(bytes);
  expect_well_formed(any);
  const CacheKey expected(Sha256::of("kjit-fuzz-key"));
  const DecodeResult keyed = decode_entry(bytes, &expected);
  expect_well_formed(keyed);
  if (any.entry) {
    const DecodeResult own = check_entry_bytes(bytes, any.entry->key, filed_target(any.entry->meta));
    if (!own.entry) finding("an entry decodes without a key but not with its own key and target:", own.error);
  }
}

void decode_with_valid_checksums(std::string_view input) {
  if (input.size() < kHeaderSize) return;
  std::string bytes(input);
  const std::uint64_t body = bytes.size() - kHeaderSize;
  const std::uint64_t meta_len = get_le(bytes, kOffMetaLen, 4);
  if (meta_len > body) return;  // only the length check to see here, and pass 1 saw it
  put_le(bytes, kOffPayloadLen, body - meta_len, 8);
  const std::string_view view(bytes);
  const Digest meta_sum = Sha256::of(view.substr(kHeaderSize, meta_len));
  const Digest payload_sum = Sha256::of(view.substr(kHeaderSize + meta_len));
  std::memcpy(&bytes[kOffMetaSum], meta_sum.data(), 32);
  std::memcpy(&bytes[kOffPayloadSum], payload_sum.data(), 32);

  Digest stored{};
  const CacheKey key = from_hex(view.substr(kOffKey, 64), stored) ? CacheKey(stored) : CacheKey();
  const DecodeResult r = check_entry_bytes(bytes, key, "sm_90");
  expect_well_formed(r);
  const DecodeResult any = decode_entry(bytes, &key);
  expect_well_formed(any);
  if (any.entry) expect_round_trip(*any.entry);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  decode_as_found(bytes);
  decode_with_valid_checksums(bytes);
  return 0;
}
