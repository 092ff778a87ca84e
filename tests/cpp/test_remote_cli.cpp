// The `kjit` command line (kjit::cli::run, in-process; `python -m kjit` runs the same code) with a remote
// tier: a real redis-server (support/redis_server.hpp) for prefetch's answers and refusals, and a
// scripted hostile server (support/scripted_redis.hpp) for replies that trickle or announce too much:
// `kjit compile`, `kjit info` and `kjit prefetch` never wait past KJIT_REMOTE_CACHE_TIMEOUT for a
// reply, and prefetch fails when Redis refuses its lookup or every value it holds.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "kjit/cache/manifest.hpp"
#include "kjit/cache/redis_connection.hpp"
#include "kjit/dtype.hpp"
#include "kjit/settings.hpp"
#include "kjit/spec_record.hpp"
#include "kjit/specialization.hpp"
#include "kjit/template.hpp"
#include "redis_server.hpp"
#include "scripted_redis.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using kjit::TemplateArg;
using kjit::testing::entries_in;
using kjit::testing::ScopedEnv;
using kjit::testing::ScriptedRedis;
using kjit::testing::TempDir;

const std::string kSecret = "the deployment secret of the CLI tests";

struct Result {
  int code = -1;
  std::string out, err;
  double seconds = 0;
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Result kjit_cli(const fs::path& cache_dir, std::vector<std::string> args) {
  args.insert(args.begin(), {"--cache-dir", cache_dir.string()});
  std::ostringstream out, err;
  Result r;
  const auto t0 = Clock::now();
  r.code = kjit::cli::run(args, out, err);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.out = out.str();
  r.err = err.str();
  return r;
}

// One scripted answer to every command.
ScriptedRedis::Answer answer_with(const std::string& bytes, bool hold = false) {
  ScriptedRedis::Answer a;
  a.now = bytes;
  a.hold = hold;
  return a;
}

class RemoteCliTest : public ::testing::Test {
 protected:
  // A manifest of two add_constant specializations, and a cache holding both for sm_90, compiled once
  // for the whole suite: each test pushes them to its own Redis (warm --remote, no compile).
  static void SetUpTestSuite() {
    seed_ = std::make_unique<TempDir>("kjit-remote-cli-seed");
    std::vector<kjit::cache::ManifestRecord> records;
    for (int vec : {2, 4})
      records.push_back(kjit::to_record(
          kjit::Specialization(kjit::Template::builtin("add_constant"), "add_constant",
                               {{"T", TemplateArg::type(kjit::DType::Float32)}, {"VEC", TemplateArg::integer(vec)}})));
    kjit::cache::append_to_manifest(manifest(), records, 10);
    ScopedEnv no_remote("KJIT_REMOTE_CACHE", std::nullopt);
    const Result r = kjit_cli(seeded(), {"warm", manifest().string(), "--arch", "sm_90", "-j", "1"});
    ASSERT_EQ(r.code, 0) << r.out << r.err;
  }
  static void TearDownTestSuite() { seed_.reset(); }
  static fs::path manifest() { return seed_->path() / "manifest.json"; }
  static fs::path seeded() { return seed_->path() / "cache"; }

  // The environment of a process of the deployment, for `url`.
  void use_remote(const std::string& url, const std::string& secret = kSecret, const std::string& timeout = "1") {
    url_.emplace("KJIT_REMOTE_CACHE", url);
    secret_.emplace("KJIT_REMOTE_CACHE_SECRET", secret);
    timeout_.emplace("KJIT_REMOTE_CACHE_TIMEOUT", timeout);
  }
  // A real redis-server holding the two entries, sealed with kSecret.
  std::unique_ptr<kjit::testing::RedisServer> filled_redis() {
    auto server = std::make_unique<kjit::testing::RedisServer>(dir_ / "redis");
    use_remote(server->url());
    const Result w = kjit_cli(seeded(), {"warm", manifest().string(), "--arch", "sm_90", "--remote"});
    EXPECT_EQ(w.code, 0) << w.out << w.err;
    EXPECT_TRUE(contains(w.out, " 2 pushed")) << w.out;
    return server;
  }
  Result prefetch() { return kjit_cli(dir_ / "empty", {"prefetch", manifest().string(), "--arch", "sm_90"}); }
  bool skip_without_redis() {
    const std::string why = kjit::testing::RedisServer::unavailable_reason();
    if (!why.empty()) std::cerr << "skipped: " << why << '\n';
    return !why.empty();
  }

