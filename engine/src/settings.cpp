#include "kjit/settings.hpp"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <sstream>
#include <utility>

#include "kjit/cache/file_read.hpp"
#include "kjit/cache/store_registry.hpp"
#include "kjit/compile_options.hpp"
#include "kjit/error.hpp"
#include "kjit/log.hpp"

namespace kjit {
namespace fs = std::filesystem;

const std::vector<SettingInfo>& setting_registry() {
  static const std::vector<SettingInfo> registry = {
      {"KJIT_CACHE_DIR", "a directory path",
       "writable cache root (default $XDG_CACHE_HOME/kjit, else ~/.cache/kjit); created 0700"},
      {"KJIT_CACHE_MODE", "readwrite | readonly | strict | off",
       "readwrite: use and fill the cache; readonly: never write; strict: a miss is an error, never "
       "compile; off: no disk cache"},
      {"KJIT_CACHE_PATH", "directories separated by ':'",
       "extra read-only cache layers (a warm cache baked into an image), searched after KJIT_CACHE_DIR"},
      {"KJIT_CACHE_MAX_BYTES", "a positive integer, optional suffix K, M, G",
       "size cap of the writable cache; least recently used entries are evicted"},
      {"KJIT_RECORD", "a file path", "append every specialization used to this manifest (JSON)"},
      {"KJIT_INCLUDE_PATH", "directories separated by ':'",
       "extra directories searched for #include by every template"},
      {"KJIT_CUDA_HOME", "a directory path",
       "CUDA toolkit root for headers and libnvrtc (else CUDA_HOME, CUDA_PATH, /usr/local/cuda, pip "
       "nvidia packages)"},
      {"KJIT_NVRTC_LIBRARY", "a file path", "exact libnvrtc shared library to load"},
      {"KJIT_TEMPLATES_DIR", "a directory path", "where built-in templates are read from"},
      {"KJIT_LOCK_TIMEOUT", "seconds, a number > 0",
       "how long a process waits for another one compiling the same key (default 300); with a writable "
       "remote cache, plus the longest that one may wait for another machine's compile "
       "(KJIT_COMPILE_TIMEOUT + KJIT_REMOTE_CACHE_LEASE)"},
      {"KJIT_VERBOSE", "0 | 1 | 2", "1: log compiles and cache events to stderr; 2: also every lookup"},
      {"KJIT_MAX_SPECIALIZATIONS", "an integer >= 1",
       "distinct values of a shape parameter before a kernel falls back to its generic variant "
       "(default 16)"},
      {"KJIT_TUNE", "0 | 1",
       "1: ops that choose among kernel configurations (tuned choices) may time candidates for a key they have "
       "no stored choice for, and keep the winner in the cache (v1/choices) and in a KJIT_RECORD manifest; "
       "0 (default): they use a stored choice, else their default, and never time. Never in strict mode"},
      {"KJIT_COMPILE_ISOLATION", "untrusted | always",
       "untrusted: templates rebuilt from a manifest compile in a child process that may read no file, "
       "under the time and memory limits; always: every compile runs in a bounded child process"},
      {"KJIT_PCH", "auto | on | off",
       "NVRTC's precompiled header (in-process compiles of your templates, NVRTC 12.8+): the headers parsed "
       "once per process and header set, in a private folder NVRTC may write to and nothing else. auto "
       "(default): for templates whose headers pass 4 MB (CUB, thrust, CuTe); on: every template; off: never"},
      {"KJIT_COMPILE_TIMEOUT", "seconds, a number > 0",
       "wall-clock limit of one isolated compile (default 300); also the longest a fork() waits for the "
       "in-process compiles in flight"},
      {"KJIT_COMPILE_MEMORY", "a positive integer, optional suffix K, M, G",
       "memory one isolated compile may add (default 8G)"},
      {"KJIT_PRELOAD_COMPILER", "1 | 0",
       "1 (default): once a process starts CUDA (through torch), load NVRTC and run one tiny compile on a "
       "background thread, so that its first kernel compile does not pay NVRTC's start-up (15-35 ms); "
       "never in strict mode or with one usable CPU. 0: NVRTC is loaded by the first compile"},
      {"KJIT_LIBRARY_FAST_COMPILE", "off | min | mid | max",
       "NVRTC's --Ofast-compile level for kjit's own kernels (kjit.ops, kjit.elementwise). off (default): "
       "the fully optimized binary. The others trade kernel speed for compile time: on an H200, mid compiled "
       "the row kernels 20-30% faster and ran them 2.2-14x slower (elementwise kernels 1.5-2.5x), min up to 2.7x "
       "slower "
       "(bench/fast_compile_ab.py). Part of their cache keys: record, warm and run a deployment with one value"},
      {"KJIT_REMOTE_CACHE", "redis://[user:password@]host[:port][/db]",
       "a Redis server shared by a deployment: a cache tier after the disk (hits are copied to the disk), "
       "and one compile per key across every process that uses it"},
      {"KJIT_REMOTE_CACHE_SECRET", "at least 16 bytes",
       "the deployment secret that signs remote entries (HMAC-SHA256); required with KJIT_REMOTE_CACHE "
       "(or KJIT_REMOTE_CACHE_SECRET_FILE); one trailing newline is ignored"},
      {"KJIT_REMOTE_CACHE_SECRET_FILE", "a file path",
       "a regular file of at most 64 KiB holding the deployment secret (one trailing newline is ignored)"},
      {"KJIT_REMOTE_CACHE_MODE", "readwrite | read",
       "read: fetch from the remote tier, never write to it (production, with CI as the writer)"},
      {"KJIT_REMOTE_CACHE_TIMEOUT", "seconds, a number > 0",
       "limit of each whole request to the remote tier: connecting (with AUTH / SELECT), or a command sent "
       "and its whole reply read, however slowly it comes (default 1)"},
      {"KJIT_REMOTE_CACHE_LEASE", "seconds, a number >= 1",
       "how long one process's claim to compile a key lasts before another may take it over (default 60)"},
      {"KJIT_REMOTE_CACHE_BACKOFF", "seconds, a number > 0",
       "how long the remote tier is left alone after it fails to answer (its lookups are misses, compiles "
       "stay local); each retry that fails doubles the wait, up to 30 times this value (default 1)"},
  };
  return registry;
}

namespace {

// A deployment secret is a few dozen bytes; a larger file is not one.
constexpr std::uint64_t kMaxSecretFileBytes = 64 * 1024;

[[noreturn]] void bad_value(const char* var, const std::string& value, const char* allowed, const char* hint) {
  std::ostringstream os;
  os << var << "='" << value << "' is not valid: allowed " << allowed << ". " << hint;
  throw ValueError(os.str());
}

const char* allowed_of(const char* var) {
  for (const auto& s : setting_registry())
    if (std::string(s.name) == var) return s.allowed;
  return "?";
}

// The value of a setting that is one of a few spellings: what `value` names among `choices`; any other
// value is bad_value, with `hint`.
template <typename T>
T choice(const char* var, const std::string& value, std::initializer_list<std::pair<const char*, T>> choices,
         const char* hint) {
  for (const auto& [spelling, v] : choices)
    if (value == spelling) return v;
  bad_value(var, value, allowed_of(var), hint);
}

// A path setting as an absolute path, resolved against the current directory now: settings are read
// once, at start-up, and a relative path used later would follow every chdir() (os.chdir in Python)
// into folders nobody checked (the cache root's trust check runs once, on the path it was given).
fs::path absolute_path(const char* var, const std::string& value) {
  const fs::path p(value);
  if (p.is_absolute()) return p;
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  if (ec)
    throw ValueError(std::string(var) + "='" + value + "' is a relative path, and the current directory " +
                     "cannot be determined to resolve it (" + ec.message() + "). Give an absolute path.");
  // "./x" reads better as "<cwd>/x"; ".." is kept as written (through a symbolic link it is not the
  // lexical parent).
  bool climbs = false;
  for (const auto& part : p) climbs = climbs || part == "..";
  return climbs ? cwd / p : (cwd / p).lexically_normal();
}

std::vector<fs::path> split_paths(const char* var, const std::string& value) {
  std::vector<fs::path> out;
  std::string item;
  std::istringstream is(value);
  while (std::getline(is, item, ':'))
    if (!item.empty()) out.push_back(absolute_path(var, item));
  return out;
}

// `value` read whole as a number by `parse` (std::stol, std::stod, which say in `pos` where they stopped) and
// accepted by `ok`; any other value is bad_value, with `hint`.
template <typename Parse, typename Ok>
auto parse_number(const char* var, const std::string& value, const char* hint, Parse parse, Ok ok) {
  std::size_t pos = 0;
  decltype(parse(value, &pos)) n{};
  try {
    n = parse(value, &pos);
  } catch (const std::exception&) {
    bad_value(var, value, allowed_of(var), hint);
  }
  if (pos != value.size() || !ok(n)) bad_value(var, value, allowed_of(var), hint);
  return n;
}

long parse_int(const char* var, const std::string& value, long lo, long hi, const char* hint) {
  return parse_number(
      var, value, hint, [](const std::string& s, std::size_t* pos) { return std::stol(s, pos); },
      [&](long n) { return n >= lo && n <= hi; });
}

}  // namespace

std::uint64_t parse_byte_size(const std::string& text, const std::string& what, bool allow_zero) {
  auto bad = [&]() {
    return ValueError(what + " '" + text + "' is not valid: allowed a byte count" + (allow_zero ? "" : " > 0") +
                      " with an optional K, M or G suffix (powers of 1024), e.g. 500M or 2G");
  };
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 19) throw bad();
  const std::string suffix = text.substr(digits);
  std::uint64_t mult = 1;
  if (suffix.empty())
    mult = 1;
  else if (suffix == "K" || suffix == "k")
    mult = 1ull << 10;
  else if (suffix == "M" || suffix == "m")
    mult = 1ull << 20;
  else if (suffix == "G" || suffix == "g")
    mult = 1ull << 30;
  else
    throw bad();
  const std::uint64_t n = std::stoull(text.substr(0, digits));  // <= 19 digits: fits
  if (n > UINT64_MAX / mult || (n == 0 && !allow_zero)) throw bad();
  return n * mult;
}

