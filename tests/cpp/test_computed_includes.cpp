// Headers that no reading of a template's text names (a macro-computed `#include MACRO`, as thrust, CUB
// and CuTe write them): NVRTC asks for them, kjit resolves what it asks, hands it over, hashes it into the
// key and keeps the directive in the header index (in the template's scope, by the SHA-256 of the including
// file's bytes), so that a later load of the template keys the same headers without compiling. A template rebuilt from
// a manifest still reaches no file through one.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "kjit/cache/header_index.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/compiler.hpp"
#include "kjit/engine.hpp"
#include "kjit/cache/manifest.hpp"
#include "kjit/error.hpp"
#include "kjit/spec_record.hpp"
#include "kjit/template.hpp"
#include "header_index_support.hpp"
#include "test_support.hpp"

using namespace kjit;
using namespace kjit::testing;
using kjit::cache::HeaderIndex;
namespace fs = std::filesystem;

namespace {

Settings settings_for(const TempDir& dir) {
  return Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_CACHE_MODE", "readwrite"}});
}

// The header is named only by a macro (stringized, so that no quoted name is in the text either).
constexpr const char* kTemplate =
    "#define HEADER_OF(name) #name\n"
    "#define PICKED HEADER_OF(picked_by_macro.h)\n"
    "#include PICKED\n"
    "template <int N> __global__ void k(int* out) { out[0] = PICKED_VALUE + N; }\n";

// Writes dir/src/k.cu (kTemplate) and the header only its macro names, and loads k.cu.
std::shared_ptr<const Template> macro_template(const TempDir& dir) {
  write_file(dir / "src" / "k.cu", kTemplate);
  write_file(dir / "src" / "picked_by_macro.h", "#define PICKED_VALUE 1\n");
  return Template::from_file(dir / "src" / "k.cu");
}

Specialization spec_of(std::shared_ptr<const Template> t) {
  return Specialization(std::move(t), "k", {{"N", TemplateArg::integer(1)}});
}

bool hands(const Template& t, const std::string& include_name) {
  for (const auto& h : t.headers())
    if (h.include_name == include_name) return true;
  return false;
}

}  // namespace

TEST(LearnedIncludes, AreKeptPerScopeByTheContentOfTheIncludingFileAcrossIndexes) {
  TempDir dir;
  const std::string scope(64, 'c'), other_scope(64, 'd'), sha(64, 'a'), other(64, 'b');
  using Learned = HeaderIndex::Learned;
  {
    auto index = index_in(dir / "cache");
    index->learn(scope, sha, "\"thrust/system/cuda/detail/execution_policy.h");
    index->learn(scope, sha, "\"thrust/system/cuda/detail/execution_policy.h");  // once
    index->learn(scope, sha, "bad: no '<' or '\"' first");                       // not a directive: ignored
    index->learn("not a scope", sha, "\"x.h");                                   // not a scope: ignored
    index->save();
  }
  {
    auto index = index_in(dir / "cache");  // a new process
    EXPECT_EQ(index->learned(scope), (Learned{{sha, {"\"thrust/system/cuda/detail/execution_policy.h"}}}));
    EXPECT_TRUE(index->learned(other_scope).empty()) << "what one template learned is not another's";
    index->learn(scope, other, "<cuda/std/type_traits");
    // Another process learned more for `sha` meanwhile: a save keeps the union.
    auto concurrent = index_in(dir / "cache");
    concurrent->learn(scope, sha, "\"thrust/system/cpp/detail/execution_policy.h");
    concurrent->save();
    index->save();
  }
  auto index = index_in(dir / "cache");
  EXPECT_EQ(index->learned(scope).at(sha).size(), 2u);
  EXPECT_EQ(index->learned(scope).at(other), std::vector<std::string>{"<cuda/std/type_traits"});
  // A damaged learned section makes the whole file an empty index (it only ever saves work).
  write_file(index->file(), "{\"format\":2,\"tag\":\"kjit test\",\"files\":{},\"learned\":{\"" + scope + "\":{\"" +
                                sha + "\":[\"no-quote\"]}}}");
  EXPECT_TRUE(index_in(dir / "cache")->learned(scope).empty());
  // A file of format 1 (directives by file only, unscoped): an empty index, replaced at the next save.
  write_file(index->file(),
             "{\"format\":1,\"tag\":\"kjit test\",\"files\":{},\"learned\":{\"" + sha + "\":[\"\\\"x.h\"]}}");
  EXPECT_TRUE(index_in(dir / "cache")->learned(scope).empty());
  EXPECT_TRUE(index_in(dir / "cache")->learned(sha).empty());
}

