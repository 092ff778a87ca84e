// `kjit warm`, `kjit export` and `kjit verify --dir --lock` (in-process kjit::cli::run, no GPU), and a
// strict-mode engine over an exported read-only layer.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>

#include "cli.hpp"
#include "kjit/cache/manifest.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/spec_record.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using kjit::TemplateArg;
using kjit::cache::ManifestRecord;
using kjit::testing::ScopedEnv;
using kjit::testing::TempDir;
using kjit::testing::read_file;
using kjit::testing::write_file;

struct Result {
  int code = -1;
  std::string out, err;
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::size_t entries_in(const fs::path& root) {
  std::size_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); it != fs::recursive_directory_iterator(); ++it)
    n += it->path().extension() == ".kjit";
  return n;
}

ManifestRecord add_constant_record(const std::string& dtype, int vec) {
  return kjit::to_record(kjit::Specialization(
      kjit::Template::builtin("add_constant"), "add_constant",
      {{"T", TemplateArg::type(*kjit::dtype_from_name(dtype))}, {"VEC", TemplateArg::integer(vec)}}));
}

class WarmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A file template with a header, recorded from files that are gone before warm runs.
    TempDir src("kjit-warm-src");
    write_file(src / "twice.cu", "#include \"twice_detail.cuh\"\ntemplate <typename T>\n"
                                 "__global__ void twice(T* x) { x[threadIdx.x] *= FACTOR; }\n");
    write_file(src / "twice_detail.cuh", "#define FACTOR 2\n");
    const ManifestRecord user = kjit::to_record(kjit::Specialization(
        kjit::Template::from_file(src / "twice.cu"), "twice", {{"T", TemplateArg::type(kjit::DType::Float32)}}));
    write_manifest({add_constant_record("float32", 4), user});
  }
  void write_manifest(const std::vector<ManifestRecord>& records) {
    fs::remove(manifest());
    kjit::cache::append_to_manifest(manifest(), records, 10);
  }
  Result kjit(std::vector<std::string> args) {
    args.insert(args.begin(), {"--cache-dir", cache_dir().string()});
    std::ostringstream out, err;
    Result r;
    r.code = kjit::cli::run(args, out, err);
    r.out = out.str();
    r.err = err.str();
    return r;
  }
  fs::path manifest() const { return dir_ / "manifest.json"; }
  fs::path cache_dir() const { return dir_ / "cache"; }
  fs::path export_dir() const { return dir_ / "export"; }

  TempDir dir_{"kjit-warm"};
  ScopedEnv mode_{"KJIT_CACHE_MODE", std::nullopt};
  ScopedEnv layers_{"KJIT_CACHE_PATH", std::nullopt};
  ScopedEnv record_{"KJIT_RECORD", std::nullopt};
};

TEST_F(WarmTest, WarmsTwoArchsInParallelThenEverythingIsAlreadyCached) {
  Result r = kjit({"warm", manifest().string(), "--arch", "sm_80,sm_90", "-j", "2"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "4 jobs (2 specializations x 2 targets): 4 compiled, 0 already cached, 0 failed"))
      << r.out;
  EXPECT_TRUE(contains(r.err, "[4/4] compiled ")) << r.err;  // stderr is not a terminal here: plain lines
  EXPECT_TRUE(contains(r.err, "twice(T=float32) from template twice.cu for sm_80")) << r.err;
  EXPECT_FALSE(contains(r.err, "\r"));
  EXPECT_EQ(entries_in(cache_dir()), 4u);

  r = kjit({"warm", manifest().string(), "--arch", "sm_90", "--arch", "sm_80", "-j", "2"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "0 compiled, 4 already cached, 0 failed")) << r.out;
  EXPECT_EQ(entries_in(cache_dir()), 4u);
  // Warming records nothing, even with KJIT_RECORD pointing at the manifest it reads.
  ScopedEnv rec("KJIT_RECORD", manifest().string());
  const std::string before = read_file(manifest());
  EXPECT_EQ(kjit({"warm", manifest().string(), "--arch", "sm_90"}).code, 0);
  EXPECT_EQ(read_file(manifest()), before);
}

TEST_F(WarmTest, WarmedEntriesAreWhatTheEngineLooksUp) {
  ASSERT_EQ(kjit({"warm", manifest().string(), "--arch", "sm_90"}).code, 0);
  kjit::Engine engine(kjit::Settings::from_map({{"KJIT_CACHE_DIR", cache_dir().string()}, {"KJIT_CACHE_MODE", "strict"}}));
  const ManifestRecord r = add_constant_record("float32", 4);
  const kjit::Prepared p = engine.prepare(kjit::specialization_of(r, kjit::template_of(r)), kjit::Target::parse("sm_90"));
  EXPECT_EQ(p.origin, kjit::Origin::Disk);
}

TEST_F(WarmTest, AStaleBuiltinIsReportedAndTheCurrentOneCompiled) {
  ManifestRecord r = add_constant_record("float32", 2);
  r.template_digest = std::string(64, 'a');
  write_manifest({r});
  Result res = kjit({"warm", manifest().string(), "--arch", "sm_90"});
  ASSERT_EQ(res.code, 0) << res.out << res.err;
  EXPECT_TRUE(contains(res.out, "1 compiled")) << res.out;
  EXPECT_TRUE(contains(res.out, "template add_constant: stale: the built-in template changed since recording"))
      << res.out;
}