// Seconds: a number > 0 (and <= 1e7).
static double parse_seconds(const char* var, const std::string& v, const char* hint) {
  return parse_number(
      var, v, hint, [](const std::string& s, std::size_t* pos) { return std::stod(s, pos); },
      [](double t) { return t > 0 && t <= 1e7; });
}

// A byte count > 0 with an optional K, M or G suffix (parse_byte_size); any other value is bad_value, with `hint`.
static std::uint64_t parse_bytes(const char* var, const std::string& v, const char* hint) {
  try {
    return parse_byte_size(v, var, false);
  } catch (const ValueError&) {
    bad_value(var, v, allowed_of(var), hint);
  }
}

// KJIT_REMOTE_CACHE and its companions; nullopt when KJIT_REMOTE_CACHE is not set.
template <typename Get>
static std::optional<cache::RemoteConfig> remote_cache_of(const Get& nonempty) {
  const auto url = nonempty("KJIT_REMOTE_CACHE");
  if (!url) return std::nullopt;
  cache::RemoteConfig c;
  c.url = *url;
  try {
    cache::check_remote_url(c.url);
  } catch (const ValueError& e) {
    throw ValueError(std::string("KJIT_REMOTE_CACHE: ") + e.what());
  }
  const auto secret = nonempty("KJIT_REMOTE_CACHE_SECRET");
  const auto secret_file = nonempty("KJIT_REMOTE_CACHE_SECRET_FILE");
  if (secret && secret_file)
    throw ValueError(
        "KJIT_REMOTE_CACHE_SECRET and KJIT_REMOTE_CACHE_SECRET_FILE are both set: set one of them "
        "(the file keeps the secret out of the environment)");
  if (secret) {
    c.secret = *secret;
  } else if (secret_file) {
    const fs::path path = absolute_path("KJIT_REMOTE_CACHE_SECRET_FILE", *secret_file);
    // Read as the cache reads its files: a FIFO (which would block the open) or a device such as /dev/zero
    // (endless) is refused, and so is a file too large to be a secret.
    cache::FileRead r = cache::read_regular_file(path, kMaxSecretFileBytes);
    if (!r.ok())
      throw ValueError("KJIT_REMOTE_CACHE_SECRET_FILE='" + path.string() + "' cannot be read (" + r.error +
                       "): allowed a regular file of at most " + std::to_string(kMaxSecretFileBytes / 1024) +
                       " KiB that this user can read; give the file that holds the deployment secret");
    c.secret = std::move(r.bytes);
  } else {
    throw ValueError("KJIT_REMOTE_CACHE is set (" + cache::display_url(c.url) +
                     ") but no deployment secret is: set KJIT_REMOTE_CACHE_SECRET (or KJIT_REMOTE_CACHE_SECRET_FILE, "
                     "a file that holds it) to the same secret of at least " +
                     std::to_string(cache::kMinRemoteSecretBytes) +
                     " bytes in every process of the deployment, e.g. the output of `openssl rand -hex 32`. "
                     "Entries in Redis are signed with it, so a shared Redis cannot hand a process code that "
                     "nobody in the deployment compiled");
  }
  // One trailing newline is not part of the secret, from the file or from the environment (a secret made
  // with `openssl rand -hex 32 > f` and passed as a variable, e.g. a Kubernetes secret made --from-file).
  if (!c.secret.empty() && c.secret.back() == '\n') c.secret.pop_back();
  if (!c.secret.empty() && c.secret.back() == '\r') c.secret.pop_back();
  if (c.secret.size() < cache::kMinRemoteSecretBytes)
    throw ValueError(std::string(secret ? "KJIT_REMOTE_CACHE_SECRET" : "KJIT_REMOTE_CACHE_SECRET_FILE") + " holds " +
                     std::to_string(c.secret.size()) + " bytes: allowed at least " +
                     std::to_string(cache::kMinRemoteSecretBytes) +
                     " bytes. Use a long random secret, e.g. the output of `openssl rand -hex 32`");
  if (auto v = nonempty("KJIT_REMOTE_CACHE_MODE"))
    c.mode = choice<cache::RemoteMode>("KJIT_REMOTE_CACHE_MODE", *v,
                                       {{"readwrite", cache::RemoteMode::ReadWrite}, {"read", cache::RemoteMode::Read}},
                                       "Unset it for the default (readwrite).");
  if (auto v = nonempty("KJIT_REMOTE_CACHE_TIMEOUT"))
    c.timeout_s = parse_seconds("KJIT_REMOTE_CACHE_TIMEOUT", *v, "Example: KJIT_REMOTE_CACHE_TIMEOUT=0.5.");
  if (auto v = nonempty("KJIT_REMOTE_CACHE_LEASE")) {
    c.lease_s = parse_seconds("KJIT_REMOTE_CACHE_LEASE", *v, "Example: KJIT_REMOTE_CACHE_LEASE=120.");
    if (c.lease_s < cache::kMinLeaseSeconds)
      bad_value("KJIT_REMOTE_CACHE_LEASE", *v, allowed_of("KJIT_REMOTE_CACHE_LEASE"),
                "A lease is renewed every third of it while its compile runs: give at least 1 second.");
  }
  if (auto v = nonempty("KJIT_REMOTE_CACHE_BACKOFF"))
    c.backoff_s = parse_seconds("KJIT_REMOTE_CACHE_BACKOFF", *v, "Example: KJIT_REMOTE_CACHE_BACKOFF=0.25.");
  return c;
}