// Processes that save at once each keep what the others saved: a save reads, merges and writes under
// the file's lock (without it, 12 processes kept 9-11 of their 12 directives).
TEST(LearnedIncludes, ProcessesSavingAtOnceLoseNoDirective) {
  TempDir dir;
  const std::string scope(64, 'c'), sha(64, 'a');
  constexpr int kProcesses = 12, kRounds = 3;
  for (int round = 0; round < kRounds; ++round) {
    int go[2];
    ASSERT_EQ(::pipe(go), 0);
    std::vector<pid_t> pids;
    for (int p = 0; p < kProcesses; ++p) {
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(go[1]);
        auto index = index_in(dir / "cache");
        (void)index->learned(scope);  // read the file first, as a process that loaded templates has
        index->learn(scope, sha, "\"round" + std::to_string(round) + "_process" + std::to_string(p) + ".h");
        char c;
        (void)::read(go[0], &c, 1);  // all at once
        index->save();
        ::_exit(0);
      }
      pids.push_back(pid);
    }
    ::close(go[0]);
    ::close(go[1]);  // every child's read returns
    for (pid_t pid : pids) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    const auto learned = index_in(dir / "cache")->learned(scope);
    ASSERT_EQ(learned.count(sha), 1u);
    EXPECT_EQ(learned.at(sha).size(), static_cast<std::size_t>(kProcesses * (round + 1))) << "round " << round;
  }
}

// Two templates that include the same header, which computes its own include from a macro each template
// defines: what compiling one learned (for that header's bytes) never re-keys the other, in this process
// or a later one, so a strict run of the other finds what it compiled.
TEST(LearnedIncludes, WhatOneTemplateLearnedNeverReKeysAnother) {
  TempDir dir;
  UseIndex use(index_in(dir / "cache"));
  write_file(dir / "src" / "common.h", "#include CHOSEN\n");
  write_file(dir / "src" / "chosen_a.h", "#define PICKED_VALUE 1\n");
  write_file(dir / "src" / "chosen_b.h", "#define PICKED_VALUE 2\n");
  auto text = [](const char* header) {
    return std::string("#define CHOSEN \"") + header + "\"\n#include \"common.h\"\n" +
           "template <int N> __global__ void k(int* out) { out[0] = PICKED_VALUE + N; }\n";
  };
  write_file(dir / "src" / "a.cu", text("chosen_a.h"));
  write_file(dir / "src" / "b.cu", text("chosen_b.h"));
  Engine engine(settings_for(dir));
  const auto a = engine.prepare(spec_of(Template::from_file(dir / "src" / "a.cu")), Target::parse("sm_90"));
  const std::string a_digest = Template::from_file(dir / "src" / "a.cu")->digest();
  EXPECT_TRUE(hands(*Template::from_file(dir / "src" / "a.cu"), "chosen_a.h"));
  engine.prepare(spec_of(Template::from_file(dir / "src" / "b.cu")), Target::parse("sm_90"));
  auto a_again = Template::from_file(dir / "src" / "a.cu");
  EXPECT_FALSE(hands(*a_again, "chosen_b.h")) << "b's learned header became a's";
  EXPECT_EQ(a_again->digest(), a_digest);
  EXPECT_TRUE(hands(*Template::from_file(dir / "src" / "b.cu"), "chosen_b.h"));
  // A strict process (a fresh index read from the file) finds a's kernel.
  UseIndex later(index_in(dir / "cache"));
  Settings strict = settings_for(dir);
  strict.cache_mode = CacheMode::Strict;
  Engine strict_engine(strict);
  Origin origin;
  const auto hit =
      strict_engine.prepare(spec_of(Template::from_file(dir / "src" / "a.cu")), Target::parse("sm_90"), &origin);
  EXPECT_EQ(origin, Origin::Disk);
  EXPECT_EQ(hit->key, a->key);
}