TEST_F(WarmTest, FailuresAreListedWithTheirReasonAndExitOne) {
  ManifestRecord bad = add_constant_record("float32", 4);
  bad.args[1].integer = 3;  // not a power of two: the template's static_assert
  ManifestRecord unknown = add_constant_record("float32", 4);
  unknown.kernel = "no_such_kernel";
  write_manifest({add_constant_record("float32", 1), bad, unknown});
  Result r = kjit({"warm", manifest().string(), "--arch", "sm_90", "-j", "2"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "1 compiled, 0 already cached, 2 failed")) << r.out;
  EXPECT_TRUE(contains(r.out, "failed: add_constant(T=float32, VEC=3) from template add_constant for sm_90: ")) << r.out;
  EXPECT_TRUE(contains(r.out, "VEC must be a power of two")) << r.out;
  EXPECT_TRUE(contains(r.out, "cannot rebuild the recorded specialization")) << r.out;
  EXPECT_TRUE(contains(r.out, "no __global__ kernel named 'no_such_kernel'")) << r.out;
}

TEST_F(WarmTest, BadManifestAndModesAreClearErrors) {
  write_file(manifest(), "{\"kjit_manifest\": 7, \"records\": []}");
  Result r = kjit({"warm", manifest().string(), "--arch", "sm_90"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "manifest " + manifest().string() + " is not valid: the file: version 7 is not supported"))
      << r.err;
  r = kjit({"warm", (dir_ / "none.json").string(), "--arch", "sm_90"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "cannot read manifest")) << r.err;
  r = kjit({"warm", manifest().string()});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--arch")) << r.err;
  ScopedEnv strict("KJIT_CACHE_MODE", "strict");
  r = kjit({"warm", manifest().string(), "--arch", "sm_90"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "warm changes nothing in cache mode strict")) << r.err;
}

TEST_F(WarmTest, ExportThenVerifyAndTamperingIsFound) {
  ScopedEnv strict("KJIT_CACHE_MODE", "strict");  // export writes whatever the mode
  Result r = kjit({"export", manifest().string(), "--out", export_dir().string(), "--arch", "sm_80,sm_90", "-j", "2"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "exported 4 entries to " + export_dir().string())) << r.out;
  EXPECT_EQ(entries_in(export_dir()), 4u);
  EXPECT_EQ(entries_in(cache_dir()), 0u);
  const fs::path lock = export_dir() / "kjit.lock";
  const auto j = nlohmann::json::parse(read_file(lock));
  EXPECT_EQ(j["kjit_lock"], 1);
  ASSERT_EQ(j["entries"].size(), 4u);
  EXPECT_EQ(j["entries"][0]["path"].get<std::string>().rfind("v1/sm_", 0), 0u);

  r = kjit({"verify", "--dir", export_dir().string(), "--lock", lock.string()});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "4 entries of " + export_dir().string() + " match")) << r.out;
  EXPECT_EQ(kjit({"verify", "--dir", export_dir().string()}).code, 0);
  EXPECT_EQ(kjit({"verify", "--lock", lock.string()}).code, 0);

  // A flipped byte in an entry.
  const fs::path entry = export_dir() / j["entries"][1]["path"].get<std::string>();
  std::string bytes = read_file(entry);
  bytes[bytes.size() - 10] ^= 0x01;
  write_file(entry, bytes);
  r = kjit({"verify", "--dir", export_dir().string(), "--lock", lock.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.out, "modified: " + j["entries"][1]["path"].get<std::string>())) << r.out;
  EXPECT_TRUE(contains(r.out, "1 problem in")) << r.out;

  // The lock edited to match the damaged bytes: the entry itself does not decode.
  auto edited = j;
  edited["entries"][1]["sha256"] = kjit::cache::to_hex(kjit::cache::Sha256::of(bytes));
  write_file(lock, edited.dump());
  r = kjit({"verify", "--dir", export_dir().string(), "--lock", lock.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.out, "invalid: " + j["entries"][1]["path"].get<std::string>() + ": ")) << r.out;

  // An entry removed from the lock, and an unreadable lock.
  auto shorter = j;
  shorter["entries"].erase(1);
  write_file(lock, shorter.dump());
  r = kjit({"verify", "--dir", export_dir().string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.out, "unlisted: " + j["entries"][1]["path"].get<std::string>())) << r.out;
  write_file(lock, "{}");
  r = kjit({"verify", "--dir", export_dir().string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "lock file " + lock.string() + " is not valid")) << r.err;
}

TEST_F(WarmTest, StrictModeFindsExportedEntriesInAReadOnlyLayer) {
  ASSERT_EQ(kjit({"export", manifest().string(), "--out", export_dir().string(), "--arch", "sm_90"}).code, 0);
  kjit::Engine engine(kjit::Settings::from_map({{"KJIT_CACHE_DIR", (dir_ / "writable").string()},
                                                {"KJIT_CACHE_PATH", export_dir().string()},
                                                {"KJIT_CACHE_MODE", "strict"}}));
  const ManifestRecord warmed = add_constant_record("float32", 4);
  const kjit::Target sm90 = kjit::Target::parse("sm_90");
  EXPECT_EQ(engine.prepare(kjit::specialization_of(warmed, kjit::template_of(warmed)), sm90).origin, kjit::Origin::Disk);
  const ManifestRecord cold = add_constant_record("float16", 4);
  try {
    engine.prepare(kjit::specialization_of(cold, kjit::template_of(cold)), sm90);
    FAIL();
  } catch (const kjit::CacheMissError& e) {
    EXPECT_TRUE(contains(e.what(), "add_constant(T=float16, VEC=4)")) << e.what();
    EXPECT_TRUE(contains(e.what(), "kjit warm MANIFEST --arch sm_90")) << e.what();
  }
  EXPECT_EQ(engine.stats().compiles, 0u);
  EXPECT_EQ(engine.stats().disk_hits, 1u);
}

}  // namespace
