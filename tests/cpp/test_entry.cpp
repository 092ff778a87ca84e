// Entry encoding: round trip, and every kind of damage is rejected with a reason, never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "cache_test_helpers.hpp"
#include "kjit/cache/entry.hpp"
#include "kjit/cache/entry_metadata_fields.hpp"
#include "kjit/error.hpp"
#include "test_support.hpp"

using namespace kjit::cache;
using kjit::testing::key_for;
using kjit::testing::make_entry;
using kjit::testing::same_entry;
using kjit::testing::same_metadata;

namespace {

constexpr std::size_t kHeader = 152;

std::uint64_t read_le(const std::string& s, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= std::uint64_t(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}
void write_le(std::string& s, std::size_t at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s[at + i] = static_cast<char>(v >> (8 * i));
}

// Builds an entry file by hand with the given parts; checksums are computed unless overridden.
std::string raw_entry(const std::string& key_hex, const std::string& meta, const std::string& payload,
                      std::uint32_t version = 1) {
  std::string out(kHeader, '\0');
  std::memcpy(&out[0], "KJITENT\0", 8);
  write_le(out, 8, version, 4);
  write_le(out, 12, meta.size(), 4);
  write_le(out, 16, payload.size(), 8);
  std::memcpy(&out[24], key_hex.data(), 64);
  std::memcpy(&out[88], Sha256::of(meta).data(), 32);
  std::memcpy(&out[120], Sha256::of(payload).data(), 32);
  return out + meta + payload;
}

DecodeResult decode_expecting(const std::string& bytes, const Entry& e) { return decode_entry(bytes, &e.key); }

void expect_rejected(const DecodeResult& r, const std::string& reason_part) {
  EXPECT_FALSE(r.entry.has_value());
  EXPECT_NE(r.error.find(reason_part), std::string::npos)
      << "error '" << r.error << "' does not mention '" << reason_part << "'";
}

}  // namespace

TEST(Entry, RoundTrip) {
  Entry e = make_entry("entry-roundtrip", "sm_90a", 1000);
  e.meta.note = "PTX fallback: \"quoted\" \\ and unicode \xc3\xa9";
  e.meta.output = OutputKind::Ptx;
  const std::string bytes = encode_entry(e);
  const DecodeResult r = decode_expecting(bytes, e);
  ASSERT_TRUE(r.entry) << r.error;
  EXPECT_TRUE(r.error.empty());
  EXPECT_TRUE(same_entry(*r.entry, e));
  // Without an expected key the file's own key is used.
  const DecodeResult r2 = decode_entry(bytes);
  ASSERT_TRUE(r2.entry) << r2.error;
  EXPECT_EQ(r2.entry->key, e.key);
}

TEST(Entry, EmptyPayloadAndEmptyFieldsRoundTrip) {
  Entry e;
  e.key = key_for("entry-empty");
  const DecodeResult r = decode_expecting(encode_entry(e), e);
  ASSERT_TRUE(r.entry) << r.error;
  EXPECT_TRUE(same_entry(*r.entry, e));
}

TEST(Entry, FileLayoutMatchesTheSpec) {
  const Entry e = make_entry("entry-layout", "sm_90", 77);
  const std::string bytes = encode_entry(e);
  const std::string meta = metadata_to_json(e.meta);
  ASSERT_EQ(bytes.size(), kHeader + meta.size() + 77);
  EXPECT_EQ(std::memcmp(bytes.data(), "KJITENT\0", 8), 0);
  EXPECT_EQ(read_le(bytes, 8, 4), 1u);
  EXPECT_EQ(read_le(bytes, 12, 4), meta.size());
  EXPECT_EQ(read_le(bytes, 16, 8), 77u);
  EXPECT_EQ(bytes.substr(24, 64), e.key.hex());
  EXPECT_EQ(std::memcmp(&bytes[88], Sha256::of(meta).data(), 32), 0);
  EXPECT_EQ(std::memcmp(&bytes[120], Sha256::of(e.payload).data(), 32), 0);
  EXPECT_EQ(bytes.substr(kHeader, meta.size()), meta);
  EXPECT_EQ(bytes.substr(kHeader + meta.size()), e.payload);
  EXPECT_EQ(raw_entry(e.key.hex(), meta, e.payload), bytes);
}

TEST(Entry, MetadataJsonRoundTrip) {
  Entry e = make_entry("entry-json");
  e.meta.output = OutputKind::Ptx;
  e.meta.note = "line\nbreak";
  e.meta.options.push_back("");
  const std::string json = metadata_to_json(e.meta);
  EXPECT_NE(json.find("\"name_expression\":\"add<float, 4>\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"output\":\"ptx\""), std::string::npos) << json;
  EXPECT_TRUE(same_metadata(metadata_from_json(json), e.meta));
}

TEST(Entry, MetadataFromJsonRejectsMalformed) {
  const std::string good = metadata_to_json(make_entry("entry-json-bad").meta);
  auto rejects = [](const std::string& json, const std::string& part) {
    try {
      metadata_from_json(json);
      ADD_FAILURE() << "accepted: " << json;
    } catch (const kjit::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  rejects("", "not valid JSON");
  rejects("{\"kernel\":", "not valid JSON");
  rejects("[1,2]", "must be a JSON object");
  rejects("{}", "'template'");
  std::string wrong_type = good;
  wrong_type.replace(wrong_type.find("\"kernel\":\"add\""), 14, "\"kernel\":7");
  rejects(wrong_type, "'kernel' must be a string, got number");
  std::string bad_output = good;
  bad_output.replace(bad_output.find("\"output\":\"cubin\""), 16, "\"output\":\"elf\"");
  rejects(bad_output, "'output' must be \"cubin\" or \"ptx\"");
  std::string bad_options = good;
  bad_options.replace(bad_options.find("\"options\":["), 11, "\"options\":[1,");
  rejects(bad_options, "'options' must be an array of strings");
  rejects(std::string(100000, '['), "nested deeper");
}

// The field table names every field of the JSON block once, in the order a block is read (and
// Kernel.meta lists them): the entry format.
TEST(EntryMetadataFields, NameEveryJsonFieldOnceInTheOrderRead) {
  std::vector<std::string> names;
  for (const EntryMetadataField& f : entry_metadata_fields()) names.push_back(f.name);
  EXPECT_EQ(names, (std::vector<std::string>{"template", "template_digest", "kernel", "name_expression", "lowered_name",
                                             "options", "target", "requested_target", "nvrtc_version", "output", "note",
                                             "compile_ms", "created", "kjit_version"}));
  const nlohmann::json j = nlohmann::json::parse(metadata_to_json(make_entry("fields-names").meta));
  std::set<std::string> written;
  for (auto it = j.begin(); it != j.end(); ++it) written.insert(it.key());
  EXPECT_EQ(written, std::set<std::string>(names.begin(), names.end()));
  EXPECT_EQ(written.size(), names.size()) << "a name twice";
}

// Each row reads and writes its own member: a value set through one row comes back through the JSON
// block in that row alone, of the row's kind.
TEST(EntryMetadataFields, EachRowRoundTripsItsOwnMember) {
  const EntryMetadata plain;
  for (const EntryMetadataField& f : entry_metadata_fields()) {
    EXPECT_EQ(f.get(plain).index(), static_cast<std::size_t>(f.kind)) << f.name;
    MetadataValue v;
    switch (f.kind) {
      case EntryMetadataField::Kind::Text: v = "value of " + f.name; break;
      case EntryMetadataField::Kind::TextList: v = std::vector<std::string>{"a", f.name}; break;
      case EntryMetadataField::Kind::Output: v = OutputKind::Ptx; break;
      case EntryMetadataField::Kind::Number: v = 41.5; break;
    }
    EntryMetadata m;
    f.set(m, v);
    const EntryMetadata back = metadata_from_json(metadata_to_json(m));
    EXPECT_TRUE(f.get(back) == v) << f.name;
    for (const EntryMetadataField& g : entry_metadata_fields())
      if (g.name != f.name) EXPECT_TRUE(g.get(back) == g.get(plain)) << f.name << " changed " << g.name;
  }
}

// Entries and metadata blocks that kjit wrote before (the fuzz seeds, made by its writers) read and
// write back byte for byte: the field table changed no byte of the format.
TEST(Entry, EntriesWrittenBeforeReadAndWriteBackByteForByte) {
  namespace fs = std::filesystem;
  const fs::path corpus = fs::path(KJIT_TEST_SOURCE_DIR) / "tests" / "fuzz" / "corpus";
  std::size_t seen = 0;
  for (const auto& e : fs::directory_iterator(corpus / "entry")) {
    if (e.path().filename().string().rfind("valid_", 0) != 0) continue;
    const std::string bytes = kjit::testing::read_file(e.path());
    const DecodeResult r = decode_entry(bytes);
    ASSERT_TRUE(r.entry) << e.path() << ": " << r.error;
    EXPECT_EQ(encode_entry(*r.entry), bytes) << e.path();
    ++seen;
  }
  for (const auto& e : fs::directory_iterator(corpus / "metadata")) {
    if (e.path().filename().string().rfind("valid_", 0) != 0) continue;
    const std::string text = kjit::testing::read_file(e.path());
    EXPECT_EQ(metadata_to_json(metadata_from_json(text)), text) << e.path();
    ++seen;
  }
  EXPECT_GE(seen, 5u) << "no seeds under " << corpus;
}

TEST(Entry, NonFiniteCompileTimeStillDecodes) {
  Entry e = make_entry("entry-nan");
  e.meta.compile_ms = std::nan("");
  const DecodeResult r = decode_expecting(encode_entry(e), e);
  ASSERT_TRUE(r.entry) << r.error;
  EXPECT_EQ(r.entry->meta.compile_ms, 0.0);
}

TEST(Entry, InvalidUtf8InMetadataDoesNotBreakEncoding) {
  Entry e = make_entry("entry-utf8");
  e.meta.options.push_back("-DX=\xff\xfe");
  std::string bytes;
  ASSERT_NO_THROW(bytes = encode_entry(e));
  const DecodeResult r = decode_expecting(bytes, e);
  ASSERT_TRUE(r.entry) << r.error;
  EXPECT_EQ(r.entry->payload, e.payload);
}

TEST(Entry, TruncatedAtEveryLengthIsRejected) {
  const Entry e = make_entry("entry-trunc", "sm_90", 40);
  const std::string bytes = encode_entry(e);
  for (std::size_t len = 0; len < bytes.size(); ++len) {
    const DecodeResult r = decode_expecting(bytes.substr(0, len), e);
    EXPECT_FALSE(r.entry) << "accepted a prefix of " << len << " bytes";
    EXPECT_FALSE(r.error.empty()) << len;
    if (len > 0 && len < kHeader) {
      EXPECT_NE(r.error.find("truncated"), std::string::npos) << r.error;
    }
  }
  expect_rejected(decode_expecting(bytes.substr(0, bytes.size() - 1), e), "truncated");
}

TEST(Entry, ZeroLengthIsRejected) { expect_rejected(decode_entry(""), "empty"); }

TEST(Entry, OneFlippedPayloadByteIsRejected) {
  const Entry e = make_entry("entry-flip-payload", "sm_90", 50);
  const std::string bytes = encode_entry(e);
  for (std::size_t i = bytes.size() - 50; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    expect_rejected(decode_expecting(bad, e), "payload checksum mismatch");
  }
}

TEST(Entry, OneFlippedMetadataByteIsRejected) {
  const Entry e = make_entry("entry-flip-meta");
  const std::string bytes = encode_entry(e);
  const std::size_t meta_len = metadata_to_json(e.meta).size();
  for (std::size_t i = kHeader; i < kHeader + meta_len; ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    expect_rejected(decode_expecting(bad, e), "metadata checksum mismatch");
  }
}

TEST(Entry, AnyFlippedByteIsRejected) {
  const Entry e = make_entry("entry-flip-any", "sm_90", 16);
  const std::string bytes = encode_entry(e);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      const DecodeResult r = decode_expecting(bad, e);
      EXPECT_FALSE(r.entry) << "flip of bit " << bit << " at byte " << i << " was accepted";
      EXPECT_FALSE(r.error.empty());
    }
  }
}

TEST(Entry, GarbageMetadataWithCorrectChecksumIsMalformed) {
  const Entry e = make_entry("entry-garbage-meta");
  const std::vector<std::string> garbage = {"not json at all",       "{\"kernel\": \"add\"", "[]", "{}", "null",
                                            std::string("\0\1\2", 3)};
  for (const std::string& meta : garbage) {
    const std::string bytes = raw_entry(e.key.hex(), meta, e.payload);
    expect_rejected(decode_expecting(bytes, e), "malformed metadata");
  }
}

TEST(Entry, WrongMagicIsRejected) {
  const Entry e = make_entry("entry-magic");
  std::string bytes = encode_entry(e);
  bytes[0] = 'X';
  expect_rejected(decode_expecting(bytes, e), "bad magic");
  expect_rejected(decode_expecting(std::string(500, 'A'), e), "bad magic");
}

TEST(Entry, WrongVersionIsRejected) {
  const Entry e = make_entry("entry-version");
  const std::string meta = metadata_to_json(e.meta);
  expect_rejected(decode_expecting(raw_entry(e.key.hex(), meta, e.payload, 2), e), "unsupported format version 2");
  expect_rejected(decode_expecting(raw_entry(e.key.hex(), meta, e.payload, 0), e), "unsupported format version 0");
}

TEST(Entry, TrailingBytesAreRejected) {
  const Entry e = make_entry("entry-trailing");
  expect_rejected(decode_expecting(encode_entry(e) + "x", e), "trailing bytes");
  expect_rejected(decode_expecting(encode_entry(e) + std::string(4096, '\0'), e), "trailing bytes");
}

TEST(Entry, KeyMismatchIsRejected) {
  const Entry e = make_entry("entry-key");
  const CacheKey other = key_for("entry-key-other");
  const DecodeResult r = decode_entry(encode_entry(e), &other);
  expect_rejected(r, "key mismatch");
  EXPECT_NE(r.error.find(e.key.hex()), std::string::npos) << r.error;
  EXPECT_NE(r.error.find(other.hex()), std::string::npos) << r.error;
}

TEST(Entry, MalformedKeyFieldIsRejected) {
  const Entry e = make_entry("entry-key-field");
  std::string upper = e.key.hex();
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::string bytes = raw_entry(upper, metadata_to_json(e.meta), e.payload);
  expect_rejected(decode_entry(bytes), "malformed key field");
}

TEST(Entry, HugeDeclaredLengthsAreRejectedWithoutAllocating) {
  const Entry e = make_entry("entry-huge");
  const std::string good = encode_entry(e);
  const std::uint64_t meta_len = read_le(good, 12, 4);
  struct Case {
    std::uint64_t m, p;
  };
  const std::uint64_t max64 = std::numeric_limits<std::uint64_t>::max();
  for (const Case c : {Case{0xFFFFFFFFu, 64}, Case{meta_len, max64}, Case{0xFFFFFFFFu, max64},
                       Case{meta_len, max64 - meta_len + 1},  // m + p wraps around to a small value
                       Case{meta_len + 64 + 1, max64}, Case{0, 0}}) {
    std::string bad = good;
    write_le(bad, 12, c.m, 4);
    write_le(bad, 16, c.p, 8);
    const DecodeResult r = decode_expecting(bad, e);
    EXPECT_FALSE(r.entry) << c.m << " " << c.p;
    EXPECT_TRUE(r.error.find("truncated") != std::string::npos || r.error.find("trailing") != std::string::npos)
        << r.error;
  }
}

TEST(Entry, RandomDamageNeverCrashesAndIsAlwaysRejected) {
  const Entry e = make_entry("entry-fuzz", "sm_90", 200);
  const std::string good = encode_entry(e);
  std::mt19937 rng(12345);
  for (int round = 0; round < 3000; ++round) {
    std::string bad = good;
    switch (round % 4) {
      case 0:  // a few random bytes overwritten
        for (int k = 0; k < 1 + int(rng() % 4); ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
        break;
      case 1:  // cut somewhere
        bad.resize(rng() % bad.size());
        break;
      case 2:  // bytes inserted somewhere
        bad.insert(rng() % bad.size(), std::string(1 + rng() % 8, static_cast<char>(rng())));
        break;
      case 3:  // pure garbage of random length, sometimes with our magic
        bad.assign(rng() % 600, '\0');
        for (auto& c : bad) c = static_cast<char>(rng());
        if (bad.size() >= 12 && rng() % 2) {
          std::memcpy(&bad[0], "KJITENT\0", 8);
          write_le(bad, 8, 1, 4);
        }
        break;
    }
    if (bad == good) continue;
    DecodeResult r;
    ASSERT_NO_THROW(r = decode_expecting(bad, e));
    EXPECT_FALSE(r.entry) << "round " << round;
    EXPECT_FALSE(r.error.empty());
  }
}
