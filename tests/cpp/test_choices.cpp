// Tuned choices (kjit/choices.hpp, cache/choice_store.hpp): kept on disk beside the kernels, found again by
// another process (another Choices on the same folder), read from read-only layers, refused with a warning
// when damaged or foreign, recorded to a KJIT_RECORD manifest, and never timed in strict mode. Real files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cache_test_helpers.hpp"
#include "kjit/cache/choice_store.hpp"
#include "kjit/cache/export_lock.hpp"
#include "kjit/cache/manifest.hpp"
#include "kjit/cache_config.hpp"
#include "kjit/choices.hpp"
#include "kjit/error.hpp"
#include "kjit/settings.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::read_file;
using kjit::testing::TempDir;
using kjit::testing::write_file;
namespace fs = std::filesystem;

namespace {

const std::string kKey = "gemm|sm_90a|bf16|N=4096|K=4096|epi=gelu|m<=2048";
const std::string kValue = "wgmma:128x256x64:s4";

Settings settings_for(const fs::path& dir, std::map<std::string, std::string> more = {}) {
  more["KJIT_CACHE_DIR"] = dir.string();
  return Settings::from_map(more);
}

// The one choice file under `root` (fails the test unless there is exactly one).
fs::path only_choice_file(const fs::path& root) {
  const auto files = kjit::testing::files_named(root, cache::kChoiceSuffix);
  EXPECT_EQ(files.size(), 1u);
  return files.empty() ? fs::path{} : files.front();
}

cache::ManifestRecord builtin_record() {
  cache::ManifestRecord r;
  r.template_name = "add_constant";
  r.builtin = true;
  r.template_digest = "d";
  r.kernel = "add_constant";
  cache::ManifestArg a;
  a.name = "T";
  a.kind = cache::ManifestArg::Kind::Type;
  a.dtype = "float32";
  r.args.push_back(a);
  return r;
}

}  // namespace

TEST(Choices, StoredChoiceIsFoundByAnotherInstanceOnTheSameFolder) {
  TempDir dir;
  {
    Choices a(settings_for(dir.path()));
    EXPECT_EQ(a.find(kKey), std::nullopt);
    a.store(kKey, kValue);
    EXPECT_EQ(a.find(kKey), kValue);  // in memory (the miss before was not kept over the store)
  }
  const fs::path file = only_choice_file(dir.path());
  EXPECT_EQ(file.parent_path(), dir.path() / "v1" / "choices");
  EXPECT_EQ(kjit::testing::file_mode(file), 0600u);
  EXPECT_EQ(kjit::testing::file_mode(file.parent_path()), 0700u);
  const std::string text = read_file(file);
  EXPECT_NE(text.find("\"key\":\"" + kKey + "\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"tag\":\"" + choice_tag() + "\""), std::string::npos) << text;
  EXPECT_EQ(choice_tag(), std::string("kjit ") + KJIT_VERSION + " choices 1");

  Choices b(settings_for(dir.path()));
  EXPECT_EQ(b.find(kKey), kValue);
  EXPECT_EQ(b.find(kKey + "|other"), std::nullopt);
  b.store(kKey, "cublas");  // replaced atomically, no temp file left
  EXPECT_EQ(Choices(settings_for(dir.path())).find(kKey), "cublas");
  EXPECT_TRUE(kjit::testing::files_named(dir.path(), ".tmp.").empty());
  EXPECT_EQ(cache::ChoiceStore::count(dir.path()), 1u);
}

TEST(Choices, AChoiceOfAnotherKjitVersionIsNotUsed) {
  TempDir dir;
  cache::ChoiceStoreConfig c;
  c.root = dir.path();
  c.tag = "kjit 0.0.1 choices 1";
  ASSERT_EQ(cache::ChoiceStore(c).save(kKey, kValue), "");
  kjit::testing::WarningCapture warnings;
  EXPECT_EQ(Choices(settings_for(dir.path())).find(kKey), std::nullopt);  // another file name: a plain miss
  EXPECT_EQ(warnings.count(), 0u) << warnings.all();
}

