// Concurrency: processes and threads missing the same keys compile each once; a dead lock holder
// blocks nobody; a stuck one makes waiters time out with a clear error.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <sstream>
#include <thread>

#include "cache_test_helpers.hpp"
#include "child_process.hpp"
#include "kjit/cache/disk_cache.hpp"
#include "kjit/cache/entry.hpp"
#include "kjit/cache/unique_fd.hpp"
#include "kjit/error.hpp"
#include "test_support.hpp"

using namespace kjit::cache;
using namespace kjit::testing;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kProcesses = 8;
constexpr int kKeys = 20;

std::string seed_of(int i) { return "race-key-" + std::to_string(i); }

// Appends one line with a single O_APPEND write (atomic with respect to other appenders).
void append_line(const fs::path& log, const std::string& line) {
  UniqueFd fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!fd) throw std::runtime_error("cannot open " + log.string());
  const std::string text = line + "\n";
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    throw std::runtime_error("short append to " + log.string());
}

std::map<std::string, int> count_lines(const fs::path& log) {
  std::map<std::string, int> counts;
  std::istringstream in(fs::exists(log) ? read_file(log) : std::string());
  std::string line;
  while (std::getline(in, line)) ++counts[line];
  return counts;
}

// Forks a child that takes the lock of `e` (inside produce) and then blocks until it is killed; its pid
// once it holds the lock, -1 when it does not get there.
pid_t fork_lock_holder(const fs::path& root, const Entry& e) {
  return fork_until_ready([&](const std::function<bool()>& locked) {
    DiskCache c(cache_config(root));
    c.load_or_produce(
        e.key, "sm_90",
        [&]() -> Entry {
          if (!locked()) ::_exit(3);
          for (;;) ::pause();
        },
        nullptr);
    return 2;
  });
}

}  // namespace

TEST(CacheRace, EightProcessesProduceEachKeyOnce) {
  TempDir dir;
  const fs::path root = dir.path() / "cache", log = dir.path() / "produced.log";
  run_children(kProcesses, [&](int) {
    int code = 0;
    DiskCache c(cache_config(root));  // each process its own cache object on the same root
    for (int i = 0; i < kKeys; ++i) {
      const Entry e = make_entry(seed_of(i), "sm_90", 2000 + i);
      bool produced = false;
      const Entry got = c.load_or_produce(
          e.key, "sm_90",
          [&] {
            append_line(log, e.key.hex());
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            return e;
          },
          &produced);
      if (!same_entry(got, e)) code = 1;
    }
    return code;
  });

  const auto counts = count_lines(log);
  EXPECT_EQ(counts.size(), static_cast<std::size_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    const Entry e = make_entry(seed_of(i), "sm_90", 2000 + i);
    auto it = counts.find(e.key.hex());
    EXPECT_TRUE(it != counts.end() && it->second == 1)
        << "key " << i << " produced " << (it == counts.end() ? 0 : it->second) << " times";
    const fs::path path = DiskCache(cache_config(root, kjit::cache::CacheMode::ReadOnly)).entry_path(e.key, "sm_90");
    const DecodeResult r = decode_entry(read_file(path), &e.key);
    EXPECT_TRUE(r.entry.has_value()) << path << ": " << r.error;
  }
  EXPECT_TRUE(files_named(root, ".lock").empty()) << "no lock file remains";
  EXPECT_TRUE(files_named(root, ".tmp.").empty()) << "no temp file remains";
}

// A holder whose produce() fails unlinks the lock file and releases it: of the processes that were
// waiting on that (now unlinked) file and the ones arriving on a fresh one, exactly one may produce.
TEST(CacheRace, FailedProducerHandsTheLockToExactlyOneProcess) {
  TempDir dir;
  const fs::path root = dir.path() / "cache", log = dir.path() / "produced.log";
  run_children(kProcesses, [&](int) {
    DiskCache c(cache_config(root));
    for (int i = 0; i < kKeys; ++i) {
      const Entry e = make_entry("fail-" + seed_of(i));
      for (int attempt = 0; attempt < 2; ++attempt) {
        try {
          c.load_or_produce(
              e.key, "sm_90",
              [&] {
                std::this_thread::sleep_for(std::chrono::milliseconds(3));
                // The first producer of each key fails (the log tells whether one already did).
                if (count_lines(log)["fail " + e.key.hex()] == 0) {
                  append_line(log, "fail " + e.key.hex());
                  throw std::runtime_error("compile failed");
                }
                append_line(log, "ok " + e.key.hex());
                return e;
              },
              nullptr);
          break;
        } catch (const std::runtime_error&) {
        }
      }
    }
    return 0;
  });
  auto counts = count_lines(log);
  for (int i = 0; i < kKeys; ++i) {
    const std::string k = make_entry("fail-" + seed_of(i)).key.hex();
    EXPECT_EQ(counts["ok " + k], 1) << "key " << i;
  }
  EXPECT_TRUE(files_named(root, ".lock").empty());
}

