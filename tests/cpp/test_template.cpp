// Template loading: include resolution, header bytes held, built-in names, digests.
#include <gtest/gtest.h>

#include "kjit/error.hpp"
#include "kjit/target.hpp"
#include "kjit/template.hpp"
#include "test_support.hpp"

using namespace kjit;
using kjit::testing::TempDir;
using kjit::testing::write_file;

TEST(Template, ResolvesNestedIncludesRelativeToTheIncludingFile) {
  TempDir dir;
  write_file(dir / "src" / "main.cu", "#include \"sub/a.cuh\"\n__global__ void k() {}\n");
  write_file(dir / "src" / "sub" / "a.cuh", "#pragma once\n#include \"b.cuh\"\n");
  write_file(dir / "src" / "sub" / "b.cuh", "#pragma once\n// b\n");
  auto t = Template::from_file(dir / "src" / "main.cu");
  std::vector<std::string> names;
  for (const auto& h : t->headers()) names.push_back(h.include_name);
  EXPECT_EQ(names, (std::vector<std::string>{"sub/a.cuh", "b.cuh"}));
  EXPECT_EQ(t->headers()[1].bytes, "#pragma once\n// b\n");
  EXPECT_EQ(t->name(), "main.cu");
}

// The scanner joins backslash-newlines (LF and CRLF) before reading directives, as the preprocessor does:
// every spliced directive below is an include NVRTC would follow, so kjit must find and hash its header.
// Only a backslash that ends a line splices: of two before a newline, the second.
TEST(Template, IncludesSplicedOverSeveralLinesAreFound) {
  TempDir dir;
  for (const char* name : {"a.cuh", "b.cuh", "c.cuh", "d.cuh"})
    write_file(dir / name, std::string("// ") + name + "\n");
  const std::string source =
      "#inc\\\nlude \"a.cuh\"\n"          // LF
      "#\\\r\ninclude \"b.cuh\"\n"        // CRLF
      "#in\\\ncl\\\nude \\\n\"c.cuh\"\n"  // several on one directive
      "// a comment \\\\\n"               // "\\" then a newline: the second backslash splices this
      "#include \"d.cuh\"\n"              // line onto the comment, so NVRTC never sees this include
      "#define PATH \"x\\y\"\n"
      "__global__ void k() {}\n";
  auto t = Template::from_string(source, "s.cu", {dir.path()});
  std::vector<std::string> names;
  for (const auto& h : t->headers()) names.push_back(h.include_name);
  EXPECT_EQ(names, (std::vector<std::string>{"a.cuh", "b.cuh", "c.cuh"}));
}

TEST(Template, UserIncludeDirsAndUnresolvedIncludes) {
  TempDir dir;
  write_file(dir / "inc" / "lib.cuh", "#pragma once\n");
  auto t = Template::from_string("#include <lib.cuh>\n#include <does_not_exist.h>\n__global__ void k() {}\n", "s.cu",
                                 {dir / "inc"});
  ASSERT_EQ(t->headers().size(), 1u);
  EXPECT_FALSE(t->headers()[0].from_cuda);
  EXPECT_EQ(t->unresolved_includes(), std::vector<std::string>{"does_not_exist.h"});
}

TEST(Template, DigestFollowsSourceAndHeaderBytes) {
  TempDir dir;
  write_file(dir / "h.cuh", "#define A 1\n");
  write_file(dir / "k.cu", "#include \"h.cuh\"\n__global__ void k() {}\n");
  std::string d1 = Template::from_file(dir / "k.cu")->digest();
  EXPECT_EQ(d1, Template::from_file(dir / "k.cu")->digest());
  write_file(dir / "h.cuh", "#define A 2\n");
  std::string d2 = Template::from_file(dir / "k.cu")->digest();
  EXPECT_NE(d1, d2);
  write_file(dir / "k.cu", "#include \"h.cuh\"\n__global__ void k() { }\n");
  EXPECT_NE(d2, Template::from_file(dir / "k.cu")->digest());
  EXPECT_EQ(d1.size(), 64u);
}

TEST(Template, BuiltinNamesCannotEscapeTheirFolder) {
  for (std::string bad : {"../CMakeLists", "/etc/passwd", "add_constant.cuh", "a/b", "", "detail/numeric"}) {
    try {
      Template::builtin(bad);
      FAIL() << "accepted " << bad;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("is not valid: names are letters, digits and '_'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Template, UnknownBuiltinListsTheAvailableOnes) {
  try {
    Template::builtin("nope");
    FAIL();
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("there is no built-in template 'nope'"), std::string::npos) << m;
    EXPECT_NE(m.find("add_constant"), std::string::npos) << m;
    EXPECT_NE(m.find("rgb_to_gray"), std::string::npos) << m;
  }
}

TEST(Template, BuiltinsAreListedWithoutHelpers) {
  auto names = Template::builtin_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "add_constant"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "numeric"), names.end());
}

