// The remote tier: sealed entries (entry_seal), Redis URLs (remote_config), RedisStore against a real
// redis-server started by the test (support/redis_server.hpp), cluster-wide single flight
// (cluster_flight), the chain's backfill of a remote hit onto the disk, and the connection against a
// scripted hostile server (support/scripted_redis.hpp): replies that trickle, or announce too much.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "cache_test_helpers.hpp"
#include "child_process.hpp"
#include "kjit/cache/cluster_flight.hpp"
#include "kjit/cache/entry_seal.hpp"
#include "kjit/cache/redis_connection.hpp"
#include "kjit/cache/redis_store.hpp"
#include "kjit/cache/remote_config.hpp"
#include "kjit/cache/store_chain.hpp"
#include "kjit/error.hpp"
#include "redis_server.hpp"
#include "scripted_redis.hpp"
#include "test_support.hpp"

namespace kjit {
namespace {

namespace fs = std::filesystem;
using cache::RedisStore;
using testing::make_entry;
using testing::one_warning_saying;
using testing::WarningCapture;
using Clock = std::chrono::steady_clock;

const std::string kSecret = "a deployment secret of some length";

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The back-off of the tests' stores (RemoteConfig::backoff_s, KJIT_REMOTE_CACHE_BACKOFF): a store is
// used again a few milliseconds after an outage instead of the default second.
constexpr double kShortBackoffS = 0.02;

// Polls `done` every few milliseconds until it is true (true) or `limit_s` has passed (false): waits for
// an event instead of sleeping for a guess of how long it takes.
template <class F>
bool eventually(F done, double limit_s = 10.0) {
  const auto t0 = Clock::now();
  while (!done()) {
    if (seconds_since(t0) > limit_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// produce_once for `e` on `store` whose produce() counts its calls in *produced and returns `e`.
cache::FlightResult produce_counting(RedisStore& store, const cache::Entry& e, int* produced) {
  return cache::produce_once(store, e.key, "sm_90", [&] {
    ++*produced;
    return e;
  });
}

// ---- sealed values -------------------------------------------------------------------------------

TEST(EntrySeal, ASealedValueUnsealsToItsEntryBytes) {
  const std::string entry = cache::encode_entry(make_entry("seal-1"));
  const std::string value = cache::seal_entry(kSecret, "kjit:v1:sm_90:x", entry);
  ASSERT_EQ(value.size(), cache::kSealHeaderBytes + entry.size());
  const cache::Unsealed u = cache::unseal_entry(kSecret, "kjit:v1:sm_90:x", value);
  EXPECT_EQ(u.error, "");
  EXPECT_EQ(u.entry, entry);
}

TEST(EntrySeal, EveryAlterationIsRefused) {
  const std::string entry = cache::encode_entry(make_entry("seal-2"));
  const std::string name = "kjit:v1:sm_90:y";
  const std::string value = cache::seal_entry(kSecret, name, entry);
  auto refused = [&](const std::string& v, const std::string& secret, const std::string& n) {
    const cache::Unsealed u = cache::unseal_entry(secret, n, v);
    return !u.error.empty() && u.entry.empty();
  };
  std::string changed_entry = value;
  changed_entry[value.size() - 1] ^= 1;
  EXPECT_TRUE(refused(changed_entry, kSecret, name)) << "a payload byte changed";
  std::string changed_tag = value;
  changed_tag[10] ^= 0x80;
  EXPECT_TRUE(refused(changed_tag, kSecret, name)) << "a tag byte changed";
  EXPECT_TRUE(refused(value.substr(0, value.size() - 1), kSecret, name)) << "truncated in the entry";
  EXPECT_TRUE(refused(value.substr(0, 20), kSecret, name)) << "truncated in the tag";
  EXPECT_TRUE(refused(entry, kSecret, name)) << "no tag at all (the bare disk entry)";
  EXPECT_TRUE(refused("", kSecret, name)) << "empty";
  EXPECT_TRUE(refused(value, kSecret + "!", name)) << "another secret";
  EXPECT_TRUE(refused(value, kSecret, "kjit:v1:sm_80:y")) << "filed under another name";
  EXPECT_NE(cache::unseal_entry(kSecret, name, entry).error.find("not a sealed kjit entry"), std::string::npos);
}

// ---- Redis URLs ------------------------------------------------------------------------------------

TEST(RedisUrl, ParsesEveryForm) {
  cache::RedisEndpoint e = cache::parse_redis_url("redis://cache.internal");
  EXPECT_EQ(e.host, "cache.internal");
  EXPECT_EQ(e.port, 6379);
  EXPECT_EQ(e.db, 0);
  e = cache::parse_redis_url("redis://10.0.0.5:6380/3");
  EXPECT_EQ(e.host, "10.0.0.5");
  EXPECT_EQ(e.port, 6380);
  EXPECT_EQ(e.db, 3);
  e = cache::parse_redis_url("redis://kjit:s3cret@h:1/2");
  EXPECT_EQ(e.user, "kjit");
  EXPECT_EQ(e.password, "s3cret");
  EXPECT_EQ(e.display(), "redis://kjit:***@h:1/2");
  e = cache::parse_redis_url("redis://onlypass@h");
  EXPECT_EQ(e.user, "");
  EXPECT_EQ(e.password, "onlypass");
  EXPECT_EQ(e.display().find("onlypass"), std::string::npos);
  e = cache::parse_redis_url("redis://[::1]:7000/");
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.port, 7000);
}

TEST(RedisUrl, RefusesWhatIsNotOneAndSaysWhatIsAllowed) {
  for (const char* bad : {"http://h:1", "rediss://h", "redis://", "redis://:6379", "redis://h:0", "redis://h:x",
                          "redis://h:70000", "redis://h/db", "h:6379", "redis://[::1:7000"}) {
    try {
      cache::parse_redis_url(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("redis://[user:password@]host[:port][/db]"), std::string::npos) << e.what();
    }
  }
}

TEST(RedisUrl, AnErrorNeverShowsThePassword) {
  for (const char* bad : {"redis://kjit:hunter2@10.0.0.5:63x9", "redis://hunter2@h:0", "http://kjit:hunter2@h"}) {
    try {
      cache::parse_redis_url(bad);
      ADD_FAILURE() << "accepted";
    } catch (const ValueError& e) {
      EXPECT_EQ(std::string(e.what()).find("hunter2"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("***@"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(cache::parse_redis_url("redis://::1"), ValueError) << "IPv6 without brackets";
}

// ---- a real server -----------------------------------------------------------------------------

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = testing::RedisServer::unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << why;
    dir_ = std::make_unique<testing::TempDir>("kjit-redis");
    server_ = std::make_unique<testing::RedisServer>(dir_->path() / "redis");
  }

  cache::RemoteConfig config(cache::RemoteMode mode = cache::RemoteMode::ReadWrite, double lease_s = 60) const {
    cache::RemoteConfig c;
    c.url = server_->url();
    c.mode = mode;
    c.secret = kSecret;
    c.timeout_s = 0.5;
    c.lease_s = lease_s;
    c.backoff_s = kShortBackoffS;
    return c;
  }
  // Another process of the deployment (its own connections, its own back-off).
  std::shared_ptr<RedisStore> machine(cache::RemoteMode mode = cache::RemoteMode::ReadWrite,
                                      double lease_s = 60) const {
    return std::make_shared<RedisStore>(config(mode, lease_s));
  }
  cache::RedisReply redis(const cache::RedisConnection::Command& args) const {
    cache::RedisConnection c(server_->endpoint(), 2.0);
    return c.command(args);
  }
  long long dbsize() const { return redis({"DBSIZE"}).integer; }
  // Puts the entries of seeds `prefix` 0, 1, 2 into Redis; their lookups for sm_90 in `asks`.
  void put_three(const std::string& prefix, std::vector<std::pair<cache::CacheKey, std::string>>* asks) const {
    for (int i = 0; i < 3; ++i) {
      const cache::Entry e = make_entry(prefix + std::to_string(i));
      ASSERT_TRUE(machine()->put(e));
      asks->emplace_back(e.key, "sm_90");
    }
  }
  // The connections the server has accepted since it started (INFO stats), this one included.
  long long connections_received() const {
    const std::string info = redis({"INFO", "stats"}).str;
    const std::string field = "total_connections_received:";
    const std::size_t at = info.find(field);
    if (at == std::string::npos) throw std::runtime_error("INFO stats without " + field + "\n" + info);
    return std::stoll(info.substr(at + field.size()));
  }

  std::unique_ptr<testing::TempDir> dir_;
  std::unique_ptr<testing::RedisServer> server_;
};

TEST_F(RedisStoreTest, AnEntryPutByOneMachineIsFoundByAnother) {
  const cache::Entry e = make_entry("remote-roundtrip");
  auto a = machine();
  ASSERT_TRUE(a->put(e));
  EXPECT_EQ(a->stored(), 1u);
  auto got = machine()->get(e.key, "sm_90");
  ASSERT_TRUE(got);
  EXPECT_TRUE(testing::same_entry(*got, e));
  EXPECT_FALSE(machine()->get(e.key, "sm_80")) << "another target is another entry";
  EXPECT_FALSE(machine()->get(testing::key_for("remote-absent"), "sm_90"));
  EXPECT_EQ(redis({"EXISTS", RedisStore::entry_name(e.key, "sm_90")}).integer, 1);
}

TEST_F(RedisStoreTest, AValueChangedInRedisIsRefusedAndReplacedByTheNextPut) {
  const cache::Entry e = make_entry("remote-tampered", "sm_90", 4096);
  auto a = machine();
  ASSERT_TRUE(a->put(e));
  const std::string name = RedisStore::entry_name(e.key, "sm_90");
  redis({"SETRANGE", name, "3000", "XX"});
  WarningCapture warnings;
  EXPECT_FALSE(machine()->get(e.key, "sm_90"));
  ASSERT_TRUE(one_warning_saying(warnings, "refused the value of " + name));
  ASSERT_TRUE(a->put(e));  // what a process that compiled it does
  EXPECT_TRUE(machine()->get(e.key, "sm_90"));
}

TEST_F(RedisStoreTest, ValuesThatWereNotSealedByThisDeploymentAreRefused) {
  const cache::Entry e = make_entry("remote-forged");
  const std::string name = RedisStore::entry_name(e.key, "sm_90");
  const std::string bytes = cache::encode_entry(e);
  cache::RemoteConfig other = config();
  other.secret = "another deployment's secret!";
  ASSERT_TRUE(RedisStore(other).put(e));
  WarningCapture warnings;
  EXPECT_FALSE(machine()->get(e.key, "sm_90")) << "sealed with another secret";
  redis({"SET", name, bytes});
  EXPECT_FALSE(machine()->get(e.key, "sm_90")) << "the bare entry, no tag";
  redis({"SET", name, cache::seal_entry(kSecret, name, bytes.substr(0, bytes.size() - 5))});
  EXPECT_FALSE(machine()->get(e.key, "sm_90")) << "a truncated entry, sealed after truncation";
  // A valid value of another key copied under this key's name.
  const cache::Entry f = make_entry("remote-forged-other");
  ASSERT_TRUE(machine()->put(f));
  redis({"COPY", RedisStore::entry_name(f.key, "sm_90"), name, "REPLACE"});
  EXPECT_FALSE(machine()->get(e.key, "sm_90")) << "another key's value";
  EXPECT_EQ(warnings.count(), 1u) << "once per key: " << warnings.all();
}

TEST_F(RedisStoreTest, AReadOnlyClientNeverWritesAnything) {
  const cache::Entry e = make_entry("remote-readonly");
  auto reader = machine(cache::RemoteMode::Read);
  EXPECT_FALSE(reader->writable());
  EXPECT_FALSE(reader->put(e));
  std::string token;
  EXPECT_EQ(reader->try_lease(e.key, "sm_90", &token), RedisStore::Lease::Unavailable);
  int produced = 0;
  cache::FlightResult r = produce_counting(*reader, e, &produced);
  EXPECT_EQ(produced, 1);
  EXPECT_FALSE(r.fetched);
  EXPECT_EQ(dbsize(), 0);
  ASSERT_TRUE(machine()->put(e));
  EXPECT_TRUE(reader->get(e.key, "sm_90")) << "but it reads";
}

TEST_F(RedisStoreTest, AStoppedServerIsAMissWithOneWarningThenABackoffAndItIsUsedAgainOnceBack) {
  const cache::Entry e = make_entry("remote-down");
  cache::RemoteConfig c = config();
  c.backoff_s = 0.5;
  auto a = std::make_shared<RedisStore>(c);
  ASSERT_TRUE(a->put(e));
  server_->stop();
  WarningCapture warnings;
  const auto failed_at = Clock::now();  // at most when the back-off began
  EXPECT_FALSE(a->get(e.key, "sm_90"));
  EXPECT_FALSE(a->put(e));
  EXPECT_FALSE(a->contains(e.key, "sm_90"));
  ASSERT_TRUE(one_warning_saying(warnings, "does not answer"));
  server_->start();  // empty again: no persistence
  // Within the back-off the store leaves the server alone, although it answers again: lookups are misses
  // and open no connection (the count holds only this test's own two INFO connections).
  const long long connections = connections_received();
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(a->get(e.key, "sm_90"));
  const bool within_backoff = seconds_since(failed_at) < 0.4;
  const long long after = connections_received();
  if (within_backoff) EXPECT_EQ(after, connections + 1) << "backing off: no connection attempt per lookup";
  // Then it is used again, not before the back-off ends.
  ASSERT_TRUE(eventually([&] { return a->put(e); }));
  EXPECT_GE(seconds_since(failed_at), 0.5) << "used again before its back-off ended";
  EXPECT_TRUE(a->get(e.key, "sm_90"));
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
}

TEST_F(RedisStoreTest, AServerThatStopsAnsweringCostsOneTimeoutNotAHang) {
  const cache::Entry e = make_entry("remote-frozen");
  cache::RemoteConfig c = config();
  c.backoff_s = 10;  // the lookups after the timeout back off (no second timeout)
  auto a = std::make_shared<RedisStore>(c);
  ASSERT_TRUE(a->put(e));
  server_->freeze();
  WarningCapture warnings;
  const auto t0 = Clock::now();
  EXPECT_FALSE(a->get(e.key, "sm_90"));  // the pooled connection: the reply times out (0.5 s)
  EXPECT_FALSE(a->get(e.key, "sm_90"));  // backing off
  int produced = 0;
  produce_counting(*a, e, &produced);
  EXPECT_EQ(produced, 1);
  EXPECT_LT(seconds_since(t0), 3.0);
  server_->thaw();
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
}

TEST_F(RedisStoreTest, EightMachinesMissingTheSameKeyProduceItOnce) {
  const cache::Entry e = make_entry("remote-flight");
  std::atomic<int> produced{0};
  std::atomic<int> fetched{0};
  std::vector<std::thread> threads;
  std::vector<cache::Entry> results(8);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      auto m = machine();
      cache::FlightResult r = cache::produce_once(*m, e.key, "sm_90", [&] {
        produced.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        return e;
      });
      if (r.fetched) fetched.fetch_add(1);
      results[i] = r.entry;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(produced.load(), 1);
  EXPECT_EQ(fetched.load(), 7);
  for (const auto& r : results) EXPECT_TRUE(testing::same_entry(r, e));
  EXPECT_EQ(redis({"EXISTS", RedisStore::lease_name(e.key, "sm_90")}).integer, 0) << "the lease is gone";
}

TEST_F(RedisStoreTest, OneStoreServesEightThreadsThroughAServerRestart) {
  // One process's store, shared by its threads (the pool, the back-off state): every operation either
  // works or is a miss, and the store answers again after the restart. Run under TSan by .ci/tsan.sh.
  auto store = machine();
  std::atomic<bool> stop{false};
  std::atomic<int> hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        const cache::Entry e = make_entry("remote-threads-" + std::to_string(t) + "-" + std::to_string(i % 4));
        store->put(e);
        if (store->get(e.key, "sm_90")) hits.fetch_add(1);
        store->contains(e.key, "sm_90");
      }
    });
  WarningCapture warnings;
  const bool served = eventually([&] { return hits.load() > 0; });
  server_->stop();
  const bool noticed = eventually([&] { return warnings.count() > 0; });  // the outage's one warning
  const int before = hits.load();
  server_->start();
  const bool again = eventually([&] { return hits.load() > before; });  // past the (short) back-off
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_TRUE(served);
  EXPECT_TRUE(noticed) << "no warning for the outage";
  EXPECT_TRUE(again) << "it does not answer again after the restart";
  EXPECT_EQ(warnings.count(), 1u) << "one warning for the outage: " << warnings.all();
}

TEST_F(RedisStoreTest, AForkedChildOpensItsOwnConnectionsInsteadOfSharingItsParents) {
  auto store = machine();
  const cache::Entry a = make_entry("remote-fork-parent"), b = make_entry("remote-fork-child", "sm_90", 100000);
  ASSERT_TRUE(store->put(a));  // the parent now has a pooled connection that a child inherits
  ASSERT_TRUE(store->put(b));
  std::atomic<bool> child_done{false};
  testing::ChildResult child;
  std::thread runner([&] {
    child = testing::ChildRun::run([&](testing::ChildChecks& c) {
      for (int i = 0; i < 300; ++i) {
        auto got = store->get(b.key, "sm_90");
        if (!c.check(got && got->key == b.key && got->payload == b.payload, "child get " + std::to_string(i))) return;
      }
    });
    child_done = true;
  });
  WarningCapture warnings;
  int parent_ok = 0, rounds = 0;
  for (; !child_done.load() || rounds < 300; ++rounds) {
    auto got = store->get(a.key, "sm_90");
    if (got && got->key == a.key && got->payload == a.payload) ++parent_ok;
  }
  runner.join();
  EXPECT_TRUE(child.failures.empty()) << child.failures.front();
  EXPECT_EQ(parent_ok, rounds);
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
}

TEST_F(RedisStoreTest, AnIdleConnectionTheServerClosedIsReplacedWithoutAnOutage) {
  const cache::Entry e = make_entry("remote-idle-closed");
  auto a = machine();
  ASSERT_TRUE(a->put(e));                                        // a pooled connection
  redis({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});  // what a server's idle timeout does
  WarningCapture warnings;
  EXPECT_TRUE(a->get(e.key, "sm_90"));
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
}

TEST_F(RedisStoreTest, AWriteToAConnectionTheServerClosedDoesNotKillTheProcess) {
  // SIGPIPE at its default action (ends the process), as in a program that never touched it.
  struct sigaction dfl{}, old{};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &dfl, &old);
  auto a = machine();
  ASSERT_TRUE(a->put(make_entry("remote-sigpipe-small")));
  for (int i = 0; i < 3; ++i) {
    redis({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the reset arrives before the write
    a->put(make_entry("remote-sigpipe-" + std::to_string(i), "sm_90", 8 << 20));
  }
  ::sigaction(SIGPIPE, &old, nullptr);
  SUCCEED() << "still alive";
}

TEST_F(RedisStoreTest, AnErrorReplyIsAMissWithAWarningThatSaysWhatToDo) {
  redis({"CONFIG", "SET", "requirepass", "let-me-in"});
  cache::RedisEndpoint with_password = server_->endpoint();
  with_password.password = "let-me-in";
  auto a = machine();  // no password in its URL
  WarningCapture warnings;
  EXPECT_FALSE(a->get(make_entry("remote-noauth").key, "sm_90"));
  EXPECT_NE(warnings.all().find("NOAUTH"), std::string::npos) << warnings.all();
  EXPECT_NE(warnings.all().find("redis://user:password@host:port"), std::string::npos) << warnings.all();
  cache::RedisConnection admin(with_password, 2.0);
  admin.command({"CONFIG", "SET", "requirepass", ""});
}

TEST_F(RedisStoreTest, AHolderKeepsItsLeaseWhileItCompilesLongerThanTheLease) {
  const cache::Entry e = make_entry("remote-renewed");
  constexpr double kLease = 0.4;  // renewed every third of it
  std::atomic<int> produced{0};
  auto slow = [&] {
    produced.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::duration<double>(2.5 * kLease));  // the point: 2.5 leases
    return e;
  };
  std::thread holder(
      [&] { cache::produce_once(*machine(cache::RemoteMode::ReadWrite, kLease), e.key, "sm_90", slow); });
  ASSERT_TRUE(eventually([&] { return produced.load() == 1; })) << "the holder never compiled";  // it holds the lease
  cache::FlightResult r = cache::produce_once(*machine(cache::RemoteMode::ReadWrite, kLease), e.key, "sm_90", slow);
  holder.join();
  EXPECT_EQ(produced.load(), 1) << "the waiter compiled while the holder's lease was being renewed";
  EXPECT_TRUE(r.fetched);
}

TEST_F(RedisStoreTest, WhenTheHolderPublishesNothingTheWaitersCompileAtOnceNotInTurn) {
  const cache::Entry e = make_entry("remote-unpublished");
  std::atomic<int> running{0}, most{0}, waiter_produced{0};
  std::atomic<bool> holding{false};
  std::thread holder([&] {
    EXPECT_THROW(cache::produce_once(*machine(), e.key, "sm_90",
                                     [&]() -> cache::Entry {
                                       holding = true;  // it has the lease
                                       // long enough for the waiters to be waiting for it
                                       std::this_thread::sleep_for(std::chrono::milliseconds(300));
                                       throw CompileError("does not compile", "", "", {}, "");
                                     }),
                 CompileError);
  });
  ASSERT_TRUE(eventually([&] { return holding.load(); }));
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i)
    waiters.emplace_back([&] {
      cache::produce_once(*machine(), e.key, "sm_90", [&] {
        waiter_produced.fetch_add(1);
        const int now = running.fetch_add(1) + 1;
        for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        running.fetch_sub(1);
        return e;
      });
    });
  holder.join();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(waiter_produced.load(), 4);
  EXPECT_GE(most.load(), 2) << "the waiters compiled one after another";
}

TEST_F(RedisStoreTest, ALeaseWithoutAnExpiryIsNotWaitedFor) {
  const cache::Entry e = make_entry("remote-forever-lease");
  redis({"SET", RedisStore::lease_name(e.key, "sm_90"), "not-kjit"});  // PERSISTed, or written by hand
  WarningCapture warnings;
  int produced = 0;
  const auto t0 = Clock::now();
  cache::FlightResult r = produce_counting(*machine(), e, &produced);
  EXPECT_EQ(produced, 1);
  EXPECT_FALSE(r.fetched);
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_NE(warnings.all().find("has no expiry"), std::string::npos) << warnings.all();
}

TEST_F(RedisStoreTest, AWaiterGivesUpAfterItsWaitLimit) {
  const cache::Entry e = make_entry("remote-wait-limit");
  std::string token;
  auto holder = machine();
  ASSERT_EQ(holder->try_lease(e.key, "sm_90", &token), RedisStore::Lease::Taken);  // alive, never done
  cache::RemoteConfig c = config();
  c.wait_limit_s = 0.2;
  RedisStore waiter(c);
  WarningCapture warnings;
  int produced = 0;
  const auto t0 = Clock::now();
  produce_counting(waiter, e, &produced);
  EXPECT_EQ(produced, 1);
  EXPECT_GE(seconds_since(t0), 0.2);
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_NE(warnings.all().find("compiling it here"), std::string::npos) << warnings.all();
}

TEST_F(RedisStoreTest, ALeaseWhoseHolderDiedExpiresAndIsTakenOver) {
  const cache::Entry e = make_entry("remote-dead-holder");
  std::string token;
  ASSERT_EQ(machine(cache::RemoteMode::ReadWrite, 0.4)->try_lease(e.key, "sm_90", &token), RedisStore::Lease::Taken);
  // Its holder "dies": nobody releases it.
  int produced = 0;
  const auto t0 = Clock::now();
  cache::FlightResult r = produce_counting(*machine(), e, &produced);
  EXPECT_EQ(produced, 1);
  EXPECT_FALSE(r.fetched);
  EXPECT_GE(seconds_since(t0), 0.3) << "it waited for the lease";
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_TRUE(machine()->get(e.key, "sm_90")) << "and published the entry";
}

TEST_F(RedisStoreTest, AHolderWhoseCompileFailsLetsTheLeaseGoAtOnce) {
  const cache::Entry e = make_entry("remote-failing-holder");
  auto a = machine();
  EXPECT_THROW(
      cache::produce_once(*a, e.key, "sm_90", []() -> cache::Entry { throw CompileError("bad", "", "", {}, ""); }),
      CompileError);
  EXPECT_EQ(redis({"EXISTS", RedisStore::lease_name(e.key, "sm_90")}).integer, 0);
  EXPECT_EQ(redis({"EXISTS", RedisStore::entry_name(e.key, "sm_90")}).integer, 0);
}

TEST_F(RedisStoreTest, ALeaseReleasedDuringAnOutageIsReleasedOnceTheServerAnswersAgain) {
  // Otherwise a hiccup at the end of a compile would block the key for the lease's whole lifetime.
  // A server that keeps its data (AOF) across the restart, as a production one may.
  server_.reset();
  server_ = std::make_unique<testing::RedisServer>(dir_->path() / "redis-aof",
                                                   std::vector<std::string>{"--appendonly", "yes"});
  const cache::Entry e = make_entry("remote-release-later");
  auto a = machine();
  std::string token;
  ASSERT_EQ(a->try_lease(e.key, "sm_90", &token), RedisStore::Lease::Taken);
  server_->stop();
  WarningCapture warnings;
  a->release_lease(e.key, "sm_90", token);  // refused: kept for later
  server_->start();
  ASSERT_EQ(redis({"EXISTS", RedisStore::lease_name(e.key, "sm_90")}).integer, 1) << "the lease survived the restart";
  // Any operation that gets an answer, once the (short) back-off has passed, releases it.
  EXPECT_TRUE(eventually([&] {
    a->get(e.key, "sm_90");
    return redis({"EXISTS", RedisStore::lease_name(e.key, "sm_90")}).integer == 0;
  })) << "the lease was never released";
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
}

TEST_F(RedisStoreTest, ALeaseIsReleasedOnlyByItsHolder) {
  const cache::Entry e = make_entry("remote-lease-token");
  auto a = machine(), b = machine();
  std::string ta, tb;
  ASSERT_EQ(a->try_lease(e.key, "sm_90", &ta), RedisStore::Lease::Taken);
  EXPECT_EQ(b->try_lease(e.key, "sm_90", &tb), RedisStore::Lease::Held);
  b->release_lease(e.key, "sm_90", "not-the-token");
  EXPECT_EQ(redis({"EXISTS", RedisStore::lease_name(e.key, "sm_90")}).integer, 1);
  a->release_lease(e.key, "sm_90", ta);
  EXPECT_EQ(redis({"EXISTS", RedisStore::lease_name(e.key, "sm_90")}).integer, 0);
}

TEST_F(RedisStoreTest, GetManyFetchesEveryRequestInOneRoundTrip) {
  std::vector<std::pair<cache::CacheKey, std::string>> asks;
  ASSERT_NO_FATAL_FAILURE(put_three("remote-many-", &asks));
  asks.emplace_back(testing::key_for("remote-many-absent"), "sm_90");
  const cache::FetchedMany got = machine()->get_many(asks);
  ASSERT_TRUE(got.ok()) << got.error;
  ASSERT_EQ(got.results.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(got.results[i].entry && got.results[i].entry->key == asks[i].first);
  EXPECT_FALSE(got.results[3].entry);
  EXPECT_FALSE(got.results[3].refused);
}

TEST_F(RedisStoreTest, AnMgetRefusedByRedisIsAnErrorNotMisses) {
  // An ACL user with every permission kjit needs but +mget (a likely slip): the values are there, and
  // the lookup must say it was refused, not that they are missing.
  std::vector<std::pair<cache::CacheKey, std::string>> asks;
  ASSERT_NO_FATAL_FAILURE(put_three("remote-noperm-", &asks));
  redis({"ACL", "SETUSER", "kjit", "on", ">kjit-password", "~kjit:*", "+get", "+set", "+exists", "+eval", "+del",
         "+pexpire", "+pttl", "+ping"});
  cache::RemoteConfig c = config();
  c.url = "redis://kjit:kjit-password@" + c.url.substr(std::string("redis://").size());
  RedisStore store(c);
  ASSERT_TRUE(store.get(asks[0].first, "sm_90")) << "the user can GET";
  WarningCapture warnings;
  const cache::FetchedMany got = store.get_many(asks);
  EXPECT_FALSE(got.ok());
  EXPECT_TRUE(got.answered);
  EXPECT_TRUE(got.results.empty());
  EXPECT_NE(got.error.find("NOPERM"), std::string::npos) << got.error;
  EXPECT_NE(got.error.find("+mget"), std::string::npos) << "the hint: " << got.error;
  EXPECT_EQ(warnings.count(), 0u) << "the caller reports it: " << warnings.all();
}

TEST_F(RedisStoreTest, AChainCopiesARemoteHitOntoTheDisk) {
  const cache::Entry e = make_entry("remote-backfill");
  ASSERT_TRUE(machine()->put(e));
  auto disk = std::make_shared<cache::DiskCache>(testing::cache_config(dir_->path() / "disk"));
  cache::StoreChain chain({{disk, false}, {machine(), true}});
  auto hit = chain.get(e.key, "sm_90");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->level, 1u);
  EXPECT_TRUE(disk->get(e.key, "sm_90")) << "backfilled";
  server_->stop();
  auto again = chain.get(e.key, "sm_90");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->level, 0u);
}

// ---- a hostile server (scripted) -----------------------------------------------------------------

using testing::ScriptedRedis;

// Resident memory of this process now, in bytes.
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

cache::RemoteConfig scripted_config(const ScriptedRedis& server, double timeout_s, double lease_s = 60) {
  cache::RemoteConfig c;
  c.url = server.url();
  c.secret = kSecret;
  c.timeout_s = timeout_s;
  c.lease_s = lease_s;
  return c;
}

TEST(HostileRedis, ATricklingReplyCostsOneTimeoutForTheWholeReply) {
  ScriptedRedis server([](const std::vector<std::string>&) { return ScriptedRedis::trickled_bulk(); });
  cache::RedisConnection c(server.endpoint(), 0.3);  // a byte every 50 ms: each read() well within it
  const auto t0 = Clock::now();
  try {
    c.command({"GET", "kjit:v1:sm_90:x"});
    ADD_FAILURE() << "a reply that would take 5000 s was read";
  } catch (const cache::RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("KJIT_REMOTE_CACHE_TIMEOUT"), std::string::npos) << e.what();
  }
  const double took = seconds_since(t0);
  EXPECT_GE(took, 0.25);
  EXPECT_LT(took, 3.0) << "the 0.3 s limit bounds the whole reply, not each read()";
  EXPECT_THROW(c.command({"PING"}), cache::RemoteError) << "a connection that failed is not used again";
}

TEST(HostileRedis, ATricklingAuthOrSelectCostsOneTimeoutForTheWholeSetUp) {
  ScriptedRedis server([](const std::vector<std::string>&) { return ScriptedRedis::trickled_bulk(); });
  cache::RedisEndpoint e = server.endpoint();
  e.user = "kjit";
  e.password = "a password that must not be shown";
  e.db = 3;
  const auto t0 = Clock::now();
  try {
    cache::RedisConnection c(e, 0.3);
    ADD_FAILURE() << "set up through a reply that would take 5000 s";
  } catch (const cache::RemoteError& err) {
    EXPECT_NE(std::string(err.what()).find("AUTH and 1 more command timed out"), std::string::npos) << err.what();
    EXPECT_EQ(std::string(err.what()).find(e.password), std::string::npos) << err.what();
  }
  EXPECT_LT(seconds_since(t0), 4.0);
}

TEST(HostileRedis, ATricklingServerMakesLookupsMissesAndTheCompileLocal) {
  ScriptedRedis server([](const std::vector<std::string>&) { return ScriptedRedis::trickled_bulk(); });
  RedisStore store(scripted_config(server, 0.3));
  const cache::Entry e = make_entry("hostile-trickle");
  WarningCapture warnings;
  const auto t0 = Clock::now();
  EXPECT_FALSE(store.get(e.key, "sm_90"));
  EXPECT_LT(seconds_since(t0), 4.0);
  int produced = 0;
  const cache::FlightResult r = produce_counting(store, e, &produced);  // backing off: at once
  EXPECT_EQ(produced, 1) << "compiled locally";
  EXPECT_FALSE(r.fetched);
  EXPECT_FALSE(store.get_many({{e.key, "sm_90"}}).answered);
  EXPECT_LT(seconds_since(t0), 4.0);
  ASSERT_TRUE(one_warning_saying(warnings, "does not answer (GET timed out"));
}

TEST(HostileRedis, ATricklingLeaseRenewalDoesNotHoldUpTheCompile) {
  // The lease is taken and the lookups answer; only the renewal (EVAL, on the LeaseKeeper's thread,
  // which the compile's end joins) trickles.
  ScriptedRedis server([](const std::vector<std::string>& args) {
    ScriptedRedis::Answer a;
    if (args[0] == "SET") {
      a.now = "+OK\r\n";
    } else if (args[0] == "EVAL") {
      a = ScriptedRedis::trickled_bulk();
    } else {
      a.now = "$-1\r\n";
    }
    return a;
  });
  RedisStore store(scripted_config(server, 0.25, /*lease_s=*/0.3));  // renewed every 0.1 s
  const cache::Entry e = make_entry("hostile-renewal");
  WarningCapture warnings;
  const auto t0 = Clock::now();
  const cache::FlightResult r = cache::produce_once(store, e.key, "sm_90", [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // a compile longer than the lease
    return e;
  });
  EXPECT_TRUE(testing::same_entry(r.entry, e));
  EXPECT_LT(seconds_since(t0), 3.0) << "the compile waited for a renewal that never ends";
  const auto commands = server.received();
  EXPECT_NE(std::find(commands.begin(), commands.end(), "EVAL"), commands.end()) << "no renewal was tried";
  EXPECT_EQ(warnings.count(), 1u) << warnings.all();
}

TEST(HostileRedis, TheBackoffStartsAtTheSettingAndDoublesWithEachFailedRetry) {
  // Every reply is refused at its header (8 GiB announced): each try fails at once, and each GET the
  // server receives is a try.
  ScriptedRedis server([](const std::vector<std::string>&) {
    ScriptedRedis::Answer a;
    a.now = ScriptedRedis::bulk_header(8ull << 30);
    a.hold = true;
    return a;
  });
  cache::RemoteConfig c = scripted_config(server, 2.0);
  c.backoff_s = 0.1;
  RedisStore store(c);
  const cache::CacheKey key = testing::key_for("hostile-backoff");
  WarningCapture warnings;
  const auto t0 = Clock::now();
  while (seconds_since(t0) < 0.65) {
    EXPECT_FALSE(store.get(key, "sm_90"));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Tries at 0, 0.1 and 0.3 s (the next at 0.7 s); a back-off that stayed at 0.1 s would have made 7.
  const auto commands = server.received();
  const auto gets = std::count(commands.begin(), commands.end(), "GET");
  EXPECT_GE(gets, 2);
  EXPECT_LE(gets, 4);
  EXPECT_EQ(warnings.count(), 1u) << "once per outage: " << warnings.all();
}

TEST(HostileRedis, AValueAnnouncedLargerThanAnyEntryIsRefusedAtItsHeader) {
  // 8 GiB announced, 4 KB sent, then silence with the connection open: refused on the header, at once,
  // not at the 5 s deadline, and nothing of the body is kept.
  ScriptedRedis server([](const std::vector<std::string>&) {
    ScriptedRedis::Answer a;
    a.now = ScriptedRedis::bulk_header(8ull << 30, 4096);
    a.hold = true;
    return a;
  });
  const std::size_t rss0 = resident_bytes();
  cache::RedisConnection c(server.endpoint(), 5.0);
  const auto t0 = Clock::now();
  try {
    c.command({"GET", "kjit:v1:sm_90:x"});
    ADD_FAILURE() << "an 8 GiB value was read";
  } catch (const cache::RemoteError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("8589934592 bytes announced"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(cache::kMaxRemoteValueBytes) + " bytes allowed"), std::string::npos) << what;
    EXPECT_EQ(what.find("timed out"), std::string::npos) << what;
  }
  EXPECT_LT(seconds_since(t0), 1.0) << "refused at the deadline, not at the header";
  EXPECT_LT(resident_bytes(), rss0 + (64u << 20));

  // Through the store: a miss, one warning, the compile local.
  RedisStore store(scripted_config(server, 5.0));
  const cache::Entry e = make_entry("hostile-huge");
  WarningCapture warnings;
  const auto t1 = Clock::now();
  int produced = 0;
  produce_counting(store, e, &produced);
  EXPECT_EQ(produced, 1);
  EXPECT_LT(seconds_since(t1), 1.0);
  ASSERT_TRUE(one_warning_saying(warnings, "8589934592 bytes announced"));
}

TEST(HostileRedis, AnArrayAnnouncedLargerThanTheRequestCanNeedIsRefusedAtItsHeader) {
  ScriptedRedis server([](const std::vector<std::string>& args) {
    ScriptedRedis::Answer a;
    a.now = args[0] == "GET" ? "*100000000\r\n$-1\r\n" : "*1000000\r\n";
    a.hold = true;
    return a;
  });
  const auto t0 = Clock::now();
  for (const cache::RedisConnection::Command& cmd :
       {cache::RedisConnection::Command{"GET", "k"}, cache::RedisConnection::Command{"MGET", "a", "b", "c"}}) {
    cache::RedisConnection c(server.endpoint(), 5.0);
    try {
      c.command(cmd);
      ADD_FAILURE() << "accepted for " << cmd[0];
    } catch (const cache::RemoteError& e) {
      EXPECT_NE(std::string(e.what()).find("elements announced"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(cmd.size() + cache::kRespElementSlack) + " elements allowed"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_LT(seconds_since(t0), 1.5);
}

TEST(HostileRedis, ALargeValueWithinTheLimitStillComesThrough) {
  // 24 MiB, sent in one go by a scripted server: many reads, the scanner skipping the body across them.
  const std::string value(24u << 20, 'v');
  ScriptedRedis server([&](const std::vector<std::string>&) {
    ScriptedRedis::Answer a;
    a.now = "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n";
    return a;
  });
  cache::RedisConnection c(server.endpoint(), 10.0);
  const std::vector<cache::RedisReply> r = c.pipeline({{"GET", "a"}, {"GET", "b"}});
  ASSERT_EQ(r.size(), 2u);
  for (const auto& reply : r) {
    EXPECT_EQ(reply.type, cache::RedisReply::Type::String);
    EXPECT_TRUE(reply.str == value);
  }
}

TEST(HostileRedis, AnMgetAnswerThatIsNotOneValuePerKeyIsAnError) {
  std::vector<std::pair<cache::CacheKey, std::string>> asks;
  for (const char* name : {"mget-a", "mget-b", "mget-c"}) asks.emplace_back(testing::key_for(name), "sm_90");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"*2\r\n$-1\r\n$-1\r\n", "an array of 2 values"},
      {":3\r\n", "an integer instead of an array"},
      {"*3\r\n$-1\r\n:1\r\n$-1\r\n", "an integer as value 2"},
      {"-LOADING Redis is loading the dataset in memory\r\n", "it answers soon"}};
  for (const auto& [reply, expected] : cases) {
    ScriptedRedis server([reply = reply](const std::vector<std::string>&) {
      ScriptedRedis::Answer a;
      a.now = reply;
      return a;
    });
    RedisStore store(scripted_config(server, 2.0));
    const cache::FetchedMany got = store.get_many(asks);
    EXPECT_TRUE(got.answered) << reply;
    EXPECT_FALSE(got.ok()) << reply;
    EXPECT_TRUE(got.results.empty()) << reply;
    EXPECT_NE(got.error.find(expected), std::string::npos) << got.error;
  }
}

}  // namespace
}  // namespace kjit
