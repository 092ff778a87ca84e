// NVRTC's automatic precompiled headers (KJIT_PCH, pch_folders.hpp): reused only for the very header
// bytes and options they were made from; a PCH that cannot be written is a compile without it; the
// folders of a process that is gone are removed by the next one (and by `kjit prune`).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kjit/compiler.hpp"
#include "kjit/log.hpp"
#include "kjit/nvrtc_job.hpp"
#include "kjit/nvrtc_library.hpp"
#include "kjit/pch_folders.hpp"
#include "kjit/settings.hpp"
#include "kjit/specialization.hpp"
#include "kjit/template.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace kjit;
using namespace kjit::testing;

namespace {

// The same text in every folder: what it compiles to is decided by the folder's config.h.
constexpr const char* kSource =
    "#include \"config.h\"\n"
    "#include <cuda_fp16.h>\n"
    "template <typename T> __global__ void k(T* out) { *out = T(KJIT_CONFIG_VALUE); }\n";

Settings settings_with(PchMode mode, const fs::path& dir) {
  Settings s = Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}});
  s.pch = mode;
  return s;
}

// PTX, whose text shows the constant the kernel stores.
CompiledBinary compile(const std::shared_ptr<const Template>& t, const Settings& s) {
  return Compiler::compile(Specialization(t, "k", {{"T", TemplateArg::type(DType::Int32)}}),
                           Compiler::plan(Target::parse("compute_90")), s);
}

bool used_pch(const CompiledBinary& b) {
  for (const auto& f : b.flags)
    if (f.rfind("--pch-dir=", 0) == 0) return true;
  return false;
}

void skip_without_pch() {
  if (!kjit::NvrtcLibrary::get().has_pch())
    GTEST_SKIP() << "NVRTC " << kjit::NvrtcLibrary::get().version() << " has no PCH (12.8+)";
}

}  // namespace

// A job's PCH flags are written in one place (NvrtcJob::nvrtc_flags): with_pch adds --pch --pch-dir=D
// after the compile's own flags, without_pch (or with_pch("")) drops both, and neither ever lands in
// `flags`, which is what a compile child is sent (it has no PCH). No NVRTC needed.
TEST(Pch, AJobsPchFlagsComeFromItsFolderAlone) {
  kjit::NvrtcJob job;
  job.flags = {"--std=c++20", "-DX=1"};
  EXPECT_EQ(job.nvrtc_flags(), job.flags);
  const kjit::NvrtcJob with = job.with_pch("/tmp/p");
  EXPECT_EQ(with.pch_dir, "/tmp/p");
  EXPECT_EQ(with.flags, job.flags);
  EXPECT_EQ(with.nvrtc_flags(), (std::vector<std::string>{"--std=c++20", "-DX=1", "--pch", "--pch-dir=/tmp/p"}));
  // Another folder replaces the first: one pair of PCH flags, never two.
  EXPECT_EQ(with.with_pch("/tmp/q").nvrtc_flags(),
            (std::vector<std::string>{"--std=c++20", "-DX=1", "--pch", "--pch-dir=/tmp/q"}));
  for (const kjit::NvrtcJob& plain : {with.without_pch(), with.with_pch("")}) {
    EXPECT_TRUE(plain.pch_dir.empty());
    EXPECT_EQ(plain.nvrtc_flags(), job.flags);
  }
  kjit::NvrtcJob sent;
  ASSERT_TRUE(kjit::decode(kjit::encode(with), sent));
  EXPECT_TRUE(sent.pch_dir.empty());
  EXPECT_EQ(sent.nvrtc_flags(), job.flags);
}

