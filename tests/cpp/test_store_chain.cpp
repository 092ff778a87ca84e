// StoreChain: levels consulted in order, the first valid hit wins, backfill only from levels marked so
// and only into writable ones, a level that throws or answers wrongly is a miss. The disk levels are
// real DiskCache / ReadOnlyLayer stores on temp dirs; MapStore (support/map_store.hpp) is the chain's
// own unit-test store, an implementation of our interface over a std::map.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <stdexcept>

#include "cache_test_helpers.hpp"
#include "kjit/cache/disk_cache.hpp"
#include "kjit/cache/entry_check.hpp"
#include "kjit/cache/read_only_layer.hpp"
#include "kjit/cache/store_chain.hpp"
#include "kjit/error.hpp"
#include "map_store.hpp"
#include "test_support.hpp"

using namespace kjit::cache;
using namespace kjit::testing;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Throws on every get (a store whose backend is gone and which does not turn that into a miss).
class ThrowingStore : public MapStore {
 public:
  using MapStore::MapStore;
  std::optional<Entry> get(const CacheKey&, const std::string&) override {
    ++gets;
    throw std::runtime_error("backend gone");
  }
};

// Answers every get with `answer`, whatever was asked (a store bug).
class WrongAnswerStore : public MapStore {
 public:
  WrongAnswerStore(std::string name, Entry answer) : MapStore(std::move(name)), answer_(std::move(answer)) {}
  std::optional<Entry> get(const CacheKey&, const std::string&) override {
    ++gets;
    return answer_;
  }

 private:
  Entry answer_;
};

Entry with_payload(Entry e, const std::string& payload) {
  e.payload = payload;
  return e;
}

}  // namespace

TEST(StoreChain, ConsultsLevelsInOrderAndStopsAtTheFirstHit) {
  auto a = std::make_shared<MapStore>("chain-order-a");
  auto b = std::make_shared<MapStore>("chain-order-b");
  auto c = std::make_shared<MapStore>("chain-order-c");
  const Entry e = make_entry("chain-order");
  b->seed(with_payload(e, "from b"));
  c->seed(with_payload(e, "from c"));
  StoreChain chain({{a, false}, {b, false}, {c, false}});

  auto hit = chain.get(e.key, "sm_90");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->level, 1u);
  EXPECT_EQ(hit->entry.payload, "from b");
  EXPECT_EQ(a->gets, 1);
  EXPECT_EQ(b->gets, 1);
  EXPECT_EQ(c->gets, 0) << "a level after the first hit is not consulted";

  EXPECT_FALSE(chain.get(make_entry("chain-order-absent").key, "sm_90").has_value());
  EXPECT_EQ(c->gets, 1) << "a miss consults every level";
}

TEST(StoreChain, BackfillsOnlyFromLevelsMarkedSoAndOnlyIntoWritableOnes) {
  auto local = std::make_shared<MapStore>("chain-backfill-local");
  auto frozen = std::make_shared<MapStore>("chain-backfill-frozen", /*writable=*/false);
  auto layer = std::make_shared<MapStore>("chain-backfill-layer");
  auto remote = std::make_shared<MapStore>("chain-backfill-remote");
  StoreChain chain({{local, false}, {frozen, false}, {layer, false}, {remote, true}});

  const Entry in_layer = make_entry("chain-backfill-layer");
  layer->seed(in_layer);
  ASSERT_TRUE(chain.get(in_layer.key, "sm_90").has_value());
  EXPECT_EQ(local->puts, 0) << "a hit in a level without backfill is not copied";
  EXPECT_EQ(frozen->puts, 0);

  const Entry in_remote = make_entry("chain-backfill-remote");
  remote->seed(in_remote);
  auto hit = chain.get(in_remote.key, "sm_90");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->level, 3u);
  EXPECT_EQ(local->puts, 1);
  EXPECT_EQ(frozen->puts, 0) << "a store that is not writable is not asked to keep it";
  EXPECT_EQ(layer->puts, 1) << "every earlier writable level is backfilled";
  // The next lookup stops at the local level.
  hit = chain.get(in_remote.key, "sm_90");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->level, 0u);
  EXPECT_TRUE(same_entry(hit->entry, in_remote));
}

