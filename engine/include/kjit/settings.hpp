// Settings: every KJIT_* environment variable, read once, typed and validated.
// A bad value is a ValueError naming the variable, the value and what is allowed.
// Path settings are absolute: a relative one is resolved against the current directory when the
// settings are read (start-up), so that a later chdir() does not change which folder is meant.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kjit/cache/cache_mode.hpp"
#include "kjit/cache/remote_config.hpp"

namespace kjit {

// The cache library defines the modes (the disk cache obeys them); KJIT_CACHE_MODE chooses one.
using cache::CacheMode;
using cache::to_string;

// Which compiles run in a bounded child process (compile_sandbox.hpp): templates rebuilt from a
// manifest only (they may come from anyone), or every compile.
enum class CompileIsolation { Untrusted, Always };
// KJIT_PCH: NVRTC's automatic precompiled header for in-process compiles (Compiler::compile).
enum class PchMode { Auto, On, Off };

// One documented variable of the registry (for `kjit info` and the settings table of docs/cache.md).
struct SettingInfo {
  const char* name;
  const char* allowed;
  const char* description;
};

// The registry: every variable kjit reads, in display order.
const std::vector<SettingInfo>& setting_registry();

struct Settings {
  std::filesystem::path cache_dir;                                   // KJIT_CACHE_DIR / XDG_CACHE_HOME / HOME
  std::string cache_dir_source;                                      // which variable chose cache_dir
  CacheMode cache_mode = CacheMode::ReadWrite;                       // KJIT_CACHE_MODE
  std::vector<std::filesystem::path> cache_layers;                   // KJIT_CACHE_PATH (read-only, colon-separated)
  std::optional<std::uint64_t> cache_max_bytes;                      // KJIT_CACHE_MAX_BYTES
  std::optional<std::filesystem::path> record_path;                  // KJIT_RECORD
  std::vector<std::filesystem::path> include_dirs;                   // KJIT_INCLUDE_PATH (colon-separated)
  std::optional<std::filesystem::path> cuda_home;                    // KJIT_CUDA_HOME, else CUDA_HOME, else CUDA_PATH
  std::optional<std::filesystem::path> nvrtc_library;                // KJIT_NVRTC_LIBRARY (explicit libnvrtc path)
  std::optional<std::filesystem::path> templates_dir;                // KJIT_TEMPLATES_DIR (built-in templates override)
  double lock_timeout_s = 300.0;                                     // KJIT_LOCK_TIMEOUT (seconds)
  int verbose = 0;                                                   // KJIT_VERBOSE (0, 1, 2)
  int max_specializations = 16;                                      // KJIT_MAX_SPECIALIZATIONS
  bool tune = false;                                                 // KJIT_TUNE (Choices::tuning_allowed)
  CompileIsolation compile_isolation = CompileIsolation::Untrusted;  // KJIT_COMPILE_ISOLATION
  PchMode pch = PchMode::Auto;                                       // KJIT_PCH
  double compile_timeout_s = 300.0;                                  // KJIT_COMPILE_TIMEOUT (seconds)
  std::uint64_t compile_memory_bytes = 8ull << 30;                   // KJIT_COMPILE_MEMORY
  bool preload_compiler = true;                                      // KJIT_PRELOAD_COMPILER (compiler_preload.hpp)
  std::string library_fast_compile = "off";  // KJIT_LIBRARY_FAST_COMPILE (CompileOptions::library())
  // The remote tier: KJIT_REMOTE_CACHE (its URL), KJIT_REMOTE_CACHE_SECRET or _SECRET_FILE (required with
  // it), KJIT_REMOTE_CACHE_MODE, KJIT_REMOTE_CACHE_TIMEOUT, KJIT_REMOTE_CACHE_LEASE,
  // KJIT_REMOTE_CACHE_BACKOFF; nullopt: none.
  std::optional<cache::RemoteConfig> remote_cache;

  // Reads from an explicit variable map (tests) or the process environment.
  using Lookup = std::function<std::optional<std::string>(const std::string&)>;
  static Settings from_lookup(const Lookup& lookup);
  static Settings from_environment();
  static Settings from_map(const std::map<std::string, std::string>& vars);
};

// Parses a byte count with an optional K, M or G suffix (powers of 1024), e.g. 500M or 2G.
// Throws ValueError "<what> '<text>' is not valid: ..." (also for 0 unless `allow_zero`).
std::uint64_t parse_byte_size(const std::string& text, const std::string& what, bool allow_zero = true);

// The process-wide settings, read from the environment on first use.
// Throws ValueError on a bad value (again on every call until the environment is fixed).
const Settings& settings();

}  // namespace kjit
