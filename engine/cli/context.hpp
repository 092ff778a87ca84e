// Context: what every command of one run() shares: the output streams, the global options and the
// Engine built from them (settings read from the environment at first use, then the overrides).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "kjit/engine.hpp"
#include "kjit/settings.hpp"

namespace kjit::cli {

class Context {
 public:
  Context(std::ostream& out, std::ostream& err) : out(out), err(err) {}

  std::ostream& out;
  std::ostream& err;

  // Global options (set while parsing).
  std::string cache_dir;  // --cache-dir: overrides KJIT_CACHE_DIR

  // The environment's settings (read now, not the process-wide copy, so that a long-lived Python
  // process sees its current environment) with the global options applied.
  // Throws ValueError for a bad KJIT_* value.
  const Settings& settings();
  // An Engine of this run over settings(): its own disk cache, never Engine::global().
  Engine& engine();
  cache::DiskCache& disk() { return engine().disk(); }
  // Commands that write the cache (prune, clear, warm) do so only in readwrite mode: throws Error
  // naming the mode and what to do otherwise.
  void require_readwrite(const char* command);

 private:
  std::optional<Settings> settings_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace kjit::cli