  static inline std::unique_ptr<TempDir> seed_;
  TempDir dir_{"kjit-remote-cli"};
  ScopedEnv mode_{"KJIT_CACHE_MODE", std::nullopt};
  ScopedEnv layers_{"KJIT_CACHE_PATH", std::nullopt};
  ScopedEnv record_{"KJIT_RECORD", std::nullopt};
  ScopedEnv secret_file_{"KJIT_REMOTE_CACHE_SECRET_FILE", std::nullopt};
  ScopedEnv remote_mode_{"KJIT_REMOTE_CACHE_MODE", std::nullopt};
  std::optional<ScopedEnv> url_, secret_, timeout_;
};

// ---- a server that trickles its replies (finding 1) ------------------------------------------------

TEST_F(RemoteCliTest, ATricklingServerHoldsUpNeitherCompileNorInfo) {
  // Every connection is closed by the server after 30 s: a client that waits for the whole reply takes
  // that long; one bounded by KJIT_REMOTE_CACHE_TIMEOUT=1 takes about 1 s plus the compile.
  ScriptedRedis server([](const std::vector<std::string>&) { return ScriptedRedis::trickled_bulk(); }, 30);
  use_remote(server.url());
  const Result c = kjit_cli(dir_ / "c", {"compile", "add_constant", "--kernel", "add_constant", "--param", "T=float32",
                                         "--param", "VEC=8", "--arch", "sm_90", "--json"});
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  EXPECT_TRUE(contains(c.out, "\"origin\":\"compiled\"") || contains(c.out, "\"origin\": \"compiled\"")) << c.out;
  EXPECT_LT(c.seconds, 15.0) << c.err;
  EXPECT_TRUE(contains(c.err, "timed out")) << c.err;

  const Result i = kjit_cli(dir_ / "c", {"info"});
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_LT(i.seconds, 15.0);
  EXPECT_TRUE(contains(i.out, "does not answer")) << i.out;
  EXPECT_TRUE(contains(i.out, "timed out")) << i.out;
}

TEST_F(RemoteCliTest, PrefetchFromATricklingServerFailsWithinTheTimeout) {
  ScriptedRedis server([](const std::vector<std::string>&) { return ScriptedRedis::trickled_bulk(); }, 30);
  use_remote(server.url());
  const Result p = prefetch();
  EXPECT_EQ(p.code, 1) << p.out << p.err;
  EXPECT_LT(p.seconds, 15.0);
  EXPECT_TRUE(contains(p.err, "did not answer; nothing was fetched")) << p.err;
  EXPECT_TRUE(contains(p.out, "2 not looked up")) << p.out;
}

// ---- a server that announces more than any entry (finding 5) ----------------------------------------

TEST_F(RemoteCliTest, AValueAnnouncedLargerThanAnyEntryIsRefusedAndTheKernelCompiled) {
  // 8 GiB announced, 4 KB sent, the connection kept open: refused at the header, not read until the
  // 5 s limit (nor, from a server that goes on sending, until memory runs out).
  ScriptedRedis server([](const std::vector<std::string>&) {
    return answer_with(ScriptedRedis::bulk_header(8ull << 30, 4096), /*hold=*/true);
  });
  use_remote(server.url(), kSecret, "5");
  const Result c = kjit_cli(dir_ / "c", {"compile", "add_constant", "--kernel", "add_constant", "--param", "T=float32",
                                         "--param", "VEC=8", "--arch", "sm_90"});
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  EXPECT_TRUE(contains(c.out, " compiled ")) << c.out;
  EXPECT_TRUE(contains(c.err, "a value of 8589934592 bytes announced, over the 1073741864 bytes allowed")) << c.err;
  EXPECT_FALSE(contains(c.err, "timed out")) << c.err;
}

// ---- prefetch: a refused lookup, refused values (finding 7) ----------------------------------------

TEST_F(RemoteCliTest, PrefetchFailsWhenRedisRefusesTheMget) {
  if (skip_without_redis()) GTEST_SKIP();
  auto server = filled_redis();
  {
    kjit::cache::RedisConnection admin(server->endpoint(), 2.0);
    // Every permission the README lists but +mget.
    const auto r = admin.command({"ACL", "SETUSER", "kjit", "on", ">kjit-password", "~kjit:*", "+get", "+set",
                                  "+exists", "+eval", "+del", "+pexpire", "+pttl", "+ping"});
    ASSERT_EQ(r.type, kjit::cache::RedisReply::Type::Status) << r.str;
  }
  use_remote("redis://kjit:kjit-password@127.0.0.1:" + std::to_string(server->port()) + "/0");
  const Result p = prefetch();
  EXPECT_EQ(p.code, 1) << p.out << p.err;
  EXPECT_TRUE(contains(p.err, "refused the lookup: it answered MGET with an error: NOPERM")) << p.err;
  EXPECT_TRUE(contains(p.err, "+mget")) << "what to change: " << p.err;
  EXPECT_FALSE(contains(p.out, "not in the remote cache")) << p.out;
  EXPECT_EQ(entries_in(dir_ / "empty"), 0u);
}

TEST_F(RemoteCliTest, PrefetchFailsOnAnMgetAnswerThatIsNotOneValuePerKey) {
  ScriptedRedis server([](const std::vector<std::string>&) { return answer_with("*1\r\n$-1\r\n"); });
  use_remote(server.url());
  const Result p = prefetch();
  EXPECT_EQ(p.code, 1) << p.out << p.err;
  EXPECT_TRUE(contains(p.err, "refused the lookup: it answered MGET of ")) << p.err;
  EXPECT_TRUE(contains(p.err, " keys with an array of 1 values")) << p.err;
}

TEST_F(RemoteCliTest, PrefetchFailsWhenEveryValueItFindsIsRefused) {
  if (skip_without_redis()) GTEST_SKIP();
  auto server = filled_redis();
  use_remote(server->url(), "not the secret the entries were sealed with");
  const Result p = prefetch();
  EXPECT_EQ(p.code, 1) << p.out << p.err;
  EXPECT_TRUE(contains(p.out, "prefetched 0 of 2 entries")) << p.out;
  EXPECT_TRUE(contains(p.out, "2 refused")) << p.out;
  EXPECT_TRUE(contains(p.err, "every one was refused")) << p.err;
  EXPECT_TRUE(contains(p.err, "the same KJIT_REMOTE_CACHE_SECRET")) << p.err;
}

TEST_F(RemoteCliTest, ASecretFromTheEnvironmentWithATrailingNewlineIsTheSameSecret) {
  // `openssl rand -hex 32 > f`, then a Kubernetes secret made --from-file and passed as a variable.
  if (skip_without_redis()) GTEST_SKIP();
  auto server = filled_redis();
  for (const std::string end : {"\n", "\r\n"}) {
    use_remote(server->url(), kSecret + end);
    fs::remove_all(dir_ / "empty");
    const Result p = prefetch();
    EXPECT_EQ(p.code, 0) << p.out << p.err;
    EXPECT_TRUE(contains(p.out, "prefetched 2 of 2 entries")) << p.out;
    EXPECT_EQ(entries_in(dir_ / "empty"), 2u);
  }
  EXPECT_EQ(kjit::Settings::from_map({{"KJIT_REMOTE_CACHE", "redis://h"}, {"KJIT_REMOTE_CACHE_SECRET", kSecret + "\n"}})
                .remote_cache->secret,
            kSecret);
}

}  // namespace
