// Manifests: record ids, the JSON round trip, defensive parsing, templates rebuilt from records, and
// KJIT_RECORD from 4 concurrent processes (no lost or duplicated record).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <set>

#include "kjit/cache/manifest.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "kjit/log.hpp"
#include "kjit/spec_record.hpp"
#include "kjit/target.hpp"
#include "child_process.hpp"
#include "manifest_json.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using kjit::TemplateArg;
using kjit::cache::Manifest;
using kjit::cache::ManifestArg;
using kjit::cache::ManifestRecord;
using namespace kjit::testing;

kjit::Specialization add_constant(const std::string& dtype, int vec, kjit::CompileOptions o = {}) {
  return kjit::Specialization(
      kjit::Template::builtin("add_constant"), "add_constant",
      {{"T", TemplateArg::type(*kjit::dtype_from_name(dtype))}, {"VEC", TemplateArg::integer(vec)}}, std::move(o));
}

const char* kUserSource =
    "#include \"scale_detail.cuh\"\n"
    "template <typename T, int N, bool NEG, double F>\n"
    "__global__ void scale(T* x) { x[threadIdx.x] = (T)(SCALE_BASE * N * F * (NEG ? -1 : 1)); }\n";

// A user template in a folder of its own (with one header), loaded from the file.
std::shared_ptr<const kjit::Template> user_template(const TempDir& dir) {
  write_file(dir / "scale.cu", kUserSource);
  write_file(dir / "scale_detail.cuh", "#define SCALE_BASE 2\n");
  return kjit::Template::from_file(dir / "scale.cu");
}

kjit::Specialization user_spec(std::shared_ptr<const kjit::Template> t) {
  kjit::CompileOptions o;
  o.fast_math = true;
  o.max_registers = 64;
  o.defines = {{"A", "1"}};
  return kjit::Specialization(std::move(t), "scale",
                              {{"T", TemplateArg::type(kjit::DType::Float32)},
                               {"N", TemplateArg::integer(-3)},
                               {"NEG", TemplateArg::boolean(true)},
                               {"F", TemplateArg::floating(0.1)}},
                              o);
}

// The lines of a version 2 manifest, as JSON.
std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t end = text.find('\n', pos);
    out.push_back(nlohmann::json::parse(text.substr(pos, end - pos)));
    pos = end == std::string::npos ? text.size() : end + 1;
  }
  return out;
}

TEST(Manifest, RecordOfABuiltinNamesItOnly) {
  const ManifestRecord r = kjit::to_record(add_constant("float16", 4));
  EXPECT_TRUE(r.builtin);
  EXPECT_EQ(r.template_name, "add_constant");
  EXPECT_FALSE(r.sources);  // a built-in is named, not carried
  ASSERT_EQ(r.args.size(), 2u);
  EXPECT_EQ(r.args[0].dtype, "float16");
  EXPECT_EQ(r.args[1].integer, 4);
  EXPECT_EQ(r.describe(), "add_constant(T=float16, VEC=4) from template add_constant");
  EXPECT_EQ(r.id(), kjit::to_record(add_constant("float16", 4)).id());
  EXPECT_NE(r.id(), kjit::to_record(add_constant("float32", 4)).id());
  kjit::CompileOptions o;
  o.line_info = true;
  EXPECT_NE(r.id(), kjit::to_record(add_constant("float16", 4, o)).id());
}

TEST(Manifest, JsonRoundTripKeepsEveryFieldAndExactFloats) {
  TempDir dir("kjit-manifest");
  const ManifestRecord r = kjit::to_record(user_spec(user_template(dir)));
  EXPECT_FALSE(r.builtin);
  ASSERT_TRUE(r.sources);
  EXPECT_EQ(r.sources->source(), kUserSource);
  ASSERT_EQ(r.sources->headers().count("scale_detail.cuh"), 1u);
  for (const auto& [name, bytes] : r.sources->headers()) EXPECT_EQ(name.find("cuda"), std::string::npos) << name;
  Manifest m;
  EXPECT_TRUE(m.add(r));
  EXPECT_FALSE(m.add(r));
  EXPECT_TRUE(m.add(kjit::to_record(add_constant("float32", 2))));
  const std::string text = kjit::cache::manifest_to_json(m);
  const std::vector<nlohmann::json> lines = json_lines(text);
  ASSERT_EQ(lines.size(), 4u);  // the version, the user template's sources, two records
  EXPECT_EQ(lines[0]["kjit_manifest"], 2);
  EXPECT_EQ(lines[1]["sources"]["source"], kUserSource);
  EXPECT_EQ(lines[2]["record"]["template"]["sources"], lines[1]["sources"]["id"]);
  EXPECT_EQ(lines[2]["record"]["args"][3]["value"], "0x1.999999999999ap-4");
  const Manifest back = kjit::cache::parse_manifest(text, "m.json");
  ASSERT_EQ(back.records().size(), 2u);
  const ManifestRecord& b = back.records()[0];
  EXPECT_EQ(b.id(), r.id());
  EXPECT_EQ(b.args[3].floating, 0.1);
  EXPECT_EQ(b.args[2].boolean, true);
  EXPECT_EQ(b.args[1].integer, -3);
  const kjit::CompileOptions bo = kjit::specialization_of(b, kjit::template_of(b)).options();
  EXPECT_EQ(bo.max_registers, 64);
  EXPECT_TRUE(bo.fast_math);
  EXPECT_EQ(bo.defines.at("A"), "1");
  EXPECT_EQ(kjit::cache::manifest_to_json(back), text);
}