TEST(LearnedIncludes, AMacroComputedIncludeIsLearnedAtTheFirstCompileAndKeyedByEveryLaterLoad) {
  TempDir dir;
  UseIndex use(index_in(dir / "cache"));
  Engine engine(settings_for(dir));
  auto t = macro_template(dir);
  EXPECT_FALSE(hands(*t, "picked_by_macro.h")) << "the scanner cannot name it: NVRTC has to ask";
  Origin first_origin;
  const auto first = engine.prepare(spec_of(t), Target::parse("sm_90"), &first_origin);
  EXPECT_EQ(first_origin, Origin::Compiled);
  // The template the binary was compiled from hands the header, and is the current one from now on.
  const auto grown = t->current();
  ASSERT_NE(grown.get(), t.get());
  EXPECT_TRUE(hands(*grown, "picked_by_macro.h"));
  EXPECT_EQ(first->meta.template_digest, grown->digest());
  EXPECT_EQ(engine.key_for(spec_of(t), Compiler::plan(Target::parse("sm_90"))), first->key);
  // A fresh load (as in a new process) hands it at once and keys the same: a disk hit, no compile.
  auto again = Template::from_file(dir / "src" / "k.cu");
  EXPECT_TRUE(hands(*again, "picked_by_macro.h"));
  EXPECT_EQ(again->digest(), grown->digest());
  Engine second(settings_for(dir));
  Origin hit_origin;
  const auto hit = second.prepare(spec_of(again), Target::parse("sm_90"), &hit_origin);
  EXPECT_EQ(hit_origin, Origin::Disk);
  EXPECT_EQ(hit->key, first->key);
  // Another specialization of the first template object keys and compiles with the learned header at once.
  Origin n2_origin;
  const auto n2 =
      engine.prepare(Specialization(t, "k", {{"N", TemplateArg::integer(2)}}), Target::parse("sm_90"), &n2_origin);
  EXPECT_EQ(n2_origin, Origin::Compiled);
  EXPECT_EQ(n2->meta.template_digest, grown->digest());
}

// The compile that learned the header ran under the key of the template as first read; its binary is kept
// under the grown template's key alone (the first key declined, nothing stored under it).
TEST(LearnedIncludes, TheLearningCompileIsKeptUnderTheGrownTemplatesKeyOnly) {
  TempDir dir;
  UseIndex use(index_in(dir / "cache"));
  Engine engine(settings_for(dir));
  auto t = macro_template(dir);
  const cache::CacheKey before = engine.key_for(spec_of(t), Compiler::plan(Target::parse("sm_90")));
  Origin origin;
  const auto first = engine.prepare(spec_of(t), Target::parse("sm_90"), &origin);
  EXPECT_EQ(origin, Origin::Compiled);
  EXPECT_NE(first->key, before);
  const auto entries = engine.disk().list();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].key, first->key.hex());
  EXPECT_EQ(engine.stats().compiles, 1u) << "one compile, offered to the grown key, not a second";
}

TEST(LearnedIncludes, EditingAHeaderReachedOnlyThroughAMacroChangesTheKey) {
  TempDir dir;
  UseIndex use(index_in(dir / "cache"));
  Engine engine(settings_for(dir));
  Origin before_origin;
  const auto before = engine.prepare(spec_of(macro_template(dir)), Target::parse("sm_90"), &before_origin);
  write_file(dir / "src" / "picked_by_macro.h", "#define PICKED_VALUE 2\n");
  Engine later(settings_for(dir));
  Origin after_origin;
  const auto after =
      later.prepare(spec_of(Template::from_file(dir / "src" / "k.cu")), Target::parse("sm_90"), &after_origin);
  EXPECT_NE(after->key, before->key);
  EXPECT_EQ(after_origin, Origin::Compiled) << "the kernel of the old header was served";
}

