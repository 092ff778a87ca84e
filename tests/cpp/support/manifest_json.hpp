// Manifest records written by hand in tests (the manifest schema: cache/manifest.hpp).
#pragma once

#include <nlohmann/json.hpp>

namespace kjit::testing {

// A record's "options" object for the default compile options.
inline nlohmann::json default_options_json() {
  return {{"std", "c++20"},        {"fast_math", false},       {"line_info", false},
          {"device_debug", false}, {"max_registers", nullptr}, {"defines", nlohmann::json::object()}};
}

}  // namespace kjit::testing
