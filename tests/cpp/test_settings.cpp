// Settings: every variable typed and validated; a bad value names the variable and what is allowed.
#include <gtest/gtest.h>

#include "kjit/error.hpp"
#include "kjit/settings.hpp"

using namespace kjit;

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
  try {
    Settings::from_map({{"KJIT_CACHE_MODE", "fast"}});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "KJIT_CACHE_MODE='fast' is not valid: allowed readwrite | readonly | strict | off. Unset it for the "
                 "default (readwrite).");
  }
  EXPECT_THROW(Settings::from_map({{"KJIT_CACHE_MAX_BYTES", "-5"}}), ValueError);
  EXPECT_THROW(Settings::from_map({{"KJIT_CACHE_MAX_BYTES", "12X"}}), ValueError);
  EXPECT_THROW(Settings::from_map({{"KJIT_CACHE_MAX_BYTES", "0"}}), ValueError);
  EXPECT_THROW(Settings::from_map({{"KJIT_VERBOSE", "3"}}), ValueError);
  EXPECT_THROW(Settings::from_map({{"KJIT_LOCK_TIMEOUT", "0"}}), ValueError);
  EXPECT_THROW(Settings::from_map({{"KJIT_MAX_SPECIALIZATIONS", "many"}}), ValueError);
}