// The text of a manifest holding `on`, then `off`: two records of different ids.
std::string manifest_of_two(const ManifestRecord& on, const ManifestRecord& off) {
  EXPECT_NE(on.id(), off.id());
  Manifest m;
  EXPECT_TRUE(m.add(on));
  EXPECT_TRUE(m.add(off));
  return kjit::cache::manifest_to_json(m);
}

// An option added after manifests existed (minimal, fast_compile) is kept by a record and read back into the
// same options, hence the same key; a record without it has no such field at all, so every record written
// before the option existed keeps its id. `written` is how the record spells the option's value; a value of
// the wrong JSON type is a clear error naming the field (the engine's, reading the options through the
// field table: the cache layer keeps them as a JSON object it does not read inside).
void expect_recorded_only_when_on(const kjit::CompileOptions& with, const std::string& field,
                                  const std::string& written) {
  const ManifestRecord on = kjit::to_record(add_constant("float32", 4, with));
  const ManifestRecord off = kjit::to_record(add_constant("float32", 4));
  const std::string text = manifest_of_two(on, off);
  const std::vector<nlohmann::json> lines = json_lines(text);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1]["record"]["options"][field].dump(), written);
  EXPECT_FALSE(lines[2]["record"]["options"].contains(field)) << lines[2].dump();
  const Manifest back = kjit::cache::parse_manifest(text, "m.json");
  ASSERT_EQ(back.records().size(), 2u);
  EXPECT_EQ(back.records()[0].id(), on.id());
  EXPECT_EQ(back.records()[1].id(), off.id());
  const kjit::Specialization again = kjit::specialization_of(back.records()[0], kjit::template_of(back.records()[0]));
  EXPECT_TRUE(again.options() == with);
  const kjit::Specialization plain = kjit::specialization_of(back.records()[1], kjit::template_of(back.records()[1]));
  EXPECT_TRUE(plain.options() == kjit::CompileOptions());
  std::string bad = text;
  const std::string spelled = "\"" + field + "\":" + written;
  ASSERT_NE(bad.find(spelled), std::string::npos) << text;
  bad.replace(bad.find(spelled), spelled.size(), "\"" + field + "\":[1234]");
  try {
    const ManifestRecord r = kjit::cache::parse_manifest(bad, "m.json").records().at(0);
    kjit::specialization_of(r, kjit::template_of(r));
    FAIL() << "a " << field << " of the wrong type was read";
  } catch (const kjit::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(Manifest, TheLeanFrontEndIsRecordedOnlyWhenOn) {
  kjit::CompileOptions lean;
  lean.minimal = true;
  expect_recorded_only_when_on(lean, "minimal", "true");
}

TEST(Manifest, TheFastCompileLevelIsRecordedOnlyWhenOn) {
  kjit::CompileOptions mid;
  mid.fast_compile = "mid";
  expect_recorded_only_when_on(mid, "fast_compile", "\"mid\"");
}

// The id of a record written before "arch_specific" existed is what it was: the SHA-256 of this exact
// canonical JSON (computed apart from kjit), so no field added later may change it.
TEST(Manifest, AnOldRecordKeepsItsId) {
  ManifestRecord r;
  r.template_name = "add_constant";
  r.builtin = true;
  r.template_digest = "0123";
  r.kernel = "add_constant";
  ManifestArg t;
  t.name = "T";
  t.kind = ManifestArg::Kind::Type;
  t.dtype = "float32";
  ManifestArg vec;
  vec.name = "VEC";
  vec.integer = 4;
  r.args = {t, vec};
  // The options as the engine writes the defaults through its field table.
  r.options = kjit::to_record(add_constant("float32", 4)).options;
  EXPECT_EQ(r.id(), "bc5bd8bfd59f557b9ddf9cc4978fc77c08d7bace911aaf61b08957e6af62a7d8");
  Manifest m;
  m.add(r);
  const std::string text = kjit::cache::manifest_to_json(m);
  EXPECT_NE(
      text.find("{\"record\":{\"args\":[{\"kind\":\"type\",\"name\":\"T\",\"value\":\"float32\"},{\"kind\":"
                "\"integer\",\"name\":\"VEC\",\"value\":4}],\"id\":\"bc5bd8bfd59f557b9ddf9cc4978fc77c08d7bace911"
                "aaf61b08957e6af62a7d8\",\"kernel\":\"add_constant\",\"options\":{\"defines\":{},\"device_debug\":"
                "false,\"fast_math\":false,\"line_info\":false,\"max_registers\":null,\"std\":\"c++20\"},"
                "\"template\":{\"builtin\":true,\"digest\":\"0123\",\"name\":\"add_constant\"}}}\n"),
      std::string::npos)
      << text;
  r.arch_specific = true;  // the same with the field: its own id, pinned as well
  EXPECT_EQ(r.id(), "e972010818ce6354f82aa4b5fb4d0bbcd32641ecea8937b05695f3d1cb88c251");
}

// An arch-specific record (compiled for sm_XYa) is another record than the same specialization's for
// sm_XY; "arch_specific" is written only when true, read back, and a value of the wrong type is a clear
// error naming the field.
TEST(Manifest, ArchSpecificIsRecordedOnlyWhenTrueAndReadBack) {
  ManifestRecord on = kjit::to_record(add_constant("float32", 4));
  on.arch_specific = true;
  const ManifestRecord off = kjit::to_record(add_constant("float32", 4));
  const std::string text = manifest_of_two(on, off);
  const std::vector<nlohmann::json> lines = json_lines(text);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1]["record"]["arch_specific"], true);
  EXPECT_FALSE(lines[2]["record"].contains("arch_specific")) << lines[2].dump();
  const Manifest back = kjit::cache::parse_manifest(text, "m.json");
  ASSERT_EQ(back.records().size(), 2u);
  EXPECT_TRUE(back.records()[0].arch_specific);
  EXPECT_FALSE(back.records()[1].arch_specific);
  EXPECT_EQ(back.records()[0].id(), on.id());
  EXPECT_EQ(back.records()[1].id(), off.id());
  EXPECT_EQ(kjit::cache::manifest_to_json(back), text);
  std::string bad = text;
  const std::string spelled = "\"arch_specific\":true";
  ASSERT_NE(bad.find(spelled), std::string::npos) << text;
  bad.replace(bad.find(spelled), spelled.size(), "\"arch_specific\":\"yes\"");
  try {
    kjit::cache::parse_manifest(bad, "m.json");
    FAIL() << "an arch_specific of the wrong type was read";
  } catch (const kjit::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("arch_specific"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("m.json"), std::string::npos) << e.what();
  }
}

