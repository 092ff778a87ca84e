// Settings: every variable typed and validated; a bad value names the variable and what is allowed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <thread>

#include "cache_test_helpers.hpp"
#include "kjit/cache/disk_cache.hpp"
#include "kjit/cache_config.hpp"
#include "kjit/error.hpp"
#include "kjit/settings.hpp"
#include "settings_support.hpp"
#include "test_support.hpp"

using namespace kjit;
namespace fs = std::filesystem;

namespace {

// Changes the current directory for the scope of the object.
class ScopedCwd {
 public:
  explicit ScopedCwd(const fs::path& dir) : old_(fs::current_path()) { fs::current_path(dir); }
  ~ScopedCwd() {
    std::error_code ec;
    fs::current_path(old_, ec);
  }

 private:
  fs::path old_;
};

}  // namespace

TEST(Settings, Defaults) {
  Settings s = Settings::from_map({{"HOME", "/home/u"}});
  EXPECT_EQ(s.cache_dir, "/home/u/.cache/kjit");
  EXPECT_EQ(s.cache_mode, CacheMode::ReadWrite);
  EXPECT_FALSE(s.cache_max_bytes);
  EXPECT_EQ(s.max_specializations, 16);
}

TEST(Settings, CacheDirPrecedence) {
  EXPECT_EQ(Settings::from_map({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}}).cache_dir, "/x/kjit");
  EXPECT_EQ(Settings::from_map({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}, {"KJIT_CACHE_DIR", "/k"}}).cache_dir, "/k");
}

TEST(Settings, ParsesTypedValues) {
  Settings s = Settings::from_map({{"KJIT_CACHE_MODE", "strict"},
                                   {"KJIT_CACHE_MAX_BYTES", "2G"},
                                   {"KJIT_CACHE_PATH", "/a::/b"},
                                   {"KJIT_LOCK_TIMEOUT", "2.5"},
                                   {"KJIT_VERBOSE", "1"}});
  EXPECT_EQ(s.cache_mode, CacheMode::Strict);
  EXPECT_EQ(*s.cache_max_bytes, 2ull << 30);
  ASSERT_EQ(s.cache_layers.size(), 2u);
  EXPECT_EQ(s.cache_layers[1], "/b");
  EXPECT_DOUBLE_EQ(s.lock_timeout_s, 2.5);
  EXPECT_EQ(s.verbose, 1);
}

TEST(Settings, BadValuesNameTheVariable) {
  EXPECT_EQ(kjit::testing::settings_error({{"KJIT_CACHE_MODE", "fast"}}),
            "KJIT_CACHE_MODE='fast' is not valid: allowed readwrite | readonly | strict | off. Unset it for the "
            "default (readwrite).");
  EXPECT_THROW(Settings::from_map({{"KJIT_CACHE_MAX_BYTES", "-5"}}), ValueError);
  EXPECT_THROW(Settings::from_map({{"KJIT_CACHE_MAX_BYTES", "12X"}}), ValueError);
  EXPECT_THROW(Settings::from_map({{"KJIT_CACHE_MAX_BYTES", "0"}}), ValueError);
  EXPECT_THROW(Settings::from_map({{"KJIT_VERBOSE", "3"}}), ValueError);
  EXPECT_THROW(Settings::from_map({{"KJIT_LOCK_TIMEOUT", "0"}}), ValueError);
  EXPECT_THROW(Settings::from_map({{"KJIT_MAX_SPECIALIZATIONS", "many"}}), ValueError);
}