TEST(Choices, ADamagedOrForeignFileIsAMissAndAWarning) {
  TempDir dir;
  Choices(settings_for(dir.path())).store(kKey, kValue);
  const fs::path file = only_choice_file(dir.path());
  const std::string tag = choice_tag();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "it is damaged: it is empty"},
      {"{\"kjit_choice\":1,\"tag\":\"" + tag + "\",\"key\":\"" + kKey + "\",\"val", "it is not JSON (cut short?)"},
      {"[1,2,3]", "it is not a JSON object"},
      {"{\"kjit_choice\":2,\"tag\":\"" + tag + "\",\"key\":\"" + kKey + "\",\"value\":\"x\"}", "format field"},
      {"{\"kjit_choice\":1,\"tag\":\"" + tag + "\",\"key\":\"" + kKey + "\",\"value\":7}", "not a string"},
      {"{\"kjit_choice\":1,\"tag\":\"" + tag + "\",\"key\":\"gemm|other\",\"value\":\"x\"}", "holds another choice"},
      {"{\"kjit_choice\":1,\"tag\":\"" + tag + "\",\"key\":\"" + kKey + "\",\"value\":\"a\\nb\"}",
       "its value is not valid: character 1 is 0x0a"},
      {"{\"kjit_choice\":1,\"tag\":\"" + tag + "\",\"key\":\"" + kKey + "\",\"value\":\"\"}", "it is empty"},
      {std::string(cache::kMaxChoiceFileBytes + 1, ' '), "larger"},
  };
  for (const auto& [bytes, why] : cases) {
    write_file(file, bytes);
    ::chmod(file.c_str(), 0600);
    kjit::testing::WarningCapture warnings;
    EXPECT_EQ(Choices(settings_for(dir.path())).find(kKey), std::nullopt) << bytes.substr(0, 100);
    ASSERT_EQ(warnings.count(), 1u) << bytes.substr(0, 100);
    const std::string w = warnings.messages()[0];
    EXPECT_NE(w.find("kjit cache: not using the tuned choice " + file.string()), std::string::npos) << w;
    EXPECT_NE(w.find(why), std::string::npos) << "expected '" << why << "' in: " << w;
    EXPECT_NE(w.find("It counts as not tuned"), std::string::npos) << w;
  }
  // A FIFO at the file's path: refused without blocking.
  fs::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  {
    kjit::testing::WarningCapture warnings;
    EXPECT_EQ(Choices(settings_for(dir.path())).find(kKey), std::nullopt);
    EXPECT_EQ(warnings.count(), 1u);
  }
  // A symbolic link to a valid choice file elsewhere: not followed.
  fs::remove(file);
  TempDir other;
  Choices(settings_for(other.path())).store(kKey, kValue);
  fs::create_symlink(only_choice_file(other.path()), file);
  {
    kjit::testing::WarningCapture warnings;
    EXPECT_EQ(Choices(settings_for(dir.path())).find(kKey), std::nullopt);
    EXPECT_EQ(warnings.count(), 1u);
  }
  // Storing again replaces whatever was there.
  Choices fresh(settings_for(dir.path()));
  fresh.store(kKey, kValue);
  EXPECT_EQ(Choices(settings_for(dir.path())).find(kKey), kValue);
}

