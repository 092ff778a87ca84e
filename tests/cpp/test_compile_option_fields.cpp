// The compile option field table (compile_option_fields.hpp): what derives from it keeps the keys and
// manifest record ids of every option as they were, `kjit compile` has a flag for every field, and the
// command a strict-mode miss suggests makes the key that was missed (run through the built binary).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "kjit/cache/manifest.hpp"
#include "kjit/compile_command.hpp"
#include "kjit/compile_option_fields.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/spec_record.hpp"
#include "test_support.hpp"

using kjit::testing::cli;
using kjit::testing::CliRun;
using kjit::testing::run_shell;

namespace {

using kjit::CompileOptionField;
using kjit::CompileOptions;
using kjit::TemplateArg;
using kjit::testing::ScopedEnv;
using kjit::testing::TempDir;

CompileOptions every_option_set() {
  CompileOptions o;
  o.std = "c++17";
  o.fast_math = o.line_info = o.device_debug = o.minimal = o.default_device = true;
  o.fast_compile = "mid";
  o.max_registers = 64;
  o.defines = {{"B", ""}, {"A", "1"}};
  return o;
}

// The canonical list is what keys hash: its text for each option is pinned as kjit wrote it before the
// field table, so no key compiled before it changed.
TEST(CompileOptionFields, TheCanonicalListIsWhatItWas) {
  EXPECT_EQ(CompileOptions().canonical(), std::vector<std::string>{"--std=c++20"});
  EXPECT_EQ(
      every_option_set().canonical(),
      (std::vector<std::string>{"--std=c++17", "--use_fast_math", "--generate-line-info", "--device-debug", "--minimal",
                                "-default-device", "--Ofast-compile=mid", "--maxrregcount=64", "-DA=1", "-DB="}));
  CompileOptions lib;
  lib.minimal = true;
  EXPECT_EQ(lib.canonical(), (std::vector<std::string>{"--std=c++20", "--minimal"}));
  EXPECT_EQ(every_option_set().nvrtc_flags(kjit::Target::parse("sm_90")).back(), "--gpu-architecture=sm_90");
}

// The options of a manifest record are what kjit wrote before the field table (the record id hashes
// them): the first six fields always, the later ones only when set.
TEST(CompileOptionFields, TheManifestJsonIsWhatItWas) {
  EXPECT_EQ(kjit::options_to_json(CompileOptions()), kjit::cache::kDefaultManifestOptions);
  EXPECT_EQ(kjit::options_to_json(every_option_set()),
            "{\"default_device\":true,\"defines\":{\"A\":\"1\",\"B\":\"\"},\"device_debug\":true,\"fast_compile\":"
            "\"mid\",\"fast_math\":true,\"line_info\":true,\"max_registers\":64,\"minimal\":true,\"std\":\"c++17\"}");
  EXPECT_TRUE(kjit::options_from_json(kjit::options_to_json(every_option_set()), "here") == every_option_set());
  EXPECT_TRUE(kjit::options_from_json(kjit::cache::kDefaultManifestOptions, "here") == CompileOptions());
}

// Each field: its default is what CompileOptions{} holds, a value other than the default is seen by ==,
// the key, the manifest JSON (read back the same) and the `kjit compile` arguments, and its setter takes
// a value of its kind.
TEST(CompileOptionFields, EveryFieldReachesEveryForm) {
  for (const CompileOptionField& f : kjit::compile_option_fields()) {
    SCOPED_TRACE(f.name);
    EXPECT_TRUE(f.get(CompileOptions()) == f.default_value);
    CompileOptions o;
    switch (f.kind) {
      case CompileOptionField::Kind::Bool: f.set(o, kjit::OptionValue(true)); break;
      case CompileOptionField::Kind::Int: f.set(o, kjit::OptionValue(std::optional<int>(f.max))); break;
      case CompileOptionField::Kind::Enum:
        f.set(o, kjit::OptionValue(f.choices.front() == std::get<std::string>(f.default_value) ? f.choices.back()
                                                                                               : f.choices.front()));
        break;
      case CompileOptionField::Kind::String: f.set(o, kjit::OptionValue(std::string("x"))); break;
      case CompileOptionField::Kind::Defines:
        f.set(o, kjit::OptionValue(std::map<std::string, std::string>{{"X", "1"}}));
        break;
    }
    EXPECT_NO_THROW(o.validate());
    EXPECT_FALSE(o == CompileOptions());
    EXPECT_NE(o.canonical(), CompileOptions().canonical());
    EXPECT_NE(kjit::options_to_json(o), kjit::options_to_json(CompileOptions()));
    EXPECT_TRUE(kjit::options_from_json(kjit::options_to_json(o), "here") == o);
    const std::vector<std::string> args = kjit::cli_arguments(o);
    ASSERT_FALSE(args.empty());
    EXPECT_EQ(args.front(), f.cli);
  }
  EXPECT_TRUE(kjit::cli_arguments(CompileOptions()).empty());
}

TEST(CompileOptionFields, BadValuesAndBadRowsAreClearErrors) {
  CompileOptions o;
  o.max_registers = 8;
  EXPECT_THROW(
      {
        try {
          o.validate();
        } catch (const kjit::ValueError& e) {
          EXPECT_STREQ(e.what(), "compile option max_registers=8 is not valid: allowed 16..255, or unset");
          throw;
        }
      },
      kjit::ValueError);
  o = CompileOptions();
  o.std = "c++14";
  EXPECT_THROW(o.validate(), kjit::ValueError);
  try {
    kjit::options_from_json("{\"std\":\"c++20\",\"fast_math\":1}", "record r");
    FAIL();
  } catch (const kjit::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("record r: field \"fast_math\" is number, expected boolean"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(kjit::options_from_json("[]", "r"), kjit::ValueError);
  CompileOptionField twice = kjit::compile_option_fields().front();
  EXPECT_THROW(kjit::add_compile_option_field(twice), kjit::ValueError);  // a name the table has
  CompileOptionField on_by_default;
  on_by_default.name = "on_by_default";
  on_by_default.cli = "--on-by-default";
  on_by_default.default_value = true;
  EXPECT_THROW(kjit::add_compile_option_field(on_by_default), kjit::ValueError);
  EXPECT_EQ(kjit::compile_option_fields().size(), 9u);
}

// `kjit compile` has a flag for every field (so every option Python's Template.kernel() takes: the
// Python suite compares its keywords with the table), with the row's help.
TEST(CompileOptionFields, KjitCompileHasAFlagForEveryField) {
  const CliRun help = cli({"compile", "--help"});
  ASSERT_EQ(help.code, 0) << help.err;
  for (const CompileOptionField& f : kjit::compile_option_fields()) {
    EXPECT_NE(help.out.find("  " + f.cli + (f.cli_value.empty() ? "" : " " + f.cli_value)), std::string::npos)
        << f.cli << "\n"
        << help.out;
    EXPECT_NE(help.out.find(f.help.substr(0, 30)), std::string::npos) << f.help << "\n" << help.out;
  }
  TempDir dir("kjit-fields");
  const CliRun bad = cli({"--cache-dir", dir.path().string(), "compile", "add_constant", "--kernel", "add_constant",
                          "--param", "T=float32", "--param", "VEC=4", "--arch", "sm_90", "--max-registers", "lots"});
  EXPECT_EQ(bad.code, 1) << bad.err;
  EXPECT_NE(bad.err.find("--max-registers 'lots' is not an integer; give 16..255"), std::string::npos) << bad.err;
}

// A POSIX shell's words of `cmd` (plain words and '...' quoting: what compile_command writes).
std::vector<std::string> shell_words(const std::string& cmd) {
  std::vector<std::string> out;
  std::string word;
  bool in_word = false, quoted = false, escaped = false;
  for (char c : cmd) {
    if (escaped) {
      word += c;
      escaped = false;
    } else if (quoted) {
      if (c == '\'')
        quoted = false;
      else
        word += c;
    } else if (c == '\'') {
      quoted = in_word = true;
    } else if (c == '\\') {
      in_word = escaped = true;  // the next character is literal (compile_command writes \' only)
    } else if (c == ' ') {
      if (in_word) out.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(word);
  return out;
}

TEST(CompileOptionFields, CompileCommandQuotesWhatAShellWouldSplit) {
  CompileOptions o;
  o.defines = {{"MSG", "it's here"}, {"N", "4"}};
  const kjit::Specialization spec(kjit::Template::builtin("add_constant"), "add_constant",
                                  {{"T", TemplateArg::type(kjit::DType::Float32)}, {"VEC", TemplateArg::integer(4)}},
                                  o);
  const std::string cmd = kjit::compile_command(spec, kjit::Target::parse("sm_90"));
  EXPECT_EQ(cmd,
            "kjit compile add_constant --kernel add_constant --param T=float32 --param VEC=4 --define 'MSG=it'\\''s "
            "here' --define N=4 --arch sm_90");
  EXPECT_EQ(shell_words(cmd).at(10), "MSG=it's here");
}

// What the binary prints and its exit status (stdout only).
// A strict-mode miss of `spec` names its key and a `kjit compile` command; that command, run by a shell
// with the built binary into a fresh cache, makes that very key.
void expect_the_miss_command_reproduces_the_key(const kjit::Specialization& spec) {
  TempDir dir("kjit-miss");
  kjit::Engine strict(
      kjit::Settings::from_map({{"KJIT_CACHE_DIR", (dir / "empty").string()}, {"KJIT_CACHE_MODE", "strict"}}));
  std::string message, key;
  try {
    strict.prepare(spec, kjit::Target::parse("sm_90"));
    FAIL() << "no miss";
  } catch (const kjit::CacheMissError& e) {
    message = e.what();
    key = e.key();
  }
  const std::size_t from = message.find("`kjit compile ");
  ASSERT_NE(from, std::string::npos) << message;
  const std::size_t to = message.find('`', from + 1);
  ASSERT_NE(to, std::string::npos) << message;
  const std::string command = message.substr(from + 1, to - from - 1);
  ASSERT_EQ(command.rfind("kjit compile ", 0), 0u);
  SCOPED_TRACE(command);
  const CliRun r = run_shell("KJIT_CACHE_MODE= KJIT_CACHE_PATH= " + std::string(KJIT_CLI_PATH) + command.substr(4) +
                             " --json --cache-dir '" + (dir / "fresh").string() + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["results"][0]["key"], key);
  EXPECT_EQ(j["results"][0]["origin"], "compiled");
}

kjit::Specialization add_constant(CompileOptions o) {
  return kjit::Specialization(kjit::Template::builtin("add_constant"), "add_constant",
                              {{"T", TemplateArg::type(kjit::DType::Float16)}, {"VEC", TemplateArg::integer(2)}},
                              std::move(o));
}

TEST(CompileOptionFields, TheStrictMissCommandReproducesTheMissedKey) {
  CompileOptions o;
  o.line_info = true;
  o.max_registers = 64;
  o.fast_compile = "min";
  o.defines = {{"NOTE", "two words"}, {"FLAG", "1"}};
  expect_the_miss_command_reproduces_the_key(add_constant(o));
}

// kjit's own kernels compile with the library's options (--minimal, and the fast-compile level of
// KJIT_LIBRARY_FAST_COMPILE): the command names them, so it warms what an op looks up.
TEST(CompileOptionFields, TheStrictMissCommandOfALibraryKernelReproducesItsKey) {
  CompileOptions lib = CompileOptions::library();
  lib.fast_compile = "mid";  // as KJIT_LIBRARY_FAST_COMPILE=mid gives it
  ASSERT_TRUE(lib.minimal);
  expect_the_miss_command_reproduces_the_key(add_constant(lib));
  expect_the_miss_command_reproduces_the_key(add_constant(CompileOptions::library()));
}

}  // namespace