TEST(Settings, RelativePathsAreResolvedOnceAgainstTheDirectoryOfStartUp) {
  // A relative KJIT_CACHE_DIR must not follow a later chdir() (os.chdir in Python) into a folder
  // the start-up trust check never saw; the same for every path setting.
  kjit::testing::TempDir start, elsewhere;
  Settings s;
  {
    ScopedCwd cwd(start.path());
    s = Settings::from_map({{"KJIT_CACHE_DIR", "cache"},
                            {"KJIT_CACHE_PATH", "layer:/abs/layer"},
                            {"KJIT_RECORD", "./rec.json"},
                            {"KJIT_INCLUDE_PATH", "inc"},
                            {"KJIT_TEMPLATES_DIR", "tpl"},
                            {"KJIT_CUDA_HOME", "cuda"},
                            {"KJIT_NVRTC_LIBRARY", "lib/libnvrtc.so"}});
  }
  ScopedCwd cwd(elsewhere.path());
  EXPECT_EQ(s.cache_dir, start.path() / "cache");
  ASSERT_EQ(s.cache_layers.size(), 2u);
  EXPECT_EQ(s.cache_layers[0], start.path() / "layer");
  EXPECT_EQ(s.cache_layers[1], "/abs/layer");
  EXPECT_EQ(*s.record_path, start.path() / "rec.json");
  ASSERT_EQ(s.include_dirs.size(), 1u);
  EXPECT_EQ(s.include_dirs[0], start.path() / "inc");
  EXPECT_EQ(*s.templates_dir, start.path() / "tpl");
  EXPECT_EQ(*s.cuda_home, start.path() / "cuda");
  EXPECT_EQ(*s.nvrtc_library, start.path() / "lib" / "libnvrtc.so");

  // The cache made after the chdir (the engine makes it on first use) writes where start-up said.
  fs::create_directories(elsewhere.path() / "cache");
  fs::permissions(elsewhere.path() / "cache", fs::perms::all);  // one the trust check would refuse
  cache::DiskCache c(disk_cache_config(s));
  EXPECT_TRUE(c.writable()) << c.describe();
  const cache::Entry e = kjit::testing::make_entry("settings-relative-cache-dir");
  ASSERT_TRUE(c.store(e));
  EXPECT_TRUE(fs::exists(start.path() / "cache" / "v1"));
  EXPECT_TRUE(kjit::testing::files_under(elsewhere.path()).empty());
}

TEST(Settings, RelativeDefaultCacheDirsAreResolvedToo) {
  kjit::testing::TempDir start;
  ScopedCwd cwd(start.path());
  EXPECT_EQ(Settings::from_map({{"XDG_CACHE_HOME", "xdg"}}).cache_dir, start.path() / "xdg" / "kjit");
  EXPECT_EQ(Settings::from_map({{"HOME", "home"}}).cache_dir, start.path() / "home" / ".cache" / "kjit");
}

// Expects from_map(vars) to throw a ValueError whose message contains each of `parts`.
static void expect_refused(const std::map<std::string, std::string>& vars, std::vector<std::string> parts) {
  const std::string message = kjit::testing::settings_error(vars);
  for (const auto& p : parts) EXPECT_NE(message.find(p), std::string::npos) << message;
}

TEST(Settings, RemoteCacheNeedsAUrlAndADeploymentSecret) {
  EXPECT_FALSE(Settings::from_map({{"HOME", "/h"}}).remote_cache);
  const std::string secret(32, 's');
  Settings s = Settings::from_map({{"KJIT_REMOTE_CACHE", "redis://10.1.2.3:7000/2"},
                                   {"KJIT_REMOTE_CACHE_SECRET", secret},
                                   {"KJIT_REMOTE_CACHE_MODE", "read"},
                                   {"KJIT_REMOTE_CACHE_TIMEOUT", "0.25"},
                                   {"KJIT_REMOTE_CACHE_LEASE", "90"},
                                   {"KJIT_REMOTE_CACHE_BACKOFF", "0.005"}});
  ASSERT_TRUE(s.remote_cache);
  EXPECT_EQ(s.remote_cache->url, "redis://10.1.2.3:7000/2");
  EXPECT_EQ(s.remote_cache->secret, secret);
  EXPECT_EQ(s.remote_cache->mode, cache::RemoteMode::Read);
  EXPECT_EQ(s.remote_cache->timeout_s, 0.25);
  EXPECT_EQ(s.remote_cache->lease_s, 90);
  EXPECT_EQ(s.remote_cache->backoff_s, 0.005);
  Settings d = Settings::from_map({{"KJIT_REMOTE_CACHE", "redis://h"}, {"KJIT_REMOTE_CACHE_SECRET", secret}});
  EXPECT_EQ(d.remote_cache->mode, cache::RemoteMode::ReadWrite);
  EXPECT_EQ(d.remote_cache->timeout_s, 1.0);
  EXPECT_EQ(d.remote_cache->lease_s, 60.0);
  EXPECT_EQ(d.remote_cache->backoff_s, 1.0);

  expect_refused({{"KJIT_REMOTE_CACHE", "redis://h"}}, {"KJIT_REMOTE_CACHE_SECRET", "openssl rand"});
  expect_refused({{"KJIT_REMOTE_CACHE", "redis://h"}, {"KJIT_REMOTE_CACHE_SECRET", "short"}},
                 {"KJIT_REMOTE_CACHE_SECRET", "5 bytes", "at least 16"});
  expect_refused({{"KJIT_REMOTE_CACHE", "http://h"}, {"KJIT_REMOTE_CACHE_SECRET", secret}},
                 {"KJIT_REMOTE_CACHE", "redis://[user:password@]host[:port][/db]"});
  expect_refused(
      {{"KJIT_REMOTE_CACHE", "redis://h"}, {"KJIT_REMOTE_CACHE_SECRET", secret}, {"KJIT_REMOTE_CACHE_MODE", "write"}},
      {"KJIT_REMOTE_CACHE_MODE", "readwrite | read"});
  expect_refused(
      {{"KJIT_REMOTE_CACHE", "redis://h"}, {"KJIT_REMOTE_CACHE_SECRET", secret}, {"KJIT_REMOTE_CACHE_TIMEOUT", "0"}},
      {"KJIT_REMOTE_CACHE_TIMEOUT"});
  for (const char* bad : {"0", "-1", "soon", "1s", "nan"})
    expect_refused(
        {{"KJIT_REMOTE_CACHE", "redis://h"}, {"KJIT_REMOTE_CACHE_SECRET", secret}, {"KJIT_REMOTE_CACHE_BACKOFF", bad}},
        {std::string("KJIT_REMOTE_CACHE_BACKOFF='") + bad + "' is not valid: allowed seconds, a number > 0",
         "Example: KJIT_REMOTE_CACHE_BACKOFF=0.25."});
  expect_refused({{"KJIT_REMOTE_CACHE", "redis://h"},
                  {"KJIT_REMOTE_CACHE_SECRET", secret},
                  {"KJIT_REMOTE_CACHE_SECRET_FILE", "/x"}},
                 {"both set"});
}