TEST(Template, MissingFileIsAClearError) { EXPECT_THROW(Template::from_file("/nonexistent/k.cu"), ValueError); }

TEST(Target, ParsesAndRejects) {
  EXPECT_EQ(Target::parse("sm_90").str(), "sm_90");
  EXPECT_EQ(Target::parse("sm_90a").str(), "sm_90a");
  EXPECT_EQ(Target::parse("compute_80").str(), "compute_80");
  EXPECT_TRUE(Target::parse("compute_80").is_ptx());
  EXPECT_EQ(Target::parse("9.0").str(), "sm_90");
  EXPECT_EQ(Target::parse("100").str(), "sm_100");
  EXPECT_THROW(Target::parse("sm90"), ValueError);
  EXPECT_THROW(Target::parse("compute_90a"), ValueError);
  EXPECT_THROW(Target::parse("sm_20"), ValueError);
}

TEST(Template, UserIncludeDirsComeBeforeKjitsOwnHeaders) {
  TempDir dir;
  // The user has a header with the same include name as one of kjit's built-in helpers.
  write_file(dir / "inc" / "detail" / "numeric.cuh", "#pragma once\n// the user's own\n");
  auto t = Template::from_string("#include <detail/numeric.cuh>\n__global__ void k() {}\n", "u.cu", {dir / "inc"});
  ASSERT_FALSE(t->headers().empty());
  EXPECT_EQ(t->headers()[0].bytes, "#pragma once\n// the user's own\n");
}

// Path traversal: an include name that is absolute or climbs with ".." never reads a file through kjit's
// templates folder, nor for a template rebuilt from a (possibly hostile) manifest; the user's own files
// keep the compiler's rules.
namespace {
std::vector<std::string> header_names(const Template& t) {
  std::vector<std::string> names;
  for (const auto& h : t.headers()) names.push_back(h.include_name);
  return names;
}
}  // namespace

TEST(Template, IncludeNamesCannotClimbOutOfKjitsFolder) {
  // kernel_templates/../CMakeLists.txt exists (the project's own): it must not be reachable.
  auto t = Template::from_string(
      "#include \"../CMakeLists.txt\"\n#include <../CMakeLists.txt>\n__global__ void k() {}\n", "climb.cu");
  EXPECT_TRUE(t->headers().empty()) << header_names(*t)[0];
  EXPECT_EQ(t->unresolved_includes(), std::vector<std::string>{"../CMakeLists.txt"});
}

TEST(Template, ManifestTemplatesResolveEscapingNamesOnlyAmongTheirRecordedHeaders) {
  TempDir dir;
  write_file(dir / "secret.txt", "#define SECRET 42\n");
  const std::string absolute = (dir / "secret.txt").string();
  const std::string source = "#include \"" + absolute + "\"\n#include \"../secret.txt\"\n__global__ void k() {}\n";
  auto t = Template::from_memory(source, "recorded.cu", {});
  EXPECT_EQ(t->unresolved_includes(), (std::vector<std::string>{absolute, "../secret.txt"}));
  // NVRTC gets an #error in their place, as a compile-only header outside the digest.
  EXPECT_TRUE(t->headers().empty());
  std::vector<std::string> stand_ins;
  for (const auto& h : t->compile_only_headers()) {
    stand_ins.push_back(h.include_name);
    EXPECT_EQ(h.bytes.rfind("#error \"kjit: ", 0), 0u) << h.bytes;
  }
  EXPECT_EQ(stand_ins, (std::vector<std::string>{absolute, "../secret.txt"}));
  const std::string missing = "#include \"/nonexistent/kjit/x.h\"\n#include \"../nonexistent_kjit.h\"\n";
  EXPECT_EQ(Template::from_memory(missing, "m.cu", {})->digest(), Template::from_string(missing, "m.cu")->digest())
      << "the #error stand-ins are not part of the digest: the recorded template keeps its key";
  // The recorded bytes are used, never the file system.
  auto recorded =
      Template::from_memory(source, "recorded.cu", {{absolute, "#define SECRET 1\n"}, {"../secret.txt", "//\n"}});
  ASSERT_EQ(recorded->headers().size(), 2u);
  EXPECT_EQ(recorded->headers()[0].bytes, "#define SECRET 1\n");
  EXPECT_TRUE(recorded->unresolved_includes().empty());
}

TEST(Template, UserFilesMayIncludeAcrossFolders) {
  TempDir dir;
  write_file(dir / "common.cuh", "#pragma once\n// common\n");
  write_file(dir / "src" / "k.cu", "#include \"../common.cuh\"\n#include \"" + (dir / "common.cuh").string() +
                                       "\"\n__global__ void k() {}\n");
  auto t = Template::from_file(dir / "src" / "k.cu");
  ASSERT_EQ(t->headers().size(), 1u) << "the same file, included twice, is held once";
  EXPECT_EQ(t->headers()[0].bytes, "#pragma once\n// common\n");
}
