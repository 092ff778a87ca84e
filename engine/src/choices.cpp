#include "kjit/choices.hpp"

#include "kjit/cache/choice_store.hpp"
#include "kjit/cache_config.hpp"
#include "kjit/engine.hpp"
#include "kjit/log.hpp"
#include "recorder.hpp"

namespace kjit {

Choices::Choices(Settings settings)
    : settings_(std::move(settings)), store_(std::make_unique<cache::ChoiceStore>(choice_store_config(settings_))) {
  if (settings_.record_path) recorder_ = std::make_unique<Recorder>(*settings_.record_path, settings_.lock_timeout_s);
}

Choices::~Choices() = default;

Choices& Choices::global() {
  static Choices* choices = new Choices(Engine::global().settings());  // never destroyed: used until exit
  return *choices;
}

std::optional<std::string> Choices::find(const std::string& key) {
  cache::check_choice_key(key);
  std::optional<std::string> value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = known_.find(key);
    if (it != known_.end()) return it->second;  // recorded when first found
  }
  value = store_->load(key);  // outside mu_: warnings may reach a sink that blocks (log.hpp)
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, fresh] = known_.emplace(key, value);
    if (!fresh) return it->second;  // another thread (or a store()) got there first
  }
  if (value) {
    log::info(2, "tuned choice " + key + " = " + *value + " (from the cache)");
    if (recorder_) recorder_->record_choice(key, *value);
  }
  return value;
}

void Choices::store(const std::string& key, const std::string& value) {
  cache::check_choice(key, value);
  {
    std::lock_guard<std::mutex> lock(mu_);
    known_[key] = value;
  }
  const std::string failure = store_->save(key, value);
  if (!failure.empty())
    log::warn_once("choice-store:" + settings_.cache_dir.string(),
                   "kjit cache: cannot keep the tuned choice " + key + " = " + value + " in " +
                       settings_.cache_dir.string() + ": " + failure +
                       ". This process uses it from memory; the next one tunes again (choose a writable "
                       "KJIT_CACHE_DIR to keep choices).");
  else
    log::info(1, "tuned choice " + key + " = " + value + (store_->writable() ? " (stored)" : " (in memory)"));
  if (recorder_) recorder_->record_choice(key, value);
}

void Choices::record(const std::string& key, const std::string& value) {
  cache::check_choice(key, value);
  if (recorder_) recorder_->record_choice(key, value);
}

bool Choices::tuning_allowed() const { return settings_.tune && settings_.cache_mode != CacheMode::Strict; }

}  // namespace kjit
