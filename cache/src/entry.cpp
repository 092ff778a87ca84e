// Binary encoding of one cache entry (layout in entry.hpp).
#include "kjit/cache/entry.hpp"

#include <cstring>
#include <limits>

#include "kjit/error.hpp"

namespace kjit::cache {
namespace {

constexpr char kMagic[8] = {'K', 'J', 'I', 'T', 'E', 'N', 'T', '\0'};
constexpr std::size_t kOffVersion = 8, kOffMetaLen = 12, kOffPayloadLen = 16, kOffKey = 24, kOffMetaSum = 88,
                      kOffPayloadSum = 120, kHeaderSize = 152;
static_assert(kOffKey + 64 == kOffMetaSum && kOffMetaSum + 32 == kOffPayloadSum && kOffPayloadSum + 32 == kHeaderSize);

void put_le(std::string& out, std::size_t at, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

std::uint64_t get_le(std::string_view in, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

DecodeResult reject(std::string why) {
  DecodeResult r;
  r.error = std::move(why);
  return r;
}

}  // namespace

std::string encode_entry(const Entry& e) {
  const std::string meta = metadata_to_json(e.meta);
  if (meta.size() > std::numeric_limits<std::uint32_t>::max())
    throw ValueError("cache entry metadata is " + std::to_string(meta.size()) +
                     " bytes; the entry format allows at most 4 GiB");
  const Digest meta_sum = Sha256::of(meta);
  const Digest payload_sum = Sha256::of(e.payload);
  const std::string key = e.key.hex();

  std::string out(kHeaderSize, '\0');
  out.reserve(kHeaderSize + meta.size() + e.payload.size());
  std::memcpy(&out[0], kMagic, sizeof kMagic);
  put_le(out, kOffVersion, static_cast<std::uint32_t>(CacheKey::kSchemaVersion), 4);
  put_le(out, kOffMetaLen, meta.size(), 4);
  put_le(out, kOffPayloadLen, e.payload.size(), 8);
  std::memcpy(&out[kOffKey], key.data(), 64);
  std::memcpy(&out[kOffMetaSum], meta_sum.data(), 32);
  std::memcpy(&out[kOffPayloadSum], payload_sum.data(), 32);
  out += meta;
  out += e.payload;
  return out;
}

DecodeResult decode_entry(std::string_view bytes, const CacheKey* expected_key) {
  const std::size_t size = bytes.size();
  if (size == 0) return reject("empty file (0 bytes)");
  if (size < kHeaderSize)
    return reject("truncated: " + std::to_string(size) + " bytes, shorter than the " + std::to_string(kHeaderSize) +
                  "-byte header");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return reject("bad magic: not a kjit cache entry");
  const std::uint64_t version = get_le(bytes, kOffVersion, 4);
  if (version != static_cast<std::uint64_t>(CacheKey::kSchemaVersion))
    return reject("unsupported format version " + std::to_string(version) + " (this kjit reads " +
                  std::to_string(CacheKey::kSchemaVersion) + ")");

  // Lengths are checked against the actual size before anything is allocated, without overflow:
  // M <= size - header, then P <= size - header - M.
  const std::uint64_t meta_len = get_le(bytes, kOffMetaLen, 4);
  const std::uint64_t payload_len = get_le(bytes, kOffPayloadLen, 8);
  const std::uint64_t body = size - kHeaderSize;
  const bool fits = meta_len <= body && payload_len <= body - meta_len;
  if (!fits || meta_len + payload_len != body) {
    std::string declared = "header declares " + std::to_string(meta_len) + " metadata bytes and " +
                           std::to_string(payload_len) + " payload bytes, file has " + std::to_string(body) +
                           " bytes after the header";
    return reject((fits ? "trailing bytes: " : "truncated: ") + declared);
  }

  Digest stored_key{};
  if (!from_hex(bytes.substr(kOffKey, 64), stored_key))
    return reject("malformed key field: not 64 lowercase hex digits");
  const CacheKey key(stored_key);
  if (expected_key && key != *expected_key)
    return reject("key mismatch: the file holds " + key.hex() + ", expected " + expected_key->hex());

  const std::string_view meta = bytes.substr(kHeaderSize, meta_len);
  const std::string_view payload = bytes.substr(kHeaderSize + meta_len, payload_len);
  DecodeResult r;
  try {
    if (std::memcmp(Sha256::of(meta).data(), bytes.data() + kOffMetaSum, 32) != 0)
      return reject("metadata checksum mismatch");
    if (std::memcmp(Sha256::of(payload).data(), bytes.data() + kOffPayloadSum, 32) != 0)
      return reject("payload checksum mismatch");
    Entry e;
    e.key = key;
    e.meta = metadata_from_json(meta);
    e.payload.assign(payload.data(), payload.size());
    r.entry = std::move(e);
  } catch (const ValueError& ex) {
    return reject(std::string("malformed metadata: ") + ex.what());
  } catch (const std::exception& ex) {  // OpenSSL failure, out of memory: still only a rejection
    return reject(std::string("cannot validate: ") + ex.what());
  }
  return r;
}

}  // namespace kjit::cache