TEST(StoreChain, ALevelThatThrowsIsAMissWarnedOnce) {
  auto broken = std::make_shared<ThrowingStore>("chain-throws-broken");
  auto next = std::make_shared<MapStore>("chain-throws-next");
  const Entry e = make_entry("chain-throws");
  next->seed(e);
  StoreChain chain({{broken, false}, {next, false}});

  WarningCapture warnings;
  for (int i = 0; i < 3; ++i) {
    auto hit = chain.get(e.key, "sm_90");
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->level, 1u);
  }
  EXPECT_EQ(broken->gets, 3);
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_TRUE(contains(warnings.messages()[0], "chain-throws-broken")) << warnings.all();
  EXPECT_TRUE(contains(warnings.messages()[0], "backend gone")) << warnings.all();
}

TEST(StoreChain, DamagedBytesInALevelAreAMiss) {
  auto first = std::make_shared<MapStore>("chain-damaged-first");
  auto second = std::make_shared<MapStore>("chain-damaged-second");
  const Entry e = make_entry("chain-damaged");
  first->seed(with_payload(e, "damaged below"));
  second->seed(e);
  std::string& bytes = first->bytes.begin()->second;
  bytes[bytes.size() - 1] ^= 0x40;  // the payload's checksum no longer matches
  StoreChain chain({{first, false}, {second, false}});

  auto hit = chain.get(e.key, "sm_90");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->level, 1u);
  EXPECT_TRUE(same_entry(hit->entry, e));
}

TEST(StoreChain, AnEntryForAnotherKeyOrTargetIsAMiss) {
  const Entry asked = make_entry("chain-wrong-asked");
  auto other_key = std::make_shared<WrongAnswerStore>("chain-wrong-key", make_entry("chain-wrong-other"));
  auto other_target =
      std::make_shared<WrongAnswerStore>("chain-wrong-target", make_entry("chain-wrong-asked", "sm_80"));
  auto right = std::make_shared<MapStore>("chain-wrong-right");
  right->seed(asked);
  StoreChain chain({{other_key, false}, {other_target, false}, {right, false}});

  WarningCapture warnings;
  auto hit = chain.get(asked.key, "sm_90");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->level, 2u);
  EXPECT_TRUE(same_entry(hit->entry, asked));
  ASSERT_EQ(warnings.count(), 2u) << warnings.all();
  EXPECT_TRUE(contains(warnings.messages()[0], "chain-wrong-key")) << warnings.all();
  EXPECT_TRUE(contains(warnings.messages()[1], "'sm_80'")) << warnings.all();
}

TEST(StoreChain, ABadTargetIsAnErrorBeforeAnyLevel) {
  auto a = std::make_shared<MapStore>("chain-bad-target");
  StoreChain chain({{a, false}});
  EXPECT_THROW(chain.get(make_entry("chain-bad-target").key, "../sm_90"), kjit::ValueError);
  EXPECT_EQ(a->gets, 0);
}

TEST(StoreChain, ALevelWithoutAStoreIsRefused) {
  try {
    StoreChain chain({{std::make_shared<MapStore>("chain-null"), false}, {nullptr, true}});
    FAIL() << "expected kjit::ValueError";
  } catch (const kjit::ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "level 1")) << e.what();
  }
}

// ---- the disk stores in a chain -------------------------------------------------------------------

// The Engine's order: the writable disk, its read-only layer (not backfilled), a remote-like level
// (backfilled).
struct DiskChain {
  TempDir root, layer_dir;
  std::shared_ptr<DiskCache> disk;
  std::shared_ptr<MapStore> remote = std::make_shared<MapStore>("chain-disk-remote");
  StoreChain chain;

  explicit DiskChain(CacheMode mode = CacheMode::ReadWrite) {
    auto cfg = cache_config(root.path(), mode);
    cfg.layers = {layer_dir.path()};
    disk = std::make_shared<DiskCache>(cfg);
    std::vector<StoreChain::Level> levels{{disk, false}};
    for (const auto& layer : disk->layers()) levels.push_back({layer, false});
    levels.push_back({remote, true});
    chain = StoreChain(std::move(levels));
  }
  void put_in_layer(const Entry& e) { ASSERT_TRUE(DiskCache(cache_config(layer_dir.path())).store(e)); }
  // Seeds the remote level with `e` and gets it through the chain: a hit of that level (2).
  void get_from_remote(const Entry& e) {
    remote->seed(e);
    auto hit = chain.get(e.key, "sm_90");
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->level, 2u);
  }
};