// Two folders, one template text, each its own config.h (1111, 2222): the second compile must not reuse
// the first one's precompiled header, which holds 1111 under the name config.h (NVRTC compares include
// names, not the bytes handed to it in memory), and so compiles what a compile without any PCH compiles.
TEST(Pch, AHeaderOfOtherBytesNeverReachesACompileThroughAPrecompiledHeader) {
  skip_without_pch();
  TempDir dir("kjit-pchtest");
  write_file(dir / "a" / "config.h", "#define KJIT_CONFIG_VALUE 1111\n");
  write_file(dir / "b" / "config.h", "#define KJIT_CONFIG_VALUE 2222\n");
  write_file(dir / "a" / "k.cu", kSource);
  write_file(dir / "b" / "k.cu", kSource);
  ScopedEnv tmp("TMPDIR", dir.path().string());
  const Settings on = settings_with(PchMode::On, dir.path()), off = settings_with(PchMode::Off, dir.path());
  const CompiledBinary a = compile(Template::from_file(dir / "a" / "k.cu"), on);
  const CompiledBinary b = compile(Template::from_file(dir / "b" / "k.cu"), on);
  ASSERT_TRUE(used_pch(a) && used_pch(b)) << "compiled without the PCH";
  EXPECT_NE(a.payload.find("1111"), std::string::npos) << a.payload;
  EXPECT_NE(b.payload.find("2222"), std::string::npos) << b.payload;
  EXPECT_EQ(b.payload.find("1111"), std::string::npos) << "b compiled against a's config.h:\n" << b.payload;
  EXPECT_EQ(b.payload, compile(Template::from_file(dir / "b" / "k.cu"), off).payload);
  // The same header bytes again: the folder a's compile made its PCH in is the one reused.
  const CompiledBinary again = compile(Template::from_file(dir / "a" / "k.cu"), on);
  EXPECT_EQ(again.payload, a.payload);
  EXPECT_EQ(again.flags, a.flags);
}

// A header edited between two loads of a template (a notebook cell run again): the new bytes are compiled.
TEST(Pch, AnEditedHeaderIsCompiledAsItIsNow) {
  skip_without_pch();
  TempDir dir("kjit-pchtest");
  write_file(dir / "config.h", "#define KJIT_CONFIG_VALUE 1111\n");
  write_file(dir / "k.cu", kSource);
  ScopedEnv tmp("TMPDIR", dir.path().string());
  const Settings on = settings_with(PchMode::On, dir.path());
  const CompiledBinary before = compile(Template::from_file(dir / "k.cu"), on);
  ASSERT_TRUE(used_pch(before));
  ASSERT_NE(before.payload.find("1111"), std::string::npos);
  write_file(dir / "config.h", "#define KJIT_CONFIG_VALUE 2222\n");
  const CompiledBinary after = compile(Template::from_file(dir / "k.cu"), on);
  EXPECT_NE(after.payload.find("2222"), std::string::npos) << after.payload;
  EXPECT_EQ(after.payload.find("1111"), std::string::npos) << "compiled against the old config.h";
}

// The text before the headers differs (a macro a shared header reads): NVRTC itself tells those apart
// (its PCH keeps the initial directives), so one folder serves both, each compiled right.
TEST(Pch, AMacroDefinedBeforeTheHeadersIsHonoured) {
  skip_without_pch();
  TempDir dir("kjit-pchtest");
  write_file(dir / "config.h", "#define KJIT_CONFIG_VALUE (KJIT_BASE + 1)\n");
  ScopedEnv tmp("TMPDIR", dir.path().string());
  const Settings on = settings_with(PchMode::On, dir.path()), off = settings_with(PchMode::Off, dir.path());
  auto text = [&](int base) { return "#define KJIT_BASE " + std::to_string(base) + "\n" + kSource; };
  write_file(dir / "x.cu", text(3000));
  write_file(dir / "y.cu", text(4000));
  const CompiledBinary x = compile(Template::from_file(dir / "x.cu"), on);
  const CompiledBinary y = compile(Template::from_file(dir / "y.cu"), on);
  EXPECT_EQ(x.payload, compile(Template::from_file(dir / "x.cu"), off).payload);
  EXPECT_EQ(y.payload, compile(Template::from_file(dir / "y.cu"), off).payload);
  EXPECT_NE(y.payload.find("4001"), std::string::npos) << y.payload;
}

