// A remote store registered by URL scheme: KJIT_REMOTE_CACHE=<scheme>://... makes it the remote level of
// the Engine's store chain, which reads and writes it (a compile is published there, and another
// machine's process takes it from there and keeps it on its disk). The Engine names no store type.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine_support.hpp"
#include "kjit/cache/store_registry.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "map_store.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::MapStore;
using kjit::testing::prepared_origin;
using kjit::testing::TempDir;

namespace {

const std::string kSecret(32, 's');

// The one store behind every memtest:// URL of this process (a deployment's shared server).
std::shared_ptr<MapStore>& shared_store() {
  static auto store = std::make_shared<MapStore>("memtest store");
  return store;
}

void register_memtest() {
  cache::register_remote_store(
      {"memtest", "memtest://NAME",
       [](const std::string& url) {
         if (url.size() <= std::string("memtest://").size())
           throw ValueError("a memtest URL names a store: memtest://NAME");
       },
       [](const cache::RemoteConfig&) -> std::shared_ptr<cache::Store> { return shared_store(); }});
}

Settings settings_with_remote(const TempDir& dir, const std::string& url) {
  return Settings::from_map({{"KJIT_CACHE_DIR", (dir.path() / "cache").string()},
                             {"KJIT_REMOTE_CACHE", url},
                             {"KJIT_REMOTE_CACHE_SECRET", kSecret}});
}

Specialization add_constant(int vec) {
  return Specialization(Template::builtin("add_constant"), "add_constant",
                        {{"T", TemplateArg::type(DType::Float32)}, {"VEC", TemplateArg::integer(vec)}});
}

}  // namespace

TEST(RemoteScheme, ARegisteredStoreServesWritesAndReadsThroughTheChain) {
  register_memtest();
  shared_store()->bytes.clear();
  const Target sm90 = Target::parse("sm_90");
  TempDir a("kjit-scheme-a"), b("kjit-scheme-b");
  {
    Engine first(settings_with_remote(a, "memtest://deployment"));
    ASSERT_NE(first.remote(), nullptr);
    EXPECT_EQ(first.remote()->describe(), "memtest store");
    EXPECT_EQ(prepared_origin(first, add_constant(4), sm90), Origin::Compiled);
  }
  EXPECT_EQ(shared_store()->puts, 1) << "the compile was published to the registered store";
  Engine second(settings_with_remote(b, "memtest://deployment"));
  Origin origin;
  const auto k = second.prepare(add_constant(4), sm90, &origin);
  EXPECT_EQ(origin, Origin::Remote) << "another machine's process takes it from the registered store";
  EXPECT_EQ(second.stats().compiles, 0u);
  EXPECT_EQ(second.stats().remote_hits, 1u);
  EXPECT_TRUE(second.disk().load(k->key, "sm_90").has_value()) << "and keeps it on its disk";
}

TEST(RemoteScheme, AnUnknownSchemeIsAnErrorNamingTheKnownOnes) {
  register_memtest();
  TempDir dir("kjit-scheme-bad");
  try {
    (void)settings_with_remote(dir, "nosuch://host");
    FAIL() << "an unknown scheme was accepted";
  } catch (const ValueError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("KJIT_REMOTE_CACHE"), std::string::npos) << what;
    EXPECT_NE(what.find("'nosuch'"), std::string::npos) << what;
    EXPECT_NE(what.find("redis://"), std::string::npos) << what;
    EXPECT_NE(what.find("memtest://NAME"), std::string::npos) << what;
  }
  EXPECT_THROW((void)settings_with_remote(dir, "memtest://"), ValueError) << "the scheme's own check runs";
  EXPECT_THROW(cache::register_remote_store({"", "", nullptr, nullptr}), ValueError);
}