// KJIT_RECORD: what the Engine resolved for an sm_XYa target (an arch-specific KernelFamily's) is recorded
// as arch_specific, and the same specialization for sm_XY is a second record.
TEST(Manifest, TheRecorderMarksWhatWasResolvedForAnArchSpecificTarget) {
  TempDir dir("kjit-manifest");
  const fs::path file = dir / "m.json";
  {
    kjit::Engine engine(
        kjit::Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_RECORD", file.string()}}));
    engine.prepare(add_constant("float32", 4), kjit::Target::parse("sm_90a"));
    engine.prepare(add_constant("float32", 4), kjit::Target::parse("sm_90a"));  // once
    engine.prepare(add_constant("float32", 4), kjit::Target::parse("sm_90"));
    engine.prepare(add_constant("float32", 2), kjit::Target::parse("compute_90"));
  }
  const Manifest m = kjit::cache::read_manifest(file);
  ASSERT_EQ(m.records().size(), 3u);
  EXPECT_TRUE(m.records()[0].arch_specific);
  EXPECT_EQ(m.records()[0].arch, 90);
  EXPECT_FALSE(m.records()[1].arch_specific);
  EXPECT_EQ(m.records()[1].arch, 0);
  EXPECT_FALSE(m.records()[2].arch_specific);
  EXPECT_EQ(m.records()[1].id(), kjit::to_record(add_constant("float32", 4)).id());
  EXPECT_NE(m.records()[0].id(), m.records()[1].id());
}

// The one rule `kjit warm`, `export` and `prefetch` share: an arch-specific record is compiled for the
// sm_XYa it was recorded for and skipped, with why, for every other architecture and for PTX; a record of
// a kjit before "arch" is the sm_90 GEMM's.
TEST(Manifest, AnArchSpecificRecordIsWarmedForItsOwnSmXYaOnly) {
  using kjit::Target;
  using kjit::warm_target;
  for (int recorded : {90, 0}) {
    SCOPED_TRACE(recorded);
    EXPECT_EQ(warm_target(Target::parse("sm_90"), true, recorded).target, Target::parse("sm_90a"));
    EXPECT_EQ(warm_target(Target::parse("sm_90a"), true, recorded).target, Target::parse("sm_90a"));
    for (const char* other : {"sm_80", "sm_100", "sm_100a", "sm_89"}) {
      const kjit::WarmTarget w = warm_target(Target::parse(other), true, recorded);
      EXPECT_FALSE(w.target) << other;
      EXPECT_EQ(w.skipped_because,
                std::string("an arch-specific kernel recorded for sm_90a, which only an sm_90 GPU runs; on ") + other +
                    " the same op runs another kernel: record the workload on that GPU (KJIT_RECORD) and warm that "
                    "manifest too");
    }
    const kjit::WarmTarget ptx = warm_target(Target::parse("compute_90"), true, recorded);
    EXPECT_FALSE(ptx.target);
    EXPECT_EQ(ptx.skipped_because,
              "an arch-specific kernel (recorded for sm_90a) has no PTX form; ask for sm_90 to warm it");
  }
  EXPECT_EQ(warm_target(Target::parse("sm_100"), true, 100).target, Target::parse("sm_100a"));
  EXPECT_FALSE(warm_target(Target::parse("sm_90"), true, 100).target);
  for (const char* t : {"sm_90", "sm_90a", "compute_90", "sm_80"}) {
    EXPECT_EQ(warm_target(Target::parse(t), false, 0).target, Target::parse(t)) << t;
    EXPECT_TRUE(warm_target(Target::parse(t), false, 0).skipped_because.empty()) << t;
  }
}

// "arch" is written only for an arch-specific record, read back, and refused when it is not an
// architecture or belongs to a record that is not arch-specific.
TEST(Manifest, TheArchOfAnArchSpecificRecordIsWrittenAndReadBack) {
  ManifestRecord on = kjit::to_record(add_constant("float32", 4));
  on.arch_specific = true;
  const std::string old_id = on.id();
  on.arch = 90;
  EXPECT_NE(on.id(), old_id);
  Manifest m;
  m.add(on);
  const std::string text = kjit::cache::manifest_to_json(m);
  EXPECT_EQ(json_lines(text)[1]["record"]["arch"], 90);
  const Manifest back = kjit::cache::parse_manifest(text, "m.json");
  ASSERT_EQ(back.records().size(), 1u);
  EXPECT_EQ(back.records()[0].arch, 90);
  EXPECT_EQ(back.records()[0].id(), on.id());
  for (const std::string& bad : {std::string("\"arch\":\"sm_90a\""), std::string("\"arch\":5")}) {
    std::string edited = text;
    edited.replace(edited.find("\"arch\":90"), 9, bad);
    try {
      kjit::cache::parse_manifest(edited, "m.json");
      ADD_FAILURE() << "read " << bad;
    } catch (const kjit::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("\"arch\" must be the XY of an arch-specific record"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Manifest, AFileTemplateIsRebuiltAnywhereWithTheSameDigestAndKey) {
  std::shared_ptr<const kjit::Template> original;
  ManifestRecord r;
  {
    TempDir dir("kjit-manifest");
    original = user_template(dir);
    r = kjit::to_record(user_spec(original));
  }  // the files are gone
  std::string stale = "x";
  auto rebuilt = kjit::template_of(r, &stale);
  EXPECT_EQ(stale, "");
  EXPECT_EQ(rebuilt->digest(), original->digest());
  EXPECT_EQ(rebuilt->name(), "scale.cu");
  const kjit::Specialization a = user_spec(original);
  const kjit::Specialization b = kjit::specialization_of(r, rebuilt);
  EXPECT_EQ(b.name_expression(), a.name_expression());
  kjit::Engine engine(kjit::Settings::from_map({{"KJIT_CACHE_MODE", "off"}}));
  kjit::CompilePlan plan;
  plan.requested = plan.actual = kjit::Target::parse("sm_90");
  EXPECT_EQ(engine.key_for(a, plan), engine.key_for(b, plan));
}

TEST(Manifest, AChangedBuiltinIsReportedStale) {
  ManifestRecord r = kjit::to_record(add_constant("float32", 4));
  r.template_digest = std::string(64, '0');
  std::string stale;
  kjit::template_of(r, &stale);
  EXPECT_NE(stale.find("stale: the built-in template changed since recording"), std::string::npos) << stale;
}

TEST(Manifest, ARecordThatNoLongerFitsIsAClearError) {
  ManifestRecord r = kjit::to_record(add_constant("float32", 4));
  r.args[0].dtype = "float128";
  try {
    kjit::specialization_of(r, kjit::template_of(r));
    FAIL();
  } catch (const kjit::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'float128'"), std::string::npos) << e.what();
  }
}

void expect_parse_error(const std::string& text, const std::string& what) {
  try {
    kjit::cache::parse_manifest(text, "/x/m.json");
    FAIL() << "parsed: " << text;
  } catch (const kjit::ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("manifest /x/m.json is not valid"), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << m;
  }
}

// `text` parses, and rebuilding its first record's specialization fails with `what`, naming the record.
void expect_options_error(const std::string& text, const std::string& what) {
  const ManifestRecord r = kjit::cache::parse_manifest(text, "/x/m.json").records().at(0);
  try {
    kjit::specialization_of(r, kjit::template_of(r));
    FAIL() << "rebuilt: " << text;
  } catch (const kjit::ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the options of the manifest record add_constant(T=float32, VEC=4)"), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << m;
  }
}

TEST(Manifest, ParseErrorsNameTheFileAndWhatIsWrong) {
  expect_parse_error("{not json", "it is not JSON");
  expect_parse_error("[1]", "not a JSON object");
  expect_parse_error("{\"records\": []}", "no \"kjit_manifest\" version field");
  expect_parse_error("{\"kjit_manifest\": 2, \"records\": []}", "version 2 is not supported");
  expect_parse_error("{\"kjit_manifest\": 1}", "missing field \"records\"");
  expect_parse_error("{\"kjit_manifest\": 1, \"records\": {}}", "field \"records\" is object, expected array");
  expect_parse_error("{\"kjit_manifest\": 1, \"records\": [{\"kernel\": 3}]}",
                     "records[0]: missing field \"template\"");

  // Version 1 documents (still read): one JSON object holding the records.
  Manifest m;
  m.add(kjit::to_record(add_constant("float32", 4)));
  nlohmann::json j = {
      {"kjit_manifest", 1},
      {"records", nlohmann::json::array({json_lines(kjit::cache::manifest_to_json(m)).at(1)["record"]})}};
  auto edit = [&](auto f) {
    auto c = j;
    f(c["records"][0]);
    return c.dump();
  };
  expect_parse_error(edit([](auto& r) { r["args"][1]["kind"] = "string"; }),
                     "records[0].args[1]: kind 'string' is not one of type, integer, float, bool");
  expect_parse_error(edit([](auto& r) { r["args"][1]["value"] = "4"; }),
                     "records[0].args[1]: a integer argument cannot have the value \"4\"");
  // The options are the engine's to read (a field missing or of the wrong type: an error of the record's
  // specialization_of, which `kjit warm` reports for that record); the cache layer refuses only a value nested
  // deeper than options are.
  expect_options_error(edit([](auto& r) {
                         r.erase("id");
                         r["options"].erase("std");
                       }),
                       "missing field \"std\"");
  expect_options_error(edit([](auto& r) {
                         r.erase("id");
                         r["options"]["newer"] = true;
                       }),
                       "compile option \"newer\" is not one this kjit knows");
  expect_parse_error(edit([](auto& r) {
                       r.erase("id");
                       r["options"]["defines"] = {{"A", {1}}};
                     }),
                     "records[0].options: \"defines\" is not a value or an object of values");
  expect_parse_error(edit([](auto& r) { r["kernel"] = "other"; }), "its \"id\" does not match its content");
  // Without an id (hand-written) it parses.
  EXPECT_EQ(kjit::cache::parse_manifest(edit([](auto& r) { r.erase("id"); }), "m").records().size(), 1u);
  // Numbers that do not fit are errors, not silently wrapped (2^64 - 1 was read as -1, 2^32 + 64 as 64;
  // 2^64 - 1 is a value now, of unsigned 64-bit parameters).
  expect_parse_error(edit([](auto& r) {
                       r.erase("id");
                       r["args"][1]["value"] = 18446744073709551616.0;
                     }),
                     "a integer argument cannot have the value 1.8446744073709552e+19");
  EXPECT_EQ(kjit::cache::parse_manifest(edit([](auto& r) {
                                          r.erase("id");
                                          r["args"][1]["value"] = 18446744073709551615ull;
                                        }),
                                        "m")
                .records()[0]
                .describe(),
            "add_constant(T=float32, VEC=18446744073709551615) from template add_constant");
  expect_options_error(edit([](auto& r) {
                         r.erase("id");
                         r["options"]["max_registers"] = 4294967360ll;
                       }),
                       "\"max_registers\" is not an integer in [-2^31, 2^31) or null");
  expect_parse_error("{\"kjit_manifest\": 4294967297, \"records\": []}", "version 4294967297 is not supported");
}

// Reproduced by tests/fuzz/fuzz_manifest (corpus/manifest/regression_deep_*.json): the error message
// quoted the offending value with dump(), which recurses once per nesting level; 100000 levels (a 200 KB
// file) overflowed the stack of a plain -O2 build.
TEST(Manifest, ADeeplyNestedValueIsAnErrorNotAStackOverflow) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_parse_error("{\"kjit_manifest\": " + deep + "}", "version [...] is not supported");
  expect_parse_error(
      "{\"kjit_manifest\": 1, \"records\": [{\"template\": {\"name\": \"t\", \"builtin\": true, "
      "\"digest\": \"\"}, \"kernel\": \"k\", \"args\": [{\"name\": \"N\", \"kind\": \"integer\", "
      "\"value\": " +
          deep + "}], \"options\": {}}]}",
      "records[0].args[0]: a integer argument cannot have the value [...]");
  // A long scalar is quoted cut short.
  expect_parse_error("{\"kjit_manifest\": \"" + std::string(1000, 'x') + "\"}",
                     "version \"" + std::string(76, 'x') + "... is not supported");
}

TEST(Manifest, ReadingAMissingFileSaysHowToRecordOne) {
  try {
    kjit::cache::read_manifest("/nonexistent/m.json");
    FAIL();
  } catch (const kjit::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("KJIT_RECORD=/nonexistent/m.json"), std::string::npos) << e.what();
  }
}

TEST(Manifest, AppendMergesByIdAndNeverOverwritesADamagedFile) {
  TempDir dir("kjit-manifest");
  const fs::path file = dir / "sub" / "m.json";
  const ManifestRecord a = kjit::to_record(add_constant("float32", 4));
  const ManifestRecord b = kjit::to_record(add_constant("float16", 2));
  EXPECT_EQ(kjit::cache::append_to_manifest(file, {a}, 10), 1u);
  EXPECT_EQ(kjit::cache::append_to_manifest(file, {a, b}, 10), 1u);
  EXPECT_EQ(kjit::cache::append_to_manifest(file, {b}, 10), 0u);
  EXPECT_EQ(kjit::cache::read_manifest(file).records().size(), 2u);
  EXPECT_FALSE(fs::exists(file.string() + ".lock"));
  write_file(file, "garbage");
  EXPECT_THROW(kjit::cache::append_to_manifest(file, {a}, 10), kjit::ValueError);
  EXPECT_EQ(read_file(file), "garbage");
}

TEST(Manifest, RecordingThroughTheEngineWarnsInsteadOfFailing) {
  TempDir dir("kjit-manifest");
  write_file(dir / "m.json", "garbage");
  kjit::Engine engine(kjit::Settings::from_map(
      {{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_RECORD", (dir / "m.json").string()}}));
  std::vector<std::string> warnings;
  auto previous = kjit::log::set_warning_sink([&](const std::string& m) { warnings.push_back(m); });
  EXPECT_NO_THROW(engine.prepare(add_constant("float32", 1), kjit::Target::parse("sm_90")));
  EXPECT_NO_THROW(engine.prepare(add_constant("float32", 2), kjit::Target::parse("sm_90")));
  kjit::log::set_warning_sink(previous);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("KJIT_RECORD: cannot record"), std::string::npos) << warnings[0];
}

// 4 processes record 3 specializations of their own and 3 shared ones into one manifest, all at once.
TEST(Manifest, FourConcurrentProcessesLoseAndDuplicateNothing) {
  TempDir dir("kjit-manifest");
  const fs::path manifest = dir / "m.json";
  constexpr int kProcs = 4;
  run_children(kProcs, [&](int p) {
    kjit::Engine engine(
        kjit::Settings::from_map({{"KJIT_CACHE_DIR", (dir / "cache").string()}, {"KJIT_RECORD", manifest.string()}}));
    const kjit::Target sm90 = kjit::Target::parse("sm_90");
    for (int i = 0; i < 3; ++i) {
      kjit::CompileOptions own;
      own.defines = {{"PROC", std::to_string(p)}, {"I", std::to_string(i)}};
      engine.prepare(add_constant("float32", 1, own), sm90);
      engine.prepare(add_constant("float32", 1 << i), sm90);
    }
    return 0;
  });
  const Manifest m = kjit::cache::read_manifest(manifest);
  EXPECT_EQ(m.records().size(), static_cast<std::size_t>(kProcs * 3 + 3));
  std::set<std::string> ids;
  std::map<std::string, int> defines;
  for (const auto& r : m.records()) {
    ids.insert(r.id());
    const kjit::CompileOptions o = kjit::specialization_of(r, kjit::template_of(r)).options();
    if (o.defines.count("PROC")) ++defines[o.defines.at("PROC")];
  }
  EXPECT_EQ(ids.size(), m.records().size());
  for (int p = 0; p < kProcs; ++p) EXPECT_EQ(defines[std::to_string(p)], 3) << p;
  // The raw file has no duplicate either: one line per record, after the version line.
  const auto lines = json_lines(read_file(manifest));
  EXPECT_EQ(lines.size(), m.records().size() + 1);
}

// Issue 14 item 13: KJIT_RECORD rewrote the whole manifest for each new record and repeated the
// template's source in each (300 records took 202 s). Appending is O(records): each record adds one
// short line, the template's sources are written once, and nothing already written is rewritten.
TEST(Manifest, RecordingAppendsEachRecordOnceAndTheSourcesOnce) {
  TempDir dir("kjit-manifest");
  const std::string big_comment = "// " + std::string(20000, 'x') + "\n";  // a 20 KB template
  const auto t =
      kjit::Template::from_string(big_comment + "template <int N> __global__ void k(int* p) { *p = N; }", "big.cu");
  const fs::path file = dir / "m.jsonl";
  kjit::cache::ManifestWriter writer(file, 10);
  std::uintmax_t first_size = 0;
  for (int i = 0; i < 300; ++i) {
    const kjit::Specialization spec(t, "k", {{"N", TemplateArg::integer(i)}});
    ASSERT_EQ(writer.append({kjit::to_record(spec)}), 1u) << i;
    if (i == 0) first_size = fs::file_size(file);
  }
  // The first append wrote the version line, the sources (20 KB) and a record; each later one a
  // record line of a few hundred bytes (the old format grew by the whole source per record).
  EXPECT_GT(first_size, 20000u);
  const std::uintmax_t size = fs::file_size(file);
  EXPECT_LT(size - first_size, 299u * 1000u) << "bytes per record: " << (size - first_size) / 299;
  EXPECT_EQ(writer.bytes_written(), size);  // nothing was rewritten
  const std::string text = read_file(file);
  std::size_t sources_lines = 0, pos = 0;
  while ((pos = text.find("{\"sources\":", pos)) != std::string::npos) ++sources_lines, ++pos;
  EXPECT_EQ(sources_lines, 1u);
  const Manifest m = kjit::cache::read_manifest(file);
  ASSERT_EQ(m.records().size(), 300u);
  EXPECT_EQ(m.records()[299].sources->source(), t->source());
  EXPECT_EQ(kjit::specialization_of(m.records()[7], kjit::template_of(m.records()[7])).name_expression(), "k<7>");
  // A second writer (another process) appends after reading the file once, and adds no duplicate.
  kjit::cache::ManifestWriter other(file, 10);
  const kjit::Specialization again(t, "k", {{"N", TemplateArg::integer(3)}});
  const kjit::Specialization fresh(t, "k", {{"N", TemplateArg::integer(1000)}});
  EXPECT_EQ(other.append({kjit::to_record(again), kjit::to_record(fresh)}), 1u);
  EXPECT_LT(other.bytes_written(), 1000u);  // one record line: the sources are in the file already
  // The first writer reads only what the other appended, and knows the record is there.
  EXPECT_EQ(writer.append({kjit::to_record(fresh)}), 0u);
  EXPECT_EQ(kjit::cache::read_manifest(file).records().size(), 301u);
}

// A writer killed mid-append leaves a torn last line: readers ignore it (the records before stand),
// and the next writer cuts it off before appending.
TEST(Manifest, ATornLastLineLosesNothingBeforeIt) {
  TempDir dir("kjit-manifest");
  const fs::path file = dir / "m.jsonl";
  EXPECT_EQ(kjit::cache::append_to_manifest(
                file, {kjit::to_record(add_constant("float32", 1)), kjit::to_record(add_constant("float32", 2))}, 10),
            2u);
  const std::string whole = read_file(file);
  const std::string third = kjit::cache::manifest_to_json([] {
    Manifest m;
    m.add(kjit::to_record(add_constant("float32", 4)));
    return m;
  }());
  const std::string third_line = third.substr(third.find('\n') + 1);
  write_file(file, whole + third_line.substr(0, third_line.size() / 2));  // torn mid-line
  EXPECT_EQ(kjit::cache::read_manifest(file).records().size(), 2u);
  EXPECT_EQ(kjit::cache::append_to_manifest(file, {kjit::to_record(add_constant("float32", 4))}, 10), 1u);
  EXPECT_EQ(read_file(file), whole + third_line);
  EXPECT_EQ(kjit::cache::read_manifest(file).records().size(), 3u);
  // A torn first line (killed during its first write) is cut off too.
  write_file(file, "{\"kjit_man");
  EXPECT_EQ(kjit::cache::append_to_manifest(file, {kjit::to_record(add_constant("float32", 4))}, 10), 1u);
  EXPECT_EQ(read_file(file), third);
  // A bad line that is not the last is an error naming it, and the file is left as it is.
  write_file(file, whole + "{\"record\": 3}\n" + third_line);
  try {
    kjit::cache::read_manifest(file);
    FAIL();
  } catch (const kjit::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("line 4, records[2]: is not an object"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kjit::cache::append_to_manifest(file, {kjit::to_record(add_constant("float32", 8))}, 10),
               kjit::ValueError);
  EXPECT_EQ(read_file(file), whole + "{\"record\": 3}\n" + third_line);
}

// A version 1 file (one JSON object) is still read, and converted once when a writer appends to it.
TEST(Manifest, AVersion1FileIsReadAndConvertedOnAppend) {
  TempDir dir("kjit-manifest");
  TempDir tdir("kjit-manifest-t");
  const fs::path file = dir / "m.json";
  const ManifestRecord user = kjit::to_record(user_spec(user_template(tdir)));
  Manifest one;
  one.add(user);
  nlohmann::json rec = json_lines(kjit::cache::manifest_to_json(one)).at(2)["record"];
  rec["template"].erase("sources");
  rec["template"]["source"] = user.sources->source();
  rec["template"]["headers"] = user.sources->headers();
  // Version 1 ids hashed the record with its sources inline (the file is then checked as written by
  // a kjit of version 1), yet once read the record has the id that recording it afresh gives.
  rec.erase("id");
  rec["id"] = kjit::cache::to_hex(kjit::cache::Sha256::of(rec.dump()));
  ASSERT_NE(rec["id"], user.id());
  const nlohmann::json v1 = {{"kjit_manifest", 1}, {"records", nlohmann::json::array({rec})}};
  write_file(file, v1.dump(1));
  const Manifest read = kjit::cache::read_manifest(file);
  ASSERT_EQ(read.records().size(), 1u);
  EXPECT_EQ(read.records()[0].id(), user.id());
  EXPECT_EQ(kjit::cache::append_to_manifest(file, {user, kjit::to_record(add_constant("float32", 4))}, 10), 1u);
  const std::string text = read_file(file);
  EXPECT_EQ(text.rfind("{\"kjit_manifest\":2}\n", 0), 0u) << text.substr(0, 80);
  const Manifest after = kjit::cache::read_manifest(file);
  ASSERT_EQ(after.records().size(), 2u);
  EXPECT_EQ(after.records()[0].sources->source(), kUserSource);
}

// A template's sources are held once however many records name them: reading a version 2 file shares
// the one "sources" line among its records (a 25 MB file of 100000 records naming 10 MB of sources
// once held and hashed 1 TB), and a writer keeps record ids, not records with their sources.
std::string big_source() { return "// " + std::string(1 << 20, 'x') + "\n__global__ void k() {}\n"; }

nlohmann::json big_record_line(const std::string& sources_id, int n) {
  return {{"record",
           {{"template", {{"name", "big.cu"}, {"builtin", false}, {"digest", "d"}, {"sources", sources_id}}},
            {"kernel", "k"},
            {"args", {{{"name", "N"}, {"kind", "integer"}, {"value", n}}}},
            {"options", kjit::testing::default_options_json()}}}};
}

TEST(Manifest, ReadingSharesOneCopyOfTheSourcesAmongItsRecords) {
  const auto sources = std::make_shared<const kjit::cache::ManifestSources>(
      big_source(), std::map<std::string, std::string>{{"h.cuh", "#define H 1\n"}});
  std::string text = "{\"kjit_manifest\":2}\n";
  text += nlohmann::json{{"sources",
                          {{"id", sources->id()}, {"source", sources->source()}, {"headers", sources->headers()}}}}
              .dump() +
          "\n";
  const int n = 2000;
  for (int i = 0; i < n; ++i) text += big_record_line(sources->id(), i).dump() + "\n";
  const Manifest m = kjit::cache::parse_manifest(text, "big");
  ASSERT_EQ(m.records().size(), static_cast<std::size_t>(n));
  const auto& first = m.records()[0].sources;
  ASSERT_TRUE(first);
  EXPECT_EQ(first->id(), sources->id());
  EXPECT_EQ(first->source(), sources->source());
  for (const auto& r : m.records()) ASSERT_EQ(r.sources.get(), first.get());  // one copy, shared
  EXPECT_EQ(first.use_count(), n);
  // A record's id covers its sources by their id: the same whichever copy of the text it holds.
  ManifestRecord again = m.records()[7];
  again.sources = sources;
  EXPECT_EQ(again.id(), m.records()[7].id());
}

std::size_t heap_in_use() {
  const struct mallinfo2 mi = ::mallinfo2();
  return mi.uordblks + mi.hblkhd;  // small blocks and mmapped ones
}

TEST(Manifest, AWriterKeepsRecordIdsNotCopiesOfTheSources) {
  TempDir dir("kjit-manifest");
  const auto sources =
      std::make_shared<const kjit::cache::ManifestSources>(big_source(), std::map<std::string, std::string>{});
  std::vector<ManifestRecord> records;
  for (int i = 0; i < 300; ++i) {
    ManifestRecord r;
    r.template_name = "big.cu";
    r.template_digest = "d";
    r.sources = sources;
    r.kernel = "k";
    ManifestArg a;
    a.name = "N";
    a.integer = i;
    r.args = {a};
    records.push_back(std::move(r));
  }
  kjit::cache::ManifestWriter writer(dir / "m.jsonl", 10);
  const std::size_t before = heap_in_use();
  EXPECT_EQ(writer.append(records), records.size());
  const std::size_t held = heap_in_use() - std::min(before, heap_in_use());
  // One copy of the 1 MB sources (the line it read back) at most, not 300 (300 MB).
  EXPECT_LT(held, std::size_t(8) << 20) << held << " bytes held by the writer after appending";
  EXPECT_EQ(sources.use_count(), 1 + static_cast<long>(records.size()));  // the writer keeps no record
  const Manifest back = kjit::cache::read_manifest(dir / "m.jsonl");
  ASSERT_EQ(back.records().size(), records.size());
  EXPECT_EQ(back.records()[299].id(), records[299].id());
  EXPECT_EQ(back.records()[299].sources->source(), sources->source());
}

}  // namespace