TEST(LearnedIncludes, AnIncludeAMacroComputesThatIsNowhereIsACompileErrorSayingWhereKjitLooked) {
  TempDir dir;
  UseIndex use(index_in(dir / "cache"));
  Engine engine(settings_for(dir));
  auto t = Template::from_string(
      "#define H \"not_anywhere.h\"\n#include H\n"
      "template <int N> __global__ void k(int* out) { out[0] = N; }\n",
      "missing.cu");
  try {
    engine.prepare(spec_of(t), Target::parse("sm_90"));
    FAIL() << "compiled";
  } catch (const CompileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("kjit did not find 'not_anywhere.h'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("KJIT_INCLUDE_PATH"), std::string::npos) << msg;
  }
}

TEST(LearnedIncludes, ANameAMacroComputesNeverTakesAManifestTemplateOutOfItsFolders) {
  TempDir dir;
  UseIndex use(index_in(dir / "cache"));
  write_file(dir / "secret.h", "TOP_SECRET_LINE_42 leaked;\n");
  const std::string absolute = (dir / "secret.h").string();
  std::string climbing;
  for (int i = 0; i < 24; ++i) climbing += "../";
  climbing += absolute.substr(1);
  // NVRTC asking, from a CUDA header of a template rebuilt from a manifest, for a name a macro computed.
  const std::string source = "#include <cuda_fp16.h>\ntemplate <int N> __global__ void k(int* out) { out[0] = N; }\n";
  auto confined = Template::from_memory(source, "k.cu", {});
  for (const std::string& name : {absolute, climbing, std::string("../../secret.h")}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(confined->grown_by({{"cuda_fp16.h", name}}), nullptr);
    EXPECT_EQ(confined->grown_by({{"k.cu", name}}), nullptr);
  }
  // The user's own template may compute an absolute name: it is theirs.
  auto own = Template::from_string(source, "k.cu");
  auto grown = own->grown_by({{"k.cu", absolute}});
  ASSERT_NE(grown, nullptr);
  EXPECT_TRUE(hands(*grown, absolute));
}

// A manifest carries what compiles learned for the template's files (thrust's device system header here),
// so that the template rebuilt on a machine that never compiled it hands the same headers: the same
// digest, no "stale" note, and no pass that fails to learn them again.
TEST(LearnedIncludes, AManifestCarriesThemSoATemplateRebuiltElsewhereKeysTheSame) {
  TempDir dir;
  const std::string source =
      "#include <thrust/iterator/detail/device_system_tag.h>\n"
      "template <int N> __global__ void k(int* out) { out[0] = N; }\n";
  cache::ManifestRecord record;
  {
    UseIndex use(index_in(dir / "cache"));
    Engine engine(settings_for(dir));
    auto t = Template::from_string(source, "thrust_tag.cu");
    try {
      engine.prepare(spec_of(t), Target::parse("sm_90"));
    } catch (const Error& e) {
      GTEST_SKIP() << "no CCCL here: " << e.what();
    }
    ASSERT_FALSE(t->current()->learned_includes().empty()) << "thrust's device system header is macro-computed";
    record = to_record(spec_of(t).on_current_template());
    EXPECT_EQ(record.template_digest, t->current()->digest());
    ASSERT_FALSE(record.sources->learned().empty());
  }
  UseIndex elsewhere(index_in(dir / "another-machine"));  // knows nothing learned
  std::string stale;
  auto rebuilt = template_of(record, &stale);
  EXPECT_EQ(stale, "");
  EXPECT_EQ(rebuilt->digest(), record.template_digest);
  // And through a manifest's text, written and read back.
  cache::Manifest m;
  m.add(record);
  const cache::Manifest read = cache::parse_manifest(cache::manifest_to_json(m), "m.jsonl");
  ASSERT_EQ(read.records().size(), 1u);
  EXPECT_EQ(read.records()[0].sources->learned(), record.sources->learned());
  EXPECT_EQ(template_of(read.records()[0])->digest(), record.template_digest);
}
