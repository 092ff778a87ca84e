#include "kjit/log.hpp"

#include <cstdio>
#include <mutex>
#include <unordered_set>

#include "kjit/settings.hpp"

namespace kjit::log {
namespace {
std::mutex& mu() {
  static std::mutex m;
  return m;
}
Sink& sink() {
  static Sink s;
  return s;
}
}  // namespace

Sink set_warning_sink(Sink s) {
  std::lock_guard<std::mutex> lock(mu());
  Sink old = std::move(sink());
  sink() = std::move(s);
  return old;
}

void warn(const std::string& message) {
  Sink s;
  {
    std::lock_guard<std::mutex> lock(mu());
    s = sink();
  }
  if (s) {
    s(message);
  } else {
    std::fprintf(stderr, "kjit warning: %s\n", message.c_str());
  }
}

bool warn_once(const std::string& topic, const std::string& message) {
  static std::unordered_set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(mu());
    if (!seen.insert(topic).second) return false;
  }
  warn(message);
  return true;
}

void info(int level, const std::string& message) {
  int verbose = 0;
  try {
    verbose = settings().verbose;
  } catch (...) {
    verbose = 0;
  }
  if (verbose >= level) std::fprintf(stderr, "kjit: %s\n", message.c_str());
}

}  // namespace kjit::log