TEST(Settings, RemoteCacheSecretFromAFile) {
  kjit::testing::TempDir dir;
  const fs::path file = dir.path() / "secret";
  {
    std::ofstream(file) << "0123456789abcdef0123\n";
  }
  Settings s =
      Settings::from_map({{"KJIT_REMOTE_CACHE", "redis://h"}, {"KJIT_REMOTE_CACHE_SECRET_FILE", file.string()}});
  EXPECT_EQ(s.remote_cache->secret, "0123456789abcdef0123") << "one trailing newline is not part of it";
  expect_refused(
      {{"KJIT_REMOTE_CACHE", "redis://h"}, {"KJIT_REMOTE_CACHE_SECRET_FILE", (dir.path() / "none").string()}},
      {"KJIT_REMOTE_CACHE_SECRET_FILE", "cannot be read"});
}

// The secret file is read as the cache reads its files (hostile review 3, item 9): a FIFO nobody writes
// (which blocked every `import kjit` in open()), an endless device (read until memory ran out) and a
// file too large to be a secret are refused at once, naming the variable. Each is parsed on a thread of
// its own, so that a parse that blocks fails the test instead of hanging it.
TEST(Settings, RemoteCacheSecretFileThatIsNotASmallRegularFileIsRefusedAtOnce) {
  kjit::testing::TempDir dir;
  const fs::path fifo = dir.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const fs::path big = dir.path() / "big";
  {
    std::ofstream(big) << std::string(100 * 1024, 'x');
  }
  for (const auto& [file, why] : std::vector<std::pair<std::string, std::string>>{
           {fifo.string(), "not a regular file"}, {"/dev/zero", "not a regular file"}, {big.string(), "larger"}}) {
    auto outcome = std::make_shared<std::promise<std::string>>();
    std::future<std::string> parsed = outcome->get_future();
    std::thread([outcome, file = file] {
      try {
        Settings::from_map({{"KJIT_REMOTE_CACHE", "redis://h"}, {"KJIT_REMOTE_CACHE_SECRET_FILE", file}});
        outcome->set_value("accepted");
      } catch (const ValueError& e) {
        outcome->set_value(e.what());
      } catch (const std::exception& e) {
        outcome->set_value(std::string("not a ValueError: ") + e.what());
      }
    }).detach();
    ASSERT_EQ(parsed.wait_for(std::chrono::seconds(20)), std::future_status::ready) << file << ": still reading it";
    const std::string message = parsed.get();
    EXPECT_NE(message.find("KJIT_REMOTE_CACHE_SECRET_FILE"), std::string::npos) << file << ": " << message;
    EXPECT_NE(message.find(why), std::string::npos) << file << ": " << message;
    EXPECT_NE(message.find("regular file of at most 64 KiB"), std::string::npos) << file << ": " << message;
  }
}