Settings Settings::from_lookup(const Lookup& get) {
  Settings s;
  auto nonempty = [&](const char* name) -> std::optional<std::string> {
    auto v = get(name);
    if (v && v->empty()) return std::nullopt;
    return v;
  };

  if (auto v = nonempty("KJIT_CACHE_DIR")) {
    s.cache_dir = absolute_path("KJIT_CACHE_DIR", *v);
    s.cache_dir_source = "KJIT_CACHE_DIR";
  } else if (auto x = nonempty("XDG_CACHE_HOME")) {
    s.cache_dir = absolute_path("XDG_CACHE_HOME", *x) / "kjit";
    s.cache_dir_source = "XDG_CACHE_HOME";
  } else if (auto h = nonempty("HOME")) {
    s.cache_dir = absolute_path("HOME", *h) / ".cache" / "kjit";
    s.cache_dir_source = "HOME";
  } else {
    s.cache_dir = fs::temp_directory_path() / "kjit-cache";
    s.cache_dir_source = "default (no HOME)";
  }

  if (auto v = nonempty("KJIT_CACHE_MODE"))
    s.cache_mode = choice<CacheMode>("KJIT_CACHE_MODE", *v,
                                     {{"readwrite", CacheMode::ReadWrite},
                                      {"readonly", CacheMode::ReadOnly},
                                      {"strict", CacheMode::Strict},
                                      {"off", CacheMode::Off}},
                                     "Unset it for the default (readwrite).");
  if (auto v = nonempty("KJIT_CACHE_PATH")) s.cache_layers = split_paths("KJIT_CACHE_PATH", *v);
  if (auto v = nonempty("KJIT_CACHE_MAX_BYTES"))
    s.cache_max_bytes =
        parse_bytes("KJIT_CACHE_MAX_BYTES", *v, "Example: KJIT_CACHE_MAX_BYTES=2G. Unset it for no limit.");
  if (auto v = nonempty("KJIT_RECORD")) s.record_path = absolute_path("KJIT_RECORD", *v);
  if (auto v = nonempty("KJIT_INCLUDE_PATH")) s.include_dirs = split_paths("KJIT_INCLUDE_PATH", *v);
  if (auto v = nonempty("KJIT_CUDA_HOME"))
    s.cuda_home = absolute_path("KJIT_CUDA_HOME", *v);
  else if (auto c = nonempty("CUDA_HOME"))
    s.cuda_home = absolute_path("CUDA_HOME", *c);
  else if (auto p = nonempty("CUDA_PATH"))
    s.cuda_home = absolute_path("CUDA_PATH", *p);
  if (auto v = nonempty("KJIT_NVRTC_LIBRARY")) s.nvrtc_library = absolute_path("KJIT_NVRTC_LIBRARY", *v);
  if (auto v = nonempty("KJIT_TEMPLATES_DIR")) s.templates_dir = absolute_path("KJIT_TEMPLATES_DIR", *v);
  if (auto v = nonempty("KJIT_LOCK_TIMEOUT"))
    s.lock_timeout_s = parse_seconds("KJIT_LOCK_TIMEOUT", *v, "Example: KJIT_LOCK_TIMEOUT=60.");
  if (auto v = nonempty("KJIT_COMPILE_ISOLATION"))
    s.compile_isolation =
        choice<CompileIsolation>("KJIT_COMPILE_ISOLATION", *v,
                                 {{"untrusted", CompileIsolation::Untrusted}, {"always", CompileIsolation::Always}},
                                 "Unset it for the default (untrusted).");
  if (auto v = nonempty("KJIT_PCH"))
    s.pch = choice<PchMode>("KJIT_PCH", *v, {{"auto", PchMode::Auto}, {"on", PchMode::On}, {"off", PchMode::Off}},
                            "Unset it for the default (auto).");
  if (auto v = nonempty("KJIT_COMPILE_TIMEOUT"))
    s.compile_timeout_s = parse_seconds("KJIT_COMPILE_TIMEOUT", *v, "Example: KJIT_COMPILE_TIMEOUT=600.");
  if (auto v = nonempty("KJIT_COMPILE_MEMORY"))
    s.compile_memory_bytes =
        parse_bytes("KJIT_COMPILE_MEMORY", *v, "Example: KJIT_COMPILE_MEMORY=16G. Unset it for the default (8G).");
  s.remote_cache = remote_cache_of(nonempty);
  if (auto v = nonempty("KJIT_PRELOAD_COMPILER"))
    s.preload_compiler =
        choice<bool>("KJIT_PRELOAD_COMPILER", *v, {{"1", true}, {"0", false}}, "Unset it for the default (1).");
  if (auto v = nonempty("KJIT_TUNE"))
    s.tune = choice<bool>("KJIT_TUNE", *v, {{"1", true}, {"0", false}}, "Unset it for the default (0: no timing).");
  if (auto v = nonempty("KJIT_LIBRARY_FAST_COMPILE")) {
    if (!CompileOptions::is_fast_compile_level(*v))
      bad_value("KJIT_LIBRARY_FAST_COMPILE", *v, allowed_of("KJIT_LIBRARY_FAST_COMPILE"),
                "Unset it for the default (off).");
    s.library_fast_compile = *v;
  }
  if (auto v = nonempty("KJIT_VERBOSE"))
    s.verbose = static_cast<int>(parse_int("KJIT_VERBOSE", *v, 0, 2, "Unset it for quiet (0)."));
  if (auto v = nonempty("KJIT_MAX_SPECIALIZATIONS"))
    s.max_specializations =
        static_cast<int>(parse_int("KJIT_MAX_SPECIALIZATIONS", *v, 1, 1 << 20, "Unset it for the default (16)."));
  return s;
}

Settings Settings::from_environment() {
  return from_lookup([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

Settings Settings::from_map(const std::map<std::string, std::string>& vars) {
  return from_lookup([&](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

const Settings& settings() {
  static std::mutex mu;
  static std::optional<Settings> cached;
  std::lock_guard<std::mutex> lock(mu);
  if (!cached) cached = Settings::from_environment();
  return *cached;
}

namespace {
// The log (kjit_base) sits below the settings and cannot read them: it asks this source for
// KJIT_VERBOSE, read lazily as before (settings() is first read when a verbose line is due, not at
// load). Installed at static initialization of this file, which every program that reads settings
// links: the engine, the CLI, the Python module.
[[maybe_unused]] const bool verbosity_source_installed = [] {
  log::set_verbosity_source([] { return settings().verbose; });
  return true;
}();
}  // namespace

}  // namespace kjit