TEST(Choices, ReadOnlyLayersAreSearchedAfterTheCacheDirAndNeverWritten) {
  TempDir layer, dir, second;
  Choices(settings_for(layer.path())).store(kKey, kValue);
  Choices(settings_for(second.path())).store(kKey + "|2", "second");
  const std::string layer_file = read_file(only_choice_file(layer.path()));
  const std::string path = layer.path().string() + ":" + second.path().string();

  Choices c(settings_for(dir.path(), {{"KJIT_CACHE_PATH", path}}));
  EXPECT_EQ(c.find(kKey), kValue);
  EXPECT_EQ(c.find(kKey + "|2"), "second");
  c.store(kKey, "cublas");  // into the cache dir, which comes first from now on
  EXPECT_EQ(read_file(only_choice_file(layer.path())), layer_file);
  EXPECT_EQ(Choices(settings_for(dir.path(), {{"KJIT_CACHE_PATH", path}})).find(kKey), "cublas");

  // Strict mode replays the layer's choice (and the root's, read as read-only), never tuning.
  TempDir empty;
  Choices strict(
      settings_for(empty.path(), {{"KJIT_CACHE_PATH", path}, {"KJIT_CACHE_MODE", "strict"}, {"KJIT_TUNE", "1"}}));
  EXPECT_FALSE(strict.tuning_allowed());
  EXPECT_EQ(strict.find(kKey), kValue);
  // Mode off: no disk at all.
  EXPECT_EQ(Choices(settings_for(dir.path(), {{"KJIT_CACHE_PATH", path}, {"KJIT_CACHE_MODE", "off"}})).find(kKey),
            std::nullopt);
}

TEST(Choices, StrictAndReadonlyModesKeepChoicesInMemoryOnly) {
  for (const char* mode : {"strict", "readonly"}) {
    TempDir dir;
    Choices c(settings_for(dir.path(), {{"KJIT_CACHE_MODE", mode}, {"KJIT_TUNE", "1"}}));
    kjit::testing::WarningCapture warnings;
    c.store(kKey, kValue);
    EXPECT_EQ(c.find(kKey), kValue) << mode;
    EXPECT_EQ(warnings.count(), 0u) << warnings.all();
    EXPECT_FALSE(fs::exists(dir.path() / "v1")) << mode;
    EXPECT_EQ(c.tuning_allowed(), std::string(mode) == "readonly") << mode;
  }
}

TEST(Choices, TuningIsAllowedOnlyWithKjitTuneAndNotInStrictMode) {
  TempDir dir;
  EXPECT_FALSE(Settings::from_map({}).tune);
  EXPECT_FALSE(Choices(settings_for(dir.path())).tuning_allowed());
  EXPECT_FALSE(Choices(settings_for(dir.path(), {{"KJIT_TUNE", "0"}})).tuning_allowed());
  EXPECT_TRUE(Choices(settings_for(dir.path(), {{"KJIT_TUNE", "1"}})).tuning_allowed());
  EXPECT_TRUE(Choices(settings_for(dir.path(), {{"KJIT_TUNE", ""}, {"KJIT_CACHE_MODE", "off"}})).settings().tune ==
              false);
  EXPECT_FALSE(Choices(settings_for(dir.path(), {{"KJIT_TUNE", "1"}, {"KJIT_CACHE_MODE", "strict"}})).tuning_allowed());
  try {
    Settings::from_map({{"KJIT_TUNE", "yes"}});
    FAIL() << "KJIT_TUNE=yes was accepted";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "KJIT_TUNE='yes' is not valid: allowed 0 | 1. Unset it for the default (0: no timing).");
  }
  bool listed = false;
  for (const auto& s : setting_registry()) listed = listed || std::string(s.name) == "KJIT_TUNE";
  EXPECT_TRUE(listed);
}

