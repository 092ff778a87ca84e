// Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/) with kjit's own writers
// (encode_entry, metadata_to_json, manifest_to_json): a few valid inputs and a few near-valid ones
// (one field or byte wrong). Rerun after a format change and commit the result:
//   cmake --build build-fuzz --target fuzz_make_seeds
//   build-fuzz/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus
// corpus/*/regression_* are inputs that once crashed a parser: kept by hand, never regenerated.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>

#include "kjit/cache/entry.hpp"
#include "kjit/cache/manifest.hpp"
#include "kjit/cache/sha256.hpp"

namespace {

namespace fs = std::filesystem;
using namespace kjit::cache;

// `text` with the first `from` replaced by `to` (throws when `from` is not there: the seed would not be
// the mutation its name says).
std::string with(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  if (at == std::string::npos) throw std::runtime_error("make_seeds: no \"" + from + "\" to replace");
  return text.replace(at, from.size(), to);
}

void write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

Entry entry(const std::string& target, const std::string& requested, OutputKind output, std::string payload) {
  Entry e;
  e.key = CacheKey(Sha256::of("kjit-seed:" + target + requested + payload));
  e.meta.template_name = "add_constant";
  e.meta.template_digest = to_hex(Sha256::of("template"));
  e.meta.kernel = "add_constant";
  e.meta.name_expression = "add_constant<float, 4>";
  e.meta.lowered_name = "_Z12add_constantIfLi4EEvPT_S1_l";
  e.meta.options = {"-std=c++20", "--gpu-architecture=" + target, "-DA=1"};
  e.meta.target = target;
  e.meta.requested_target = requested;
  e.meta.nvrtc_version = "13.0 build 13.0.88";
  e.meta.output = output;
  if (output == OutputKind::Ptx) e.meta.note = "PTX fallback: the GPU is newer than NVRTC";
  e.meta.compile_ms = 12.5;
  e.meta.created = "2025-01-01T00:00:00Z";
  e.meta.kjit_version = "0.1.0";
  e.payload = std::move(payload);
  return e;
}

void put_le(std::string& s, std::size_t at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

void entry_seeds(const fs::path& dir) {
  std::string elf =
      "\x7f"
      "ELF\x02\x01\x01";
  elf.resize(64, '\0');
  const Entry cubin = entry("sm_90", "sm_90", OutputKind::Cubin, elf);
  const Entry ptx = entry("compute_90", "sm_100", OutputKind::Ptx,
                          ".version 8.0\n.target compute_90\n.address_size 64\n.visible .entry k()\n{\n ret;\n}\n");
  const std::string good = encode_entry(cubin);
  write(dir, "valid_cubin.kjit", good);
  write(dir, "valid_ptx_fallback.kjit", encode_entry(ptx));
  write(dir, "valid_empty_payload.kjit", encode_entry(entry("sm_80", "", OutputKind::Cubin, "")));

  write(dir, "truncated_header.kjit", good.substr(0, 100));
  write(dir, "truncated_payload.kjit", good.substr(0, good.size() - 10));
  write(dir, "trailing_bytes.kjit", good + "xyz");
  std::string b = good;
  b[3] = 'X';
  write(dir, "bad_magic.kjit", b);
  b = good;
  put_le(b, 8, 2, 4);
  write(dir, "version_2.kjit", b);
  b = good;
  put_le(b, 16, ~0ull, 8);  // a payload length that would overflow 152 + M + P
  write(dir, "huge_payload_length.kjit", b);
  b = good;
  b[24] = 'A';  // uppercase hex in the key field
  write(dir, "bad_key_field.kjit", b);
  b = good;
  b[b.size() - 1] ^= 1;
  write(dir, "payload_checksum_mismatch.kjit", b);

  // Checksums right, metadata wrong: what a writer bug would leave behind.
  Entry wrong_meta = cubin;
  wrong_meta.meta.output = OutputKind::Ptx;
  std::string meta = metadata_to_json(wrong_meta.meta);
  meta = with(meta, "\"ptx\"", "\"elf\"");
  std::string raw = good.substr(0, 152) + meta + cubin.payload;
  put_le(raw, 12, meta.size(), 4);
  std::memcpy(&raw[88], Sha256::of(meta).data(), 32);
  write(dir, "bad_output_kind_valid_checksums.kjit", raw);
}

void metadata_seeds(const fs::path& dir) {
  const Entry ptx = entry("compute_90", "sm_100", OutputKind::Ptx, "");
  const std::string good = metadata_to_json(ptx.meta);
  write(dir, "valid_ptx.json", good);
  write(dir, "valid_cubin.json", metadata_to_json(entry("sm_90a", "sm_90a", OutputKind::Cubin, "").meta));
  write(dir, "compile_ms_string.json", with(good, "\"compile_ms\":12.5", "\"compile_ms\":\"12.5\""));
  write(dir, "missing_kernel.json", with(good, "\"kernel\":", "\"kernal\":"));
  write(dir, "option_not_string.json", with(good, "\"options\":[", "\"options\":[1,"));
  write(dir, "not_an_object.json", "[\"template\", \"kernel\"]");
  write(dir, "truncated.json", good.substr(0, good.size() / 2));
  write(dir, "nested.json", std::string(12, '[') + std::string(12, ']'));
}

ManifestRecord builtin_record(const std::string& dtype, std::int64_t vec) {
  ManifestRecord r;
  r.template_name = "add_constant";
  r.builtin = true;
  r.template_digest = to_hex(Sha256::of("add_constant"));
  r.kernel = "add_constant";
  ManifestArg t;
  t.name = "T";
  t.kind = ManifestArg::Kind::Type;
  t.dtype = dtype;
  ManifestArg v;
  v.name = "VEC";
  v.kind = ManifestArg::Kind::Integer;
  v.integer = vec;
  r.args = {t, v};
  return r;
}

ManifestRecord user_record() {
  ManifestRecord r;
  r.template_name = "scale.cu";
  r.template_digest = to_hex(Sha256::of("scale.cu"));
  r.sources = std::make_shared<const kjit::cache::ManifestSources>(
      "#include \"scale_detail.cuh\"\ntemplate <typename T, int N, bool NEG, double F>\n"
      "__global__ void scale(T* x) { x[threadIdx.x] = (T)(SCALE_BASE * N * F * (NEG ? -1 : 1)); }\n",
      std::map<std::string, std::string>{{"scale_detail.cuh", "#define SCALE_BASE 2\n"}});
  r.kernel = "scale";
  ManifestArg t, n, neg, f;
  t.name = "T", t.kind = ManifestArg::Kind::Type, t.dtype = "float32";
  n.name = "N", n.kind = ManifestArg::Kind::Integer, n.integer = -3;
  neg.name = "NEG", neg.kind = ManifestArg::Kind::Bool, neg.boolean = true;
  f.name = "F", f.kind = ManifestArg::Kind::Float, f.floating = 0.1;
  r.args = {t, n, neg, f};
  r.options = R"({"defines":{"A":"1","B":""},"device_debug":false,"fast_math":true,"line_info":false,)"
              R"("max_registers":64,"std":"c++20"})";
  return r;
}

void manifest_seeds(const fs::path& dir) {
  Manifest m;
  m.add(builtin_record("float32", 4));
  m.add(builtin_record("bfloat16", 1));
  m.add(user_record());
  const std::string good = manifest_to_json(m);
  write(dir, "valid_three_records.json", good);
  Manifest one;
  one.add(user_record());
  write(dir, "valid_user_template.json", manifest_to_json(one));
  write(dir, "valid_empty.json", "{\"kjit_manifest\":2}\n");
  write(dir, "valid_torn_last_line.json", good + good.substr(good.find('\n') + 1, 40));
  Manifest big;
  ManifestRecord u64 = builtin_record("uint64", 0);
  u64.args[1].integer = -1;
  u64.args[1].above_int64 = true;  // 2^64 - 1
  big.add(u64);
  write(dir, "valid_unsigned_64.json", manifest_to_json(big));
  // Version 1 (one JSON object, still read).
  write(dir, "v1_empty.json", "{\"kjit_manifest\": 1, \"records\": []}\n");
  // Hand-written: no ids, a float as a JSON number, max_registers null.
  write(dir, "valid_hand_written.json",
        "{\"kjit_manifest\": 1, \"records\": [{\"template\": {\"name\": \"softmax\", \"builtin\": true, "
        "\"digest\": \"\"}, \"kernel\": \"softmax\", \"args\": [{\"name\": \"T\", \"kind\": \"type\", "
        "\"value\": \"float16\"}, {\"name\": \"EPS\", \"kind\": \"float\", \"value\": 1e-5}], "
        "\"options\": {\"std\": \"c++17\", \"fast_math\": false, \"line_info\": true, "
        "\"device_debug\": false, \"max_registers\": null, \"defines\": {}}}]}\n");
  write(dir, "version_2.json", "{\"kjit_manifest\": 2, \"records\": []}\n");  // a version 1 shape

  write(dir, "id_mismatch.json", with(good, "\"kernel\":\"scale\"", "\"kernel\":\"scalf\""));
  write(dir, "version_3.json", with(good, "{\"kjit_manifest\":2}", "{\"kjit_manifest\":3}"));
  write(dir, "bad_hex_float.json", with(good, "\"value\":\"0x1.999999999999ap-4\"", "\"value\":\"0x1.9zzp-4\""));
  write(dir, "sources_edited.json", with(good, "SCALE_BASE 2", "SCALE_BASE 3"));
  const std::size_t sources_at = good.find("{\"sources\"");
  write(dir, "sources_missing.json", good.substr(0, sources_at) + good.substr(good.find('\n', sources_at) + 1));
  write(dir, "truncated.json", good.substr(0, good.size() / 2));
  write(dir, "records_not_array.json", "{\"kjit_manifest\": 1, \"records\": {}}");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_seeds CORPUS_DIR   (writes CORPUS_DIR/{entry,metadata,manifest}/)\n";
    return 2;
  }
  const fs::path root = argv[1];
  entry_seeds(root / "entry");
  metadata_seeds(root / "metadata");
  manifest_seeds(root / "manifest");
  return 0;
}
