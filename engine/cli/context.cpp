#include "context.hpp"

#include "kjit/error.hpp"
#include "kjit/template.hpp"

namespace kjit::cli {

const Settings& Context::settings() {
  if (!settings_) {
    Settings s = Settings::from_environment();
    if (!cache_dir.empty()) {
      std::error_code ec;
      std::filesystem::path dir = std::filesystem::absolute(cache_dir, ec);
      s.cache_dir = ec ? std::filesystem::path(cache_dir) : dir;
      s.cache_dir_source = "--cache-dir";
    }
    settings_ = std::move(s);
    // Templates this command loads use the header index of the cache it works on.
    use_header_index(header_index_for(*settings_));
  }
  return *settings_;
}

Engine& Context::engine() {
  if (!engine_) engine_ = std::make_unique<Engine>(settings());
  return *engine_;
}

void Context::require_readwrite(const char* command) {
  const CacheMode mode = settings().cache_mode;
  if (mode != CacheMode::ReadWrite)
    throw Error(std::string(command) + " changes nothing in cache mode " + to_string(mode) +
                " (KJIT_CACHE_MODE=" + to_string(mode) + "); unset KJIT_CACHE_MODE or set it to readwrite to " +
                command + " " + settings().cache_dir.string());
}

}  // namespace kjit::cli