TEST(CacheRace, ThreadsOfOneProcessProduceEachKeyOnce) {
  TempDir dir;
  DiskCache c(cache_config(dir.path()));
  std::vector<std::atomic<int>> calls(kKeys);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int n = 0; n < kKeys; ++n) {
        const int i = (n + t) % kKeys;  // different orders, same keys
        const Entry e = make_entry("thread-" + seed_of(i));
        try {
          const Entry got = c.load_or_produce(
              e.key, "sm_90",
              [&] {
                calls[i]++;
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
                return e;
              },
              nullptr);
          if (!same_entry(got, e)) failures++;
        } catch (...) {
          failures++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (int i = 0; i < kKeys; ++i) EXPECT_EQ(calls[i].load(), 1) << "key " << i;
  EXPECT_TRUE(files_named(dir.path(), ".lock").empty());
  EXPECT_TRUE(files_named(dir.path(), ".tmp.").empty());
}

TEST(CacheRace, KilledLockHolderDoesNotBlockTheNextProcess) {
  TempDir dir;
  const Entry e = make_entry("race-killed-holder");
  DiskCache probe(cache_config(dir.path()));
  const fs::path lock = probe.entry_path(e.key, "sm_90").parent_path() / (e.key.hex() + ".lock");

  ChildGuard holder(fork_lock_holder(dir.path(), e));
  ASSERT_GT(holder.pid(), 0) << "the lock holder did not start";
  ASSERT_TRUE(lock_is_held(lock)) << "the child holds the lock while it compiles";
  ASSERT_EQ(holder.finish(/*kill=*/true), -2) << "killed by SIGKILL";

  EXPECT_TRUE(fs::exists(lock)) << "a killed holder leaves its lock file behind";
  EXPECT_FALSE(lock_is_held(lock)) << "but the kernel released its flock";

  auto cfg = cache_config(dir.path());
  cfg.lock_timeout_s = 10;
  DiskCache c(cfg);
  const auto start = Clock::now();
  bool produced = false;
  EXPECT_TRUE(same_entry(c.load_or_produce(e.key, "sm_90", [&] { return e; }, &produced), e));
  EXPECT_TRUE(produced);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5)) << "did not wait for the dead holder";
  EXPECT_FALSE(fs::exists(lock)) << "the next holder removes the lock file";
  EXPECT_TRUE(c.load(e.key, "sm_90").has_value());
}

TEST(CacheRace, StuckLockHolderMakesWaitersTimeOutClearly) {
  TempDir dir;
  const Entry e = make_entry("race-stuck-holder");
  ChildGuard holder(fork_lock_holder(dir.path(), e));
  ASSERT_GT(holder.pid(), 0);

  auto cfg = cache_config(dir.path());
  cfg.lock_timeout_s = 0.3;
  DiskCache c(cfg);
  const auto start = Clock::now();
  std::string message;
  try {
    c.load_or_produce(e.key, "sm_90", [&] { return e; }, nullptr);
  } catch (const kjit::Error& ex) {
    message = ex.what();
  }
  const auto waited = Clock::now() - start;
  holder.finish(/*kill=*/true);

  ASSERT_FALSE(message.empty()) << "expected a timeout error";
  EXPECT_NE(message.find(e.key.hex() + ".lock"), std::string::npos) << message;
  EXPECT_NE(message.find("KJIT_LOCK_TIMEOUT"), std::string::npos) << message;
  EXPECT_NE(message.find("timed out after 0.3"), std::string::npos) << message;
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_LT(waited, std::chrono::seconds(3));
}

TEST(CacheRace, WaiterGetsTheEntryTheHolderPublished) {
  TempDir dir;
  const Entry e = make_entry("race-waiter-hit");
  const fs::path log = dir.path() / "produced.log";
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(go[1]);
    int code = 0;
    try {
      DiskCache c(cache_config(dir.path() / "cache"));
      c.load_or_produce(
          e.key, "sm_90",
          [&] {
            append_line(log, "child");
            char x;
            if (::read(go[0], &x, 1) != 1) ::_exit(4);  // hold the lock until the parent waits on it
            return e;
          },
          nullptr);
    } catch (...) {
      code = 2;
    }
    ::_exit(code);
  }
  ChildGuard child(pid);
  ::close(go[0]);
  // Wait until the child is inside produce (holding the lock), then race it.
  for (int i = 0; i < 2000 && count_lines(log).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(count_lines(log)["child"], 1);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    char x = 'g';
    (void)::write(go[1], &x, 1);
  });
  DiskCache c(cache_config(dir.path() / "cache"));
  bool produced = true;
  const Entry got = c.load_or_produce(
      e.key, "sm_90",
      [&] {
        append_line(log, "parent");
        return e;
      },
      &produced);
  release.join();
  ::close(go[1]);
  EXPECT_EQ(child.finish(/*kill=*/false), 0);
  EXPECT_FALSE(produced) << "the waiter re-checks the cache under the lock";
  EXPECT_TRUE(same_entry(got, e));
  EXPECT_EQ(count_lines(log)["parent"], 0);
  EXPECT_TRUE(files_named(dir.path(), ".lock").empty());
}
