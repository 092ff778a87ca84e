// Capturing what kjit::log writes, for the tests that check it.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kjit/log.hpp"

namespace kjit::testing {

// Keeps every `T` that a kjit::log sink installed by `Set` (log::set_warning_sink, log::set_event_sink)
// receives, for the scope of the object; the previous sink is back after it.
template <typename T, std::function<void(const T&)> (*Set)(std::function<void(const T&)>)>
class SinkCapture {
 public:
  SinkCapture() {
    old_ = Set([this](const T& x) {
      std::lock_guard<std::mutex> lock(mu_);
      kept_.push_back(x);
    });
  }
  ~SinkCapture() { Set(std::move(old_)); }
  SinkCapture(const SinkCapture&) = delete;
  SinkCapture& operator=(const SinkCapture&) = delete;

  std::vector<T> kept() const {
    std::lock_guard<std::mutex> lock(mu_);
    return kept_;
  }

 private:
  std::function<void(const T&)> old_;
  mutable std::mutex mu_;
  std::vector<T> kept_;
};

// The structured events (log::Event) given in the scope of the object.
using EventCapture = SinkCapture<log::Event, &log::set_event_sink>;

// Collects warnings for the scope of the object (and keeps them off stderr).
class WarningCapture : public SinkCapture<std::string, &log::set_warning_sink> {
 public:
  std::vector<std::string> messages() const { return kept(); }
  std::size_t count() const { return messages().size(); }
  std::string all() const {
    std::string out;
    for (const auto& m : messages()) out += m + "\n";
    return out;
  }
};

// Whether exactly one warning was given, saying `part` (the warnings shown when not).
inline ::testing::AssertionResult one_warning_saying(const WarningCapture& warnings, const std::string& part) {
  const std::vector<std::string> all = warnings.messages();
  if (all.size() == 1 && all[0].find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << all.size() << " warnings, expected one saying '" << part << "':\n"
                                       << warnings.all();
}

}  // namespace kjit::testing