TEST(StoreChainDisk, ALayerHitIsReadInPlaceNotCopied) {
  DiskChain c;
  const Entry e = make_entry("chain-disk-layer");
  c.put_in_layer(e);
  auto hit = c.chain.get(e.key, "sm_90");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->level, 1u);
  EXPECT_TRUE(same_entry(hit->entry, e));
  EXPECT_FALSE(fs::exists(c.disk->entry_path(e.key, "sm_90"))) << "a layer hit is not copied";
  EXPECT_EQ(c.remote->gets, 0);
}

TEST(StoreChainDisk, ARemoteHitIsBackfilledIntoTheWritableDisk) {
  DiskChain c;
  const Entry e = make_entry("chain-disk-remote");
  ASSERT_NO_FATAL_FAILURE(c.get_from_remote(e));
  ASSERT_TRUE(fs::exists(c.disk->entry_path(e.key, "sm_90")));
  // Another process (a new DiskCache on the root) finds it on disk.
  auto again = DiskCache(cache_config(c.root.path())).load(e.key, "sm_90");
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(same_entry(*again, e));
  EXPECT_EQ(c.chain.get(e.key, "sm_90")->level, 0u);
}

TEST(StoreChainDisk, ADamagedDiskEntryIsAMissAndTheLayerAnswers) {
  DiskChain c;
  const Entry e = make_entry("chain-disk-damaged");
  c.put_in_layer(e);
  ASSERT_TRUE(c.disk->store(with_payload(e, "soon damaged")));
  const fs::path path = c.disk->entry_path(e.key, "sm_90");
  std::string bytes = read_file(path);
  bytes[bytes.size() - 1] ^= 0x40;
  write_file(path, bytes);

  WarningCapture warnings;
  auto hit = c.chain.get(e.key, "sm_90");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->level, 1u);
  EXPECT_TRUE(same_entry(hit->entry, e));
  EXPECT_FALSE(fs::exists(path)) << "a damaged entry of the writable disk is removed, as before";
  ASSERT_EQ(warnings.count(), 1u) << warnings.all();
  EXPECT_TRUE(contains(warnings.messages()[0], "damaged")) << warnings.all();
}

TEST(StoreChainDisk, AReadOnlyDiskIsNotBackfilled) {
  DiskChain c(CacheMode::ReadOnly);
  const Entry e = make_entry("chain-disk-readonly");
  ASSERT_NO_FATAL_FAILURE(c.get_from_remote(e));
  EXPECT_FALSE(fs::exists(c.disk->entry_path(e.key, "sm_90")));
}

TEST(StoreChainDisk, ModeOffIsAMissInEveryDiskLevel) {
  DiskChain c(CacheMode::Off);
  const Entry e = make_entry("chain-disk-off");
  c.put_in_layer(e);
  EXPECT_FALSE(c.chain.get(e.key, "sm_90").has_value());
  EXPECT_EQ(c.remote->gets, 1);
}

// The disk's per-key lock of a declined key is let go: a second produce of the key (here, in the same
// process) takes it at once.
TEST(StoreChainDisk, ADeclinedKeyIsNotLeftLocked) {
  DiskChain c;
  const Entry e = make_entry("chain-disk-declined");
  EXPECT_FALSE(c.chain.get_or_try_produce(e.key, "sm_90", [] { return std::optional<Entry>(); }));
  EXPECT_FALSE(c.disk->get(e.key, "sm_90"));
  StoreChain::Hit hit = c.chain.get_or_produce(e.key, "sm_90", [&] { return e; });
  EXPECT_TRUE(hit.produced);
  EXPECT_TRUE(c.disk->get(e.key, "sm_90"));
}

TEST(ReadOnlyLayer, IsNeverWrittenAndNamesItsLayer) {
  TempDir layer;
  ReadOnlyLayer l(layer.path(), CacheMode::ReadWrite);
  EXPECT_FALSE(l.writable());
  EXPECT_FALSE(l.put(make_entry("chain-layer-put")));
  EXPECT_TRUE(kjit::testing::files_under(layer.path()).empty());
  EXPECT_EQ(l.describe(), layer.path().string() + " (read-only layer)");
}

