#include "context.hpp"

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
  }
  return *settings_;
}

Engine& Context::engine() {
  if (!engine_) engine_ = std::make_unique<Engine>(settings());
  return *engine_;
}

}  // namespace kjit::cli
