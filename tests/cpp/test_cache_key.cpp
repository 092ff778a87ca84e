// CacheKey and Sha256: stability, sensitivity to every field, no ambiguity between fields.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>

#include "kjit/cache/cache_key.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/error.hpp"

using kjit::cache::CacheKey;
using kjit::cache::Digest;
using kjit::cache::KeyInputs;
using kjit::cache::OutputKind;
using kjit::cache::Sha256;

namespace {

KeyInputs base_inputs() {
  KeyInputs in;
  in.kjit_version = "0.1.0";
  in.source = "#include \"a.cuh\"\ntemplate <class T, int N> __global__ void add(T* x) {}\n";
  in.headers = {{"a.cuh", "#pragma once\n#include \"b.cuh\"\n"}, {"b.cuh", "#define B 1\n"}};
  in.name_expression = "add<float, 4>";
  in.options = {"-std=c++17", "--gpu-architecture=sm_90", "-default-device"};
  in.target = "sm_90";
  in.nvrtc_version = "13.0 build 13.0.88";
  in.output = OutputKind::Cubin;
  in.driver_version = "13000";
  return in;
}

std::string key_of(const KeyInputs& in) { return CacheKey::compute(in).hex(); }

// When started with KJIT_TEST_PRINT_KEY=1 (by CacheKey.SameKeyInAnotherProcess), this binary prints
// the key of base_inputs() and exits before any test runs.
const bool kChildHook = [] {
  const char* v = std::getenv("KJIT_TEST_PRINT_KEY");
  if (v && std::string(v) == "1") {
    KeyInputs ptx = base_inputs();
    ptx.output = OutputKind::Ptx;
    std::printf("%s %s\n", key_of(base_inputs()).c_str(), key_of(ptx).c_str());
    std::fflush(stdout);
    std::_Exit(0);
  }
  return true;
}();

}  // namespace

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(kjit::cache::to_hex(Sha256::of("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(kjit::cache::to_hex(Sha256::of("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 h;
  h.update("a").update("").update("bc");
  EXPECT_EQ(h.finish(), Sha256::of("abc"));
}

TEST(Sha256, UseAfterFinishThrows) {
  Sha256 h;
  h.update("x");
  h.finish();
  EXPECT_THROW(h.update("y"), kjit::Error);
  EXPECT_THROW(h.finish(), kjit::Error);
}

TEST(Sha256, HexRoundTripAndRejects) {
  const Digest d = Sha256::of("kjit");
  Digest back{};
  ASSERT_TRUE(kjit::cache::from_hex(kjit::cache::to_hex(d), back));
  EXPECT_EQ(back, d);
  std::string upper = kjit::cache::to_hex(d);
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_FALSE(kjit::cache::from_hex(upper, back));
  EXPECT_FALSE(kjit::cache::from_hex(kjit::cache::to_hex(d).substr(1), back));
  EXPECT_FALSE(kjit::cache::from_hex(std::string(64, 'g'), back));
  EXPECT_FALSE(kjit::cache::from_hex("", back));
}

TEST(CacheKey, SameInputsSameKey) {
  EXPECT_EQ(CacheKey::compute(base_inputs()), CacheKey::compute(base_inputs()));
  EXPECT_EQ(key_of(base_inputs()).size(), 64u);
}

// Pins the key derivation: if this changes, every user's cache is invalidated; do it on purpose
// (and bump CacheKey::kSchemaVersion when the layout of the hashed fields changes).
// The value was derived independently from the documented encoding: SHA-256 of "kjit-cache-key"
// followed by u64le(len(label)) label u64le(len(value)) value for each field in order.
TEST(CacheKey, GoldenValue) {
  EXPECT_EQ(key_of(base_inputs()), "42dce18056a78d7c50fb06d07b4a6729244035f155bc298a09395476e971a53c");
}

TEST(CacheKey, SameKeyInAnotherProcess) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::setenv("KJIT_TEST_PRINT_KEY", "1", 1);
    ::execl("/proc/self/exe", "/proc/self/exe", static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  KeyInputs ptx = base_inputs();
  ptx.output = OutputKind::Ptx;
  EXPECT_EQ(out, key_of(base_inputs()) + " " + key_of(ptx) + "\n");
}

TEST(CacheKey, EachFieldAloneChangesTheKey) {
  const std::string base = key_of(base_inputs());
  const std::vector<std::pair<std::string, std::function<void(KeyInputs&)>>> changes = {
      {"kjit version", [](KeyInputs& k) { k.kjit_version = "0.1.1"; }},
      {"source", [](KeyInputs& k) { k.source += " "; }},
      {"header bytes", [](KeyInputs& k) { k.headers[1].second = "#define B 2\n"; }},
      {"header name", [](KeyInputs& k) { k.headers[1].first = "c.cuh"; }},
      {"added header", [](KeyInputs& k) { k.headers.push_back({"d.cuh", ""}); }},
      {"removed header", [](KeyInputs& k) { k.headers.pop_back(); }},
      {"name expression", [](KeyInputs& k) { k.name_expression = "add<float, 8>"; }},
      {"option value", [](KeyInputs& k) { k.options[0] = "-std=c++20"; }},
      {"added option", [](KeyInputs& k) { k.options.push_back("-lineinfo"); }},
      {"option order", [](KeyInputs& k) { std::swap(k.options[0], k.options[2]); }},
      {"target", [](KeyInputs& k) { k.target = "sm_90a"; }},
      {"nvrtc version", [](KeyInputs& k) { k.nvrtc_version = "13.0 build 13.0.89"; }},
      {"output kind", [](KeyInputs& k) { k.output = OutputKind::Ptx; }},
  };
  std::set<std::string> seen{base};
  for (const auto& [what, change] : changes) {
    KeyInputs in = base_inputs();
    change(in);
    const std::string k = key_of(in);
    EXPECT_NE(k, base) << what << " did not change the key";
    EXPECT_TRUE(seen.insert(k).second) << what << " collides with another change";
  }
}

TEST(CacheKey, DriverVersionCountsOnlyForPtx) {
  KeyInputs cubin = base_inputs();
  KeyInputs cubin2 = cubin;
  cubin2.driver_version = "12080";
  EXPECT_EQ(key_of(cubin), key_of(cubin2)) << "a cubin does not depend on the driver";

  KeyInputs ptx = base_inputs();
  ptx.output = OutputKind::Ptx;
  KeyInputs ptx2 = ptx;
  ptx2.driver_version = "12080";
  EXPECT_NE(key_of(ptx), key_of(ptx2)) << "PTX is JIT-compiled by the driver: its version counts";
}

TEST(CacheKey, HeaderOrderDoesNotMatter) {
  KeyInputs a = base_inputs();
  KeyInputs b = a;
  std::reverse(b.headers.begin(), b.headers.end());
  EXPECT_EQ(key_of(a), key_of(b));
  a.headers.push_back({"z.cuh", "z"});
  b.headers.insert(b.headers.begin(), {"z.cuh", "z"});
  EXPECT_EQ(key_of(a), key_of(b));
}

TEST(CacheKey, NoAmbiguityAtFieldBoundaries) {
  auto differ = [](const std::function<void(KeyInputs&)>& f, const std::function<void(KeyInputs&)>& g) {
    KeyInputs a = base_inputs(), b = base_inputs();
    f(a);
    g(b);
    return key_of(a) != key_of(b);
  };
  EXPECT_TRUE(differ([](KeyInputs& k) { k.options = {"ab", "c"}; }, [](KeyInputs& k) { k.options = {"a", "bc"}; }));
  EXPECT_TRUE(differ([](KeyInputs& k) { k.options = {"a"}; }, [](KeyInputs& k) { k.options = {"a", ""}; }));
  EXPECT_TRUE(differ([](KeyInputs& k) { k.options = {}; }, [](KeyInputs& k) { k.options = {""}; }));
  // Two string fields, `first` then `second`, set to (a1, a2) and to (b1, b2): the same text split elsewhere.
  using Field = std::string KeyInputs::*;
  auto across = [](Field first, Field second, const std::string& a1, const std::string& a2, const std::string& b1,
                   const std::string& b2) {
    KeyInputs a = base_inputs(), b = base_inputs();
    a.*first = a1;
    a.*second = a2;
    b.*first = b1;
    b.*second = b2;
    return key_of(a) != key_of(b);
  };
  EXPECT_TRUE(across(&KeyInputs::source, &KeyInputs::name_expression, "ab", "c", "a", "bc"));
  EXPECT_TRUE(differ([](KeyInputs& k) { k.headers = {{"ab", "c"}}; }, [](KeyInputs& k) { k.headers = {{"a", "bc"}}; }));
  EXPECT_TRUE(differ([](KeyInputs& k) { k.headers = {{"a", "b"}, {"c", "d"}}; },
                     [](KeyInputs& k) { k.headers = {{"a", "bcd"}}; }));
  EXPECT_TRUE(across(&KeyInputs::target, &KeyInputs::nvrtc_version, "sm_90", "1", "sm_9", "01"));
  EXPECT_TRUE(across(&KeyInputs::kjit_version, &KeyInputs::source, "1", "x", "", "1x"));
}

TEST(CacheKey, FromHexRoundTripAndErrors) {
  const CacheKey k = CacheKey::compute(base_inputs());
  EXPECT_EQ(CacheKey::from_hex(k.hex()), k);
  try {
    CacheKey::from_hex("abc");
    FAIL() << "expected ValueError";
  } catch (const kjit::ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'abc'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("64 lowercase hexadecimal"), std::string::npos) << msg;
  }
  EXPECT_THROW(CacheKey::from_hex(std::string(64, 'G')), kjit::ValueError);
}

TEST(CacheKey, HashFunctorUsesDigest) {
  kjit::cache::CacheKeyHash h;
  const CacheKey a = CacheKey::compute(base_inputs());
  KeyInputs other = base_inputs();
  other.source += "x";
  EXPECT_EQ(h(a), h(CacheKey::compute(base_inputs())));
  EXPECT_NE(h(a), h(CacheKey::compute(other)));
}

TEST(CacheKey, ContentDigestStandsForSourceAndHeaders) {
  KeyInputs a = base_inputs();
  a.content_digest = std::string(64, 'a');
  KeyInputs b = a;
  b.source += " changed";  // ignored once the digest of the content is given
  b.headers.clear();
  EXPECT_EQ(key_of(a), key_of(b));
  KeyInputs c = a;
  c.content_digest[0] = 'b';
  EXPECT_NE(key_of(a), key_of(c));
  EXPECT_NE(key_of(a), key_of(base_inputs()));
}