TEST(ReadOnlyLayer, AnEmptyRootOrABadTargetIsRefused) {
  try {
    ReadOnlyLayer l("", CacheMode::ReadWrite);
    FAIL() << "expected kjit::ValueError";
  } catch (const kjit::ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "a read-only layer needs a directory, got an empty path")) << e.what();
  }
  TempDir layer;
  ReadOnlyLayer l(layer.path(), CacheMode::ReadWrite);
  EXPECT_THROW(l.get(make_entry("chain-layer-target").key, "../sm_90"), kjit::ValueError);
}

TEST(ReadOnlyLayer, TheDiskCacheMakesOnePerConfiguredLayerAndNoneInModeOff) {
  TempDir root, a, b;
  auto cfg = cache_config(root.path());
  cfg.layers = {a.path(), "", b.path()};
  DiskCache disk(cfg);
  ASSERT_EQ(disk.layers().size(), 2u) << "an empty path is no layer";
  EXPECT_EQ(disk.layers()[0]->root(), a.path());
  EXPECT_EQ(disk.layers()[1]->root(), b.path());
  cfg.mode = CacheMode::Off;
  EXPECT_TRUE(DiskCache(cfg).layers().empty());
}

// ---- writes through the chain ---------------------------------------------------------------------

namespace {

// A remote-like MapStore with compile leases held in memory, as another process would hold them: the
// lease is Held by "someone else" (held_by_other) whose entry appears at the first watch (other_entry).
class LeasingStore : public MapStore, public CompileLeases {
 public:
  using MapStore::MapStore;
  CompileLeases* leases() override { return writable() ? this : nullptr; }
  Lease try_lease(const CacheKey&, const std::string&, std::string* token) override {
    ++tries;
    if (held_by_other) return Lease::Held;
    *token = "mine";
    return Lease::Taken;
  }
  bool renew_lease(const CacheKey&, const std::string&, const std::string&) override { return true; }
  void release_lease(const CacheKey&, const std::string&, const std::string& token) override {
    released += token == "mine";
  }
  void mark_unpublished(const CacheKey&, const std::string&) override { ++unpublished; }
  std::optional<Watch> watch(const CacheKey&, const std::string&) override {
    if (other_entry) seed(*other_entry);  // the other process finished
    Watch w;
    w.entry = other_entry.has_value();
    w.lease = !other_entry;
    return w;
  }
  double lease_s() const override { return 60; }
  double wait_limit_s() const override { return 5; }

  bool held_by_other = false;
  std::optional<Entry> other_entry;
  int tries = 0, released = 0, unpublished = 0;
};

struct Chain3 {
  std::shared_ptr<MapStore> disk = std::make_shared<MapStore>("disk");
  std::shared_ptr<MapStore> layer = std::make_shared<MapStore>("layer", false);
  std::shared_ptr<LeasingStore> remote = std::make_shared<LeasingStore>("remote");
  StoreChain chain{{{disk, false}, {layer, false}, {remote, true}}};
};

}  // namespace

TEST(StoreChain, GetAnyAsksALevelForEveryKeyBeforeTheNextLevel) {
  Chain3 c;
  const Entry cubin = make_entry("chain-any-cubin"), ptx = make_entry("chain-any-ptx");
  c.remote->seed(cubin);
  c.layer->seed(ptx);
  auto hit = c.chain.get_any({cubin.key, ptx.key}, "sm_90");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->level, 1u) << "the layer's second key, before a round trip for the remote's first";
  EXPECT_TRUE(same_entry(hit->entry, ptx));
  EXPECT_FALSE(hit->remote);
  EXPECT_EQ(c.remote->gets, 0);
}

TEST(StoreChain, GetOrProduceProducesOnceUnderTheLeaseAndPutsIntoEveryWritableLevel) {
  Chain3 c;
  const Entry e = make_entry("chain-produce");
  int produced = 0;
  StoreChain::Hit hit = c.chain.get_or_produce(e.key, "sm_90", [&] {
    ++produced;
    return e;
  });
  EXPECT_EQ(produced, 1);
  EXPECT_TRUE(hit.produced);
  EXPECT_FALSE(hit.remote);
  EXPECT_EQ(c.remote->tries, 1) << "the leasing level's lease was taken";
  EXPECT_EQ(c.remote->released, 1);
  EXPECT_EQ(c.disk->puts, 1);
  EXPECT_EQ(c.layer->puts, 0) << "a read-only level is not written";
  EXPECT_EQ(c.remote->puts, 1) << "published once, by the lease holder";
  EXPECT_EQ(c.chain.get(e.key, "sm_90")->level, 0u);
}