// A PCH that cannot be written (here: a file size limit, as a full TMPDIR gives "error while writing
// precompiled header file") fails no compile: the compile runs without it, once, with one warning, and
// the process makes no PCH after that. In a child process, whose limit ends with it.
TEST(Pch, APrecompiledHeaderThatCannotBeWrittenIsACompileWithoutIt) {
  skip_without_pch();
  TempDir dir("kjit-pchtest");
  write_file(dir / "config.h", "#define KJIT_CONFIG_VALUE 1111\n");
  write_file(dir / "k.cu", kSource);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setenv("TMPDIR", dir.path().c_str(), 1);
    ::signal(SIGXFSZ, SIG_IGN);        // a write past the limit fails with EFBIG instead
    rlimit limit{64 << 10, 64 << 10};  // room for a kernel and the cache's files, not for a PCH
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(10);
    std::vector<std::string> warnings;
    kjit::log::set_warning_sink([&](const std::string& m) { warnings.push_back(m); });
    try {
      const Settings on = settings_with(PchMode::On, dir.path());
      const CompiledBinary first = compile(Template::from_file(dir / "k.cu"), on);
      if (first.payload.find("1111") == std::string::npos) ::_exit(11);
      if (used_pch(first)) ::_exit(12);  // the flags of the compile that made the binary
      const CompiledBinary second = compile(Template::from_file(dir / "k.cu"), on);
      if (used_pch(second)) ::_exit(13);  // off for the rest of the process
      if (warnings.size() != 1 || warnings[0].find("could not use a precompiled header") == std::string::npos ||
          warnings[0].find("KJIT_PCH=off") == std::string::npos) {
        for (const auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
        ::_exit(15);
      }
      ::_exit(0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      ::_exit(14);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no limit, 11: wrong binary, 12/13: the PCH stayed on, 14: the compile "
                                       "failed (see stderr), 15: not one warning saying why";
}

// A process killed while it had a PCH folder leaves it; the next process's first PCH compile removes it
// (and `kjit prune` does: test_cli), never a folder whose process lives, nor another user's.
TEST(Pch, TheFoldersOfAProcessThatIsGoneAreRemovedAndNoOtherOnes) {
  TempDir dir("kjit-pchtest");
  ScopedEnv tmp("TMPDIR", dir.path().string());
  ASSERT_EQ(kjit::pch_parent_dir(), dir.path());
  // Two children make their folders and write a file in them; one is killed, the other waits.
  int ready[2], hold[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(hold), 0);
  auto spawn = [&] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(hold[1]);  // so that the parent's close ends the read below
      ::close(ready[0]);
      const std::string folder = kjit::PchFolders::process().folder_for("ab12");
      if (folder.empty()) ::_exit(1);
      write_file(fs::path(folder) / "some.pch", std::string(4096, 'x'));
      char c = 1;
      if (::write(ready[1], &c, 1) != 1) ::_exit(2);
      (void)::read(hold[0], &c, 1);  // until the parent closes its end
      std::exit(0);                  // the exit handlers: this process's PCH root goes
    }
    return pid;
  };
  const pid_t killed = spawn(), living = spawn();
  ASSERT_GT(killed, 0);
  ASSERT_GT(living, 0);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::kill(killed, SIGKILL);
  int status = 0;
  ::waitpid(killed, &status, 0);
  auto roots = [&] {
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir.path()))
      if (e.path().filename().string().rfind("kjit-pch-", 0) == 0) ++n;
    return n;
  };
  ASSERT_EQ(roots(), 2u);
  // A folder of a kjit from before the lock (none in it): kept while young.
  fs::create_directories(dir / "kjit-pch-legacy1");
  const auto removed = kjit::remove_abandoned_pch_roots(dir.path());
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_GE(removed[0].bytes, 4096u);
  EXPECT_EQ(roots(), 2u);  // the living child's, and the young legacy one
  EXPECT_TRUE(fs::exists(dir / "kjit-pch-legacy1"));
  // Once old, the legacy folder goes too.
  EXPECT_EQ(kjit::remove_abandoned_pch_roots(dir.path(), /*legacy_age_s=*/-1).size(), 1u);
  EXPECT_FALSE(fs::exists(dir / "kjit-pch-legacy1"));
  // The living child's folder goes with it, at its exit.
  ::close(hold[1]);
  ::waitpid(living, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(roots(), 0u);
  ::close(hold[0]);
  ::close(ready[0]);
  ::close(ready[1]);
}

// At most kKeptDomains header domains keep a folder (each PCH is ~180 MB for CUB's headers): the least
// recently used goes first.
TEST(Pch, OnlyTheMostRecentlyUsedDomainsKeepAFolder) {
  TempDir dir("kjit-pchtest");
  ScopedEnv tmp("TMPDIR", dir.path().string());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    kjit::PchFolders& f = kjit::PchFolders::process();
    const std::string a = f.folder_for("aa"), b = f.folder_for("bb");
    if (a.empty() || b.empty() || !fs::is_directory(a)) ::_exit(1);
    if (f.folder_for("aa") != a) ::_exit(2);  // aa is now the most recent
    const std::string c = f.folder_for("cc");
    if (!fs::is_directory(a) || fs::exists(b) || !fs::is_directory(c)) ::_exit(3);
    if (!f.folder_for("not hex!").empty()) ::_exit(4);
    f.drop("aa");
    if (fs::exists(a)) ::_exit(5);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}
