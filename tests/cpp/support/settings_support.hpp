// Test helpers around Settings.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "kjit/error.hpp"
#include "kjit/settings.hpp"

namespace kjit::testing {

// The message of the ValueError that Settings::from_map(vars) throws; a failure of the calling test (and "")
// when it accepts them.
inline std::string settings_error(const std::map<std::string, std::string>& vars) {
  try {
    Settings::from_map(vars);
  } catch (const ValueError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

}  // namespace kjit::testing