TEST(StoreChain, GetOrProduceTakesWhatAnotherProcessOfTheDeploymentProduced) {
  Chain3 c;
  const Entry e = make_entry("chain-other");
  c.remote->held_by_other = true;
  c.remote->other_entry = e;
  StoreChain::Hit hit = c.chain.get_or_produce(e.key, "sm_90", []() -> Entry { throw std::runtime_error("no"); });
  EXPECT_TRUE(hit.remote);
  EXPECT_FALSE(hit.produced);
  EXPECT_EQ(hit.level, 2u);
  EXPECT_TRUE(same_entry(hit.entry, e));
  EXPECT_EQ(c.disk->puts, 1) << "kept on the local disk";
  EXPECT_EQ(c.remote->puts, 0);
}

TEST(StoreChain, GetOrProduceWithoutSharingNeitherLeasesNorWaits) {
  Chain3 c;
  const Entry e = make_entry("chain-unshared");
  c.remote->held_by_other = true;
  StoreChain::Hit hit = c.chain.get_or_produce(e.key, "sm_90", [&] { return e; }, /*share=*/false);
  EXPECT_TRUE(hit.produced);
  EXPECT_EQ(c.remote->tries, 0);
  EXPECT_EQ(c.remote->puts, 1) << "a writable remote level is still written";
}

TEST(StoreChain, AProducerThatAnswersAnotherKeyIsAnErrorAndNothingIsKept) {
  Chain3 c;
  const Entry e = make_entry("chain-asked"), other = make_entry("chain-other-key");
  EXPECT_THROW(c.chain.get_or_produce(e.key, "sm_90", [&] { return other; }), kjit::Error);
  EXPECT_EQ(c.disk->puts, 0);
  EXPECT_EQ(c.remote->released, 1) << "the lease is let go";
}

// A producer that made something of another key (the engine's compile that learned a header) declines:
// nothing is kept under the key asked for, the lease goes as after a failed produce (the waiters are
// told), and the key can be produced again at once.
TEST(StoreChain, AProducerThatDeclinesKeepsNothingAndLetsTheLeaseGo) {
  Chain3 c;
  const Entry e = make_entry("chain-declined");
  int asked = 0;
  EXPECT_FALSE(c.chain.get_or_try_produce(e.key, "sm_90", [&]() -> std::optional<Entry> {
    ++asked;
    return std::nullopt;
  }));
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(c.disk->puts, 0);
  EXPECT_EQ(c.remote->puts, 0);
  EXPECT_EQ(c.remote->released, 1) << "the lease is let go";
  EXPECT_EQ(c.remote->unpublished, 1) << "the deployment's waiters stop waiting";
  EXPECT_FALSE(c.chain.get(e.key, "sm_90"));
  auto hit = c.chain.get_or_try_produce(e.key, "sm_90", [&]() -> std::optional<Entry> { return e; });
  ASSERT_TRUE(hit);
  EXPECT_TRUE(hit->produced);
  EXPECT_EQ(c.disk->puts, 1);
  // Unshared (no lease): declined the same way.
  EXPECT_FALSE(c.chain.get_or_try_produce(
      make_entry("chain-declined-unshared").key, "sm_90", [] { return std::optional<Entry>(); }, /*share=*/false));
  EXPECT_EQ(c.disk->puts, 1);
}

TEST(StoreChain, PrefetchAsksTheRemoteLevelOnceForWhatNoLocalLevelHas) {
  Chain3 c;
  const Entry here = make_entry("chain-pf-here"), there = make_entry("chain-pf-there"),
              nowhere = make_entry("chain-pf-nowhere");
  c.layer->seed(here);
  c.remote->seed(there);
  const auto r =
      c.chain.prefetch({{{here.key}, "sm_90"}, {{nowhere.key, there.key}, "sm_90"}, {{nowhere.key}, "sm_90"}});
  EXPECT_EQ(r.jobs, 3u);
  EXPECT_EQ(r.on_disk, 1u);
  EXPECT_EQ(r.fetched, 1u);
  EXPECT_EQ(r.missing, 1u);
  EXPECT_TRUE(r.looked_up());
  EXPECT_EQ(c.disk->puts, 1);
  EXPECT_EQ(c.chain.get(there.key, "sm_90")->level, 0u);
  EXPECT_THROW(StoreChain({{c.disk, false}}).prefetch({}), kjit::Error) << "no remote level";
}
