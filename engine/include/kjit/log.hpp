// Warnings and verbose logging. Warnings go to a sink (stderr by default; the Python package routes
// them to the `warnings` module). `warn_once` reports a given topic once per process.
#pragma once

#include <functional>
#include <string>

namespace kjit::log {

using Sink = std::function<void(const std::string& message)>;

// Replaces the warning sink; returns the previous one. An empty sink restores stderr.
Sink set_warning_sink(Sink sink);

void warn(const std::string& message);
// Reports `message` the first time `topic` is seen in this process; returns whether it did.
bool warn_once(const std::string& topic, const std::string& message);

// Verbose log lines (KJIT_VERBOSE >= level) to stderr, prefixed "kjit: ".
void info(int level, const std::string& message);

}  // namespace kjit::log