TEST(Choices, BadKeysAndValuesAreClearErrors) {
  TempDir dir;
  Choices c(settings_for(dir.path()));
  auto message = [&](auto&& f) {
    try {
      f();
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message([&] { c.find(""); }),
            "tuned choice key '' is not valid: it is empty; allowed 1 to 512 printable ASCII characters, e.g. "
            "\"gemm|sm_90a|bf16|N=4096|K=4096\"");
  EXPECT_EQ(message([&] { c.store("gemm\tx", kValue); }),
            "tuned choice key 'gemm\\x09x' is not valid: character 4 is 0x09, not printable ASCII (0x20-0x7e); "
            "allowed 1 to 512 printable ASCII characters, e.g. \"gemm|sm_90a|bf16|N=4096|K=4096\"");
  EXPECT_NE(
      message([&] { c.store(std::string(513, 'k'), kValue); }).find("it is 513 bytes long, more than the 512 allowed"),
      std::string::npos);
  EXPECT_EQ(message([&] { c.store(kKey, std::string(257, 'v')); }).find("tuned choice value 'vvvv"), 0u);
  EXPECT_NE(message([&] { c.store(kKey, "caf\xc3\xa9"); }).find("character 3 is 0xc3"), std::string::npos);
  EXPECT_EQ(c.find(std::string(512, 'k')), std::nullopt);  // the longest key is fine
  c.store(std::string(512, 'k'), std::string(256, 'v'));
  EXPECT_EQ(Choices(settings_for(dir.path())).find(std::string(512, 'k')), std::string(256, 'v'));
}

TEST(Choices, AnUnwritableCacheDirIsAWarningAndTheChoiceStaysInMemory) {
  TempDir dir;
  write_file(dir / "file", "not a folder");
  Choices c(settings_for(dir / "file" / "cache"));
  kjit::testing::WarningCapture warnings;
  c.store(kKey, kValue);
  EXPECT_EQ(c.find(kKey), kValue);
  ASSERT_EQ(warnings.count(), 1u);
  EXPECT_NE(warnings.messages()[0].find("cannot keep the tuned choice " + kKey + " = " + kValue), std::string::npos)
      << warnings.all();
}

TEST(Choices, HitsAndStoresAreRecordedToTheManifest) {
  TempDir dir;
  const fs::path manifest = dir / "run.jsonl";
  // A record first: its id is what it was before choices existed.
  const cache::ManifestRecord record = builtin_record();
  const std::string id = record.id();
  cache::append_to_manifest(manifest, {record}, 30);
  {
    Choices a(settings_for(dir / "cache", {{"KJIT_RECORD", manifest.string()}}));
    a.store(kKey, kValue);
    a.store(kKey, kValue);  // the same value again: no second line
    a.find(kKey);
  }
  {
    Choices b(settings_for(dir / "cache", {{"KJIT_RECORD", manifest.string()}}));
    EXPECT_EQ(b.find(kKey), kValue);  // a hit: already in the file, no line
    EXPECT_EQ(b.find("gemm|absent"), std::nullopt);
  }
  std::string text = read_file(manifest);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3) << text;  // version, record, one choice
  EXPECT_NE(text.find("{\"choice\":{\"key\":\"" + kKey + "\",\"value\":\"" + kValue + "\"}}\n"), std::string::npos)
      << text;
  cache::Manifest m = cache::read_manifest(manifest);
  ASSERT_EQ(m.records().size(), 1u);
  EXPECT_EQ(m.records()[0].id(), id);
  EXPECT_EQ(m.choices(), (std::map<std::string, std::string>{{kKey, kValue}}));

  // A hit on a folder the manifest never saw is recorded once.
  TempDir other;
  const fs::path second = dir / "second.jsonl";
  Choices(settings_for(dir / "cache")).store(kKey + "|x", "cublas");
  {
    Choices c(settings_for(dir / "cache", {{"KJIT_RECORD", second.string()}}));
    EXPECT_EQ(c.find(kKey + "|x"), "cublas");
    EXPECT_EQ(c.find(kKey + "|x"), "cublas");
  }
  EXPECT_EQ(cache::read_manifest(second).choices(), (std::map<std::string, std::string>{{kKey + "|x", "cublas"}}));

  // A changed value is a new line; the last one wins.
  cache::ManifestWriter w(manifest, 30);
  EXPECT_EQ(w.append_choices({{kKey, kValue}}), 0u);
  EXPECT_EQ(w.append_choices({{kKey, "cublas"}}), 1u);
  EXPECT_EQ(cache::read_manifest(manifest).choices().at(kKey), "cublas");
  // Canonical text round-trips.
  const cache::Manifest again = cache::parse_manifest(cache::manifest_to_json(cache::read_manifest(manifest)), "x");
  EXPECT_EQ(again.choices().at(kKey), "cublas");
  EXPECT_EQ(again.records()[0].id(), id);
}

