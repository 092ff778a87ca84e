// A build of kjit with one more compile option: this binary adds nothing but one row to the field table
// (at load time, before any test runs) and sees the option in the key, the `kjit compile` flags, the
// manifest round trip and the strict-miss command. (Python's Template.kernel() keywords are a pybind
// signature fixed at build time: a row added here does not reach them; tests/python/test_kernel_api.py checks
// that the keywords are the table's fields.)
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

namespace {

using kjit::CompileOptions;
using kjit::TemplateArg;
using kjit::testing::TempDir;

// The one row: an enum option whose NVRTC flag defines a macro (so that a compile takes it).
const bool kAdded = [] {
  kjit::CompileOptionField f;
  f.name = "test_level";
  f.kind = kjit::CompileOptionField::Kind::Enum;
  f.default_value = std::string("low");
  f.choices = {"low", "high"};
  f.flag = "-DKJIT_TEST_LEVEL=";
  f.cli = "--test-level";
  f.cli_value = "LEVEL";
  f.help = "A test's option: low (default) or high";
  kjit::add_compile_option_field(f);
  return true;
}();

CompileOptions at(const std::string& level) {
  CompileOptions o;
  kjit::find_compile_option_field("test_level")->set(o, kjit::OptionValue(level));
  return o;
}

kjit::Specialization add_constant(CompileOptions o) {
  return kjit::Specialization(kjit::Template::builtin("add_constant"), "add_constant",
                              {{"T", TemplateArg::type(kjit::DType::Float32)}, {"VEC", TemplateArg::integer(4)}},
                              std::move(o));
}

TEST(AddedCompileOption, IsInTheKeyOnlyWhenSet) {
  ASSERT_TRUE(kAdded);
  EXPECT_EQ(kjit::compile_option_fields().back().name, "test_level");
  EXPECT_EQ(CompileOptions().canonical(), std::vector<std::string>{"--std=c++20"});  // every earlier key stands
  EXPECT_TRUE(at("low") == CompileOptions());
  EXPECT_TRUE(at("low").added.empty());
  EXPECT_EQ(at("high").canonical(), (std::vector<std::string>{"--std=c++20", "-DKJIT_TEST_LEVEL=high"}));
  EXPECT_FALSE(at("high") == CompileOptions());
  CompileOptions bad = at("medium");
  EXPECT_THROW(bad.validate(), kjit::ValueError);
}

TEST(AddedCompileOption, KjitCompileTakesItsFlagAndMakesTheEnginesKey) {
  const CliRun help = cli({"compile", "--help"});
  EXPECT_NE(help.out.find("--test-level LEVEL"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("A test's option"), std::string::npos) << help.out;
  TempDir dir("kjit-added");
  auto key = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"--cache-dir", (dir / "cache").string(),
                                  "compile",     "add_constant",
                                  "--kernel",    "add_constant",
                                  "--param",     "T=float32",
                                  "--param",     "VEC=4",
                                  "--arch",      "sm_90",
                                  "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliRun r = cli(args);
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(r.out)["results"][0]["key"].get<std::string>();
  };
  const std::string high = key({"--test-level", "high"});
  EXPECT_NE(high, key({}));
  EXPECT_EQ(key({"--test-level", "low"}), key({}));
  EXPECT_NE(cli({"compile", "add_constant", "--kernel", "add_constant", "--arch", "sm_90", "--test-level", "x"}).code,
            0);
  kjit::Engine engine(kjit::Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}}));
  kjit::Origin origin = kjit::Origin::Memory;
  const auto p = engine.prepare(add_constant(at("high")), kjit::Target::parse("sm_90"), &origin);
  EXPECT_EQ(p->key.hex(), high);
  EXPECT_EQ(origin, kjit::Origin::Disk);  // the CLI's entry
}

TEST(AddedCompileOption, ARecordKeepsItAndEarlierRecordsKeepTheirIds) {
  const kjit::cache::ManifestRecord high = kjit::to_record(add_constant(at("high")));
  const kjit::cache::ManifestRecord low = kjit::to_record(add_constant(CompileOptions()));
  EXPECT_EQ(low.options, kjit::cache::kDefaultManifestOptions);  // what every record had before the row
  EXPECT_EQ(nlohmann::json::parse(high.options)["test_level"], "high");
  EXPECT_NE(high.id(), low.id());
  kjit::cache::Manifest m;
  m.add(high);
  m.add(low);
  const kjit::cache::Manifest back = kjit::cache::parse_manifest(kjit::cache::manifest_to_json(m), "m.json");
  ASSERT_EQ(back.records().size(), 2u);
  EXPECT_EQ(back.records()[0].id(), high.id());
  const auto& r = back.records()[0];
  EXPECT_TRUE(kjit::specialization_of(r, kjit::template_of(r)).options() == at("high"));
  const auto& r2 = back.records()[1];
  EXPECT_TRUE(kjit::specialization_of(r2, kjit::template_of(r2)).options() == CompileOptions());
}

TEST(AddedCompileOption, TheStrictMissCommandGivesIt) {
  const std::string cmd = kjit::compile_command(add_constant(at("high")), kjit::Target::parse("sm_90"));
  EXPECT_EQ(cmd,
            "kjit compile add_constant --kernel add_constant --param T=float32 --param VEC=4 --test-level high "
            "--arch sm_90");
  EXPECT_EQ(kjit::compile_command(add_constant(CompileOptions()), kjit::Target::parse("sm_90")).find("--test-level"),
            std::string::npos);
}

}  // namespace
