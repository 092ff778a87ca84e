// Capturing what kjit::log writes, for the tests that check it.
#pragma once

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kjit/log.hpp"

namespace kjit::testing {

// Collects warnings for the scope of the object (and keeps them off stderr).
class WarningCapture {
 public:
  WarningCapture() {
    old_ = log::set_warning_sink([this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mu_);
      messages_.push_back(m);
    });
  }
  ~WarningCapture() { log::set_warning_sink(std::move(old_)); }
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;

  std::vector<std::string> messages() const {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }
  std::size_t count() const { return messages().size(); }
  std::string all() const {
    std::string out;
    for (const auto& m : messages()) out += m + "\n";
    return out;
  }

 private:
  log::Sink old_;
  mutable std::mutex mu_;
  std::vector<std::string> messages_;
};

// Whether exactly one warning was given, saying `part` (the warnings shown when not).
inline ::testing::AssertionResult one_warning_saying(const WarningCapture& warnings, const std::string& part) {
  const std::vector<std::string> all = warnings.messages();
  if (all.size() == 1 && all[0].find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << all.size() << " warnings, expected one saying '" << part << "':\n"
                                       << warnings.all();
}

}  // namespace kjit::testing
