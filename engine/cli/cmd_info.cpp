// `kjit info [--json]`: version, NVRTC, CUDA headers, CCCL, CUTLASS, driver, GPUs, cache and every KJIT_* variable.
// The facts are gathered once into JSON; the human-readable form is printed from it.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <cstring>

#include "commands.hpp"
#include "context.hpp"
#include "format.hpp"
#include "kjit/cache/choice_store.hpp"
#include "kjit/cache/store_registry.hpp"
#include "kjit/cuda_toolkit.hpp"
#include "kjit/driver_library.hpp"
#include "kjit/error.hpp"
#include "kjit/nvrtc_library.hpp"
#include "kjit/target.hpp"

#ifndef KJIT_VERSION
#define KJIT_VERSION "0.0.0"
#endif

namespace kjit::cli {
namespace {

Json or_null(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

std::string text_or(const Json& j, const std::string& fallback) {
  return j.is_string() ? j.get<std::string>() : fallback;
}

Json nvrtc_facts(CacheMode mode) {
  const CudaToolkit& tk = cuda_toolkit();
  Json j;
  j["found"] = tk.has_nvrtc();
  j["library"] = or_null(tk.nvrtc_library.string());
  j["from"] = or_null(tk.nvrtc_from);
  j["version"] = or_null(tk.nvrtc_version);
  j["build_id"] = or_null(tk.nvrtc_build_id);
  j["identity"] = tk.nvrtc_identity();
  j["searched"] = tk.searched;
  j["loaded"] = false;
  j["not_loaded_reason"] = nullptr;
  j["runtime_version"] = nullptr;
  j["supported_archs"] = Json::array();
  if (!tk.has_nvrtc()) {
    j["not_loaded_reason"] = "not found";
  } else if (mode == CacheMode::Strict) {
    j["not_loaded_reason"] = "strict mode";  // strict mode never loads NVRTC, not even here
  } else {
    try {
      const NvrtcLibrary& lib = NvrtcLibrary::get();
      j["runtime_version"] = lib.version();
      for (int a : lib.supported_archs()) j["supported_archs"].push_back("sm_" + std::to_string(a));
      j["loaded"] = true;
    } catch (const Error& e) {
      j["not_loaded_reason"] = e.what();
    }
  }
  return j;
}

Json header_facts() {
  const CudaToolkit& tk = cuda_toolkit();
  Json j;
  j["found"] = tk.has_headers();
  j["from"] = or_null(tk.headers_from);
  j["include_dirs"] = Json::array();
  for (const auto& d : tk.include_dirs) j["include_dirs"].push_back(d.string());
  return j;
}

Json library_json(const HeaderLibrary& lib) {
  return {{"found", true}, {"include_dir", lib.include_dir.string()}, {"version", lib.version}, {"from", lib.from}};
}

Json not_found_json(const std::string& hint) {
  return {{"found", false}, {"include_dir", nullptr}, {"version", nullptr}, {"from", nullptr}, {"hint", hint}};
}

// CUB / thrust / libcu++: from the CUDA toolkit's include dirs (docs/header-libraries.md).
Json cccl_facts() {
  const CudaToolkit& tk = cuda_toolkit();
  if (!tk.cccl.found())
    return not_found_json(
        "install a CUDA toolkit with CCCL (CUDA 13: <root>/include/cccl), or pip install "
        "nvidia-cuda-cccl (CUDA 13) / nvidia-cuda-cccl-cu12 (CUDA 12) and use kjit from Python");
  Json j = library_json(tk.cccl);
  j["hint"] = nullptr;
  return j;
}

// CUTLASS / CuTe: a KJIT_INCLUDE_PATH folder holding it is searched first (the header resolver searches the
// user's folders before the toolkit's); then the registered folder (pip's nvidia-cutlass, from Python).
Json cutlass_facts(const Settings& s) {
  const CudaToolkit& tk = cuda_toolkit();
  std::vector<HeaderLibrary> found;
  for (const auto& dir : s.include_dirs)
    if (auto lib = cutlass_in(dir)) {
      lib->from = "KJIT_INCLUDE_PATH";
      found.push_back(*lib);
    }
  if (tk.cutlass.found()) found.push_back(tk.cutlass);
  if (found.empty())
    return not_found_json("pip install nvidia-cutlass, or add CUTLASS's include/ to KJIT_INCLUDE_PATH");
  Json j = library_json(found.front());
  j["hint"] = nullptr;
  j["shadowed"] = Json::array();  // found too, but searched after the one above
  for (std::size_t i = 1; i < found.size(); ++i) j["shadowed"].push_back(library_json(found[i]));
  return j;
}

Json driver_facts() {
  Json j;
  j["available"] = false;
  j["version"] = nullptr;
  j["library"] = nullptr;
  j["error"] = nullptr;
  try {
    const DriverLibrary& d = DriverLibrary::get();
    const int v = d.driver_version();
    j["available"] = true;
    j["version"] = std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
    j["library"] = d.path();
  } catch (const Error& e) {
    j["error"] = e.what();
  }
  return j;
}

Json gpu_facts() {
  Json j;
  j["devices"] = Json::array();
  j["error"] = nullptr;
  std::string why;
  if (!DriverLibrary::available(&why)) {
    j["error"] = why;
    return j;
  }
  try {
    const int n = device_count();
    for (int i = 0; i < n; ++i)
      j["devices"].push_back({{"index", i}, {"name", device_name(i)}, {"target", Target::for_device(i).str()}});
  } catch (const Error& e) {
    j["error"] = e.what();
  }
  return j;
}

Json cache_facts(Context& ctx) {
  const Settings& s = ctx.settings();
  cache::DiskCache& disk = ctx.disk();
  Json j;
  j["dir"] = s.cache_dir.string();
  j["dir_source"] = s.cache_dir_source;
  j["mode"] = to_string(s.cache_mode);
  j["state"] = disk.describe();
  j["writable"] = disk.writable();
  j["layers"] = Json::array();
  for (const auto& l : s.cache_layers) j["layers"].push_back(l.string());
  j["max_bytes"] = s.cache_max_bytes ? Json(*s.cache_max_bytes) : Json(nullptr);
  j["tuned_choices"] = cache::ChoiceStore::count(s.cache_dir);  // in the writable root, every kjit version's
  return j;
}

// The remote tier: where, in which mode, and whether it answers a PING now.
Json remote_facts(Context& ctx) {
  const Settings& s = ctx.settings();
  Json j;
  j["configured"] = s.remote_cache.has_value();
  if (!s.remote_cache) return j;
  const cache::RemoteConfig& c = *s.remote_cache;
  j["url"] = cache::display_url(c.url);
  j["mode"] = cache::to_string(c.mode);
  j["timeout_s"] = c.timeout_s;
  j["lease_s"] = c.lease_s;
  cache::Store* remote = ctx.engine().remote();
  if (!remote) {
    j["used"] = false;  // KJIT_CACHE_MODE=off: no cache at all
    return j;
  }
  j["used"] = true;
  if (c.mode == cache::RemoteMode::ReadWrite && !remote->writable())  // KJIT_CACHE_MODE=readonly / strict
    j["mode"] =
        std::string(cache::to_string(cache::RemoteMode::Read)) + ", as KJIT_CACHE_MODE=" + to_string(s.cache_mode);
  const cache::Store::Probe p = remote->probe().value_or(cache::Store::Probe{true, 0, ""});
  j["answers"] = p.answers;
  j["ms"] = p.ms;
  j["error"] = p.error;
  return j;
}

// A variable's value as `kjit info` shows it: never the deployment secret, nor a password in a URL.
Json shown_value(const std::string& name, const char* value) {
  if (!value) return nullptr;
  if (name == "KJIT_REMOTE_CACHE_SECRET") return "(set, " + std::to_string(std::strlen(value)) + " bytes, not shown)";
  if (name == "KJIT_REMOTE_CACHE") {
    try {
      cache::check_remote_url(value);
      return cache::display_url(value);
    } catch (const Error&) {
      return "(set, not a valid remote cache URL)";
    }
  }
  return value;
}

Json setting_facts() {
  Json j = Json::object();
  for (const SettingInfo& s : setting_registry()) {
    const char* v = std::getenv(s.name);
    j[s.name] = {{"value", shown_value(s.name, v)}, {"allowed", s.allowed}, {"description", s.description}};
  }
  return j;
}

Json gather(Context& ctx) {
  Json j;
  j["kjit_version"] = KJIT_VERSION;
  j["nvrtc"] = nvrtc_facts(ctx.settings().cache_mode);
  j["cuda_headers"] = header_facts();
  j["cccl"] = cccl_facts();
  j["cutlass"] = cutlass_facts(ctx.settings());
  j["driver"] = driver_facts();
  j["gpus"] = gpu_facts();
  j["cache"] = cache_facts(ctx);
  j["remote_cache"] = remote_facts(ctx);
  j["settings"] = setting_facts();
  return j;
}

std::string join(const Json& list, const char* sep = ", ") {
  std::string out;
  for (const auto& x : list) out += (out.empty() ? "" : sep) + x.get<std::string>();
  return out;
}

// "<folder>, version 3.0.1 (from <root>)", or "not found: <what to install>".
std::string library_line(const Json& lib) {
  if (!lib["found"].get<bool>()) return "not found: " + lib["hint"].get<std::string>();
  std::string line = lib["include_dir"].get<std::string>() + ", version " + lib["version"].get<std::string>() +
                     " (from " + lib["from"].get<std::string>() + ")";
  if (lib.contains("shadowed"))
    for (const auto& other : lib["shadowed"])
      line += "; also " + other["include_dir"].get<std::string>() + ", version " + other["version"].get<std::string>() +
              " (from " + other["from"].get<std::string>() + "), searched after it";
  return line;
}

void print_human(std::ostream& out, const Json& j) {
  out << "kjit " << j["kjit_version"].get<std::string>() << "\n\n";

  const Json& nv = j["nvrtc"];
  out << "NVRTC\n";
  Fields f;
  if (nv["found"].get<bool>()) {
    f.add("library", nv["library"].get<std::string>() + " (from " + text_or(nv["from"], "?") + ")");
    f.add("identity", nv["identity"].get<std::string>());
    if (nv["loaded"].get<bool>())
      f.add("loaded",
            "version " + nv["runtime_version"].get<std::string>() + ", supported archs " + join(nv["supported_archs"]));
    else
      f.add("loaded", "not loaded (" + nv["not_loaded_reason"].get<std::string>() + ")");
  } else {
    f.add("library", "not found (looked in: " + join(nv["searched"]) + ")");
  }
  const Json& h = j["cuda_headers"];
  f.add("CUDA headers", h["found"].get<bool>() ? join(h["include_dirs"]) + " (from " + text_or(h["from"], "?") + ")"
                                               : std::string("not found"));
  f.add("CCCL", library_line(j["cccl"]));
  f.add("CUTLASS", library_line(j["cutlass"]));
  f.print(out);

  out << "\nDriver and GPUs\n";
  Fields g;
  const Json& d = j["driver"];
  g.add("driver", d["available"].get<bool>()
                      ? d["version"].get<std::string>() + " (" + d["library"].get<std::string>() + ")"
                      : "none: " + d["error"].get<std::string>());
  const Json& gpus = j["gpus"];
  if (!d["available"].get<bool>())
    g.add("GPUs", "none (no driver)");
  else if (!gpus["error"].is_null())
    g.add("GPUs", "none: " + gpus["error"].get<std::string>());
  else if (gpus["devices"].empty())
    g.add("GPUs", "none");
  for (const auto& dev : gpus["devices"])
    g.add("GPU " + std::to_string(dev["index"].get<int>()),
          dev["name"].get<std::string>() + " (" + dev["target"].get<std::string>() + ")");
  g.print(out);

  const Json& c = j["cache"];
  out << "\nCache\n";
  Fields k;
  k.add("dir", c["dir"].get<std::string>() + " (from " + c["dir_source"].get<std::string>() + ")");
  k.add("mode", c["mode"].get<std::string>());
  k.add("state", c["state"].get<std::string>());
  k.add("read-only layers", c["layers"].empty() ? std::string("(none)") : join(c["layers"], ":"));
  k.add("max bytes", c["max_bytes"].is_null() ? std::string("(no limit)")
                                              : std::to_string(c["max_bytes"].get<std::uint64_t>()) + " (" +
                                                    human_bytes(c["max_bytes"].get<std::uint64_t>()) + ")");
  k.add("tuned choices", std::to_string(c["tuned_choices"].get<std::size_t>()));
  const Json& r = j["remote_cache"];
  if (!r["configured"].get<bool>()) {
    k.add("remote cache", "(none: KJIT_REMOTE_CACHE is not set)");
  } else {
    std::string line = r["url"].get<std::string>() + " (" + r["mode"].get<std::string>() + "): ";
    if (!r["used"].get<bool>())
      line += "not used (KJIT_CACHE_MODE=off)";
    else if (r["answers"].get<bool>())
      line += "answers (PING " + human_ms(r["ms"].get<double>()) + ")";
    else
      line += "does not answer: " + r["error"].get<std::string>();
    k.add("remote cache", line);
  }
  k.print(out);

  out << "\nSettings\n";
  Table t;
  for (const auto& [name, s] : j["settings"].items())
    t.add_row({name, s["value"].is_null() ? std::string("(unset)") : s["value"].get<std::string>()});
  t.print(out, "  ");
}

}  // namespace

Command add_info_command(CLI::App& app, Context& ctx) {
  CLI::App* sub = app.add_subcommand("info", "Show the kjit version, NVRTC, CUDA, driver, GPUs, cache and settings");
  auto as_json = std::make_shared<bool>(false);
  sub->add_flag("--json", *as_json, "Print JSON");
  return {sub, [&ctx, as_json]() {
            const Json facts = gather(ctx);
            if (*as_json)
              print_json(ctx.out, facts);
            else
              print_human(ctx.out, facts);
            return 0;
          }};
}

}  // namespace kjit::cli