TEST(Choices, ABadChoiceLineMakesTheManifestInvalid) {
  const std::string head = "{\"kjit_manifest\":2}\n";
  auto error_of = [](const std::string& text) {
    try {
      cache::parse_manifest(text, "m.jsonl");
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error_of(head + "{\"choice\":{\"key\":\"k\"}}\n").find("line 2.choice: missing field \"value\""),
            std::string::npos);
  EXPECT_NE(error_of(head + "{\"choice\":{\"key\":\"\",\"value\":\"v\"}}\n").find("line 2.choice.key: it is empty"),
            std::string::npos);
  EXPECT_NE(error_of(head + "{\"choice\":[1]}\n").find("line 2.choice: is not an object"), std::string::npos);
  EXPECT_NE(error_of(head + "{\"other\":1}\n").find("\"sources\", \"record\" or \"choice\""), std::string::npos);
  EXPECT_EQ(error_of(head + "{\"choice\":{\"key\":\"k\",\"value\":\"v\"}}\n{\"choice\":{\"key\":\"k\",\"val"),
            "(no error)");  // a torn last line is ignored
}

TEST(Choices, ClearRemovesChoicesAndAbandonedTempFiles) {
  TempDir dir;
  Choices c(settings_for(dir.path()));
  c.store(kKey, kValue);
  c.store(kKey + "|2", kValue);
  write_file(dir.path() / "v1" / "choices" / "ab.choice.tmp.1.0123456789abcdef", "x");
  write_file(dir.path() / "v1" / "choices" / "notes.txt", "not ours");
  EXPECT_EQ(cache::ChoiceStore::count(dir.path()), 2u);
  EXPECT_EQ(cache::ChoiceStore::clear(dir.path()), 2u);
  EXPECT_EQ(cache::ChoiceStore::count(dir.path()), 0u);
  EXPECT_TRUE(kjit::testing::files_named(dir.path(), ".tmp.").empty());
  EXPECT_TRUE(fs::exists(dir.path() / "v1" / "choices" / "notes.txt"));
  EXPECT_EQ(Choices(settings_for(dir.path())).find(kKey), std::nullopt);
}

TEST(Choices, AnExportLockListsChoicesAndVerifyChecksThem) {
  TempDir dir;
  Choices(settings_for(dir.path())).store(kKey, kValue);
  const fs::path file = only_choice_file(dir.path());
  const std::string rel = file.lexically_relative(dir.path()).generic_string();
  const fs::path lock = dir.path() / cache::kLockFileName;
  cache::write_lock(dir.path(), lock);
  const std::vector<cache::LockedFile> locked = cache::read_lock(lock);
  ASSERT_EQ(locked.size(), 1u);
  EXPECT_EQ(locked[0].path, rel);
  EXPECT_EQ(cache::verify_lock(dir.path(), locked), std::vector<std::string>{});
  // The layer's lock vouches for the file: read from a read-only layer in strict mode.
  TempDir empty;
  EXPECT_EQ(
      Choices(settings_for(empty.path(), {{"KJIT_CACHE_PATH", dir.path().string()}, {"KJIT_CACHE_MODE", "strict"}}))
          .find(kKey),
      kValue);

  // Modified: the hash says so. Filed under another key's name: invalid. Unlisted: reported.
  const std::string bytes = read_file(file);
  write_file(file, bytes.substr(0, bytes.size() - 3) + "X\"}\n");
  auto problems = cache::verify_lock(dir.path(), locked);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].rfind("modified: " + rel, 0), 0u) << problems[0];
  write_file(file, bytes);
  const fs::path moved = file.parent_path() / (std::string(64, 'a') + cache::kChoiceSuffix);
  fs::rename(file, moved);
  try {
    cache::lock_entries(dir.path(), {moved});
    FAIL() << "a misfiled choice was locked";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("its name is not the one of its tag and key"), std::string::npos) << e.what();
  }
  problems = cache::verify_lock(dir.path(), locked);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].rfind("missing: " + rel, 0), 0u) << problems[0];
  EXPECT_EQ(problems[1], "unlisted: " + moved.lexically_relative(dir.path()).generic_string() +
                             ": a tuned choice the lock does not list");
}
