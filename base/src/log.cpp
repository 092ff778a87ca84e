#include "kjit/log.hpp"

#include <cstdio>
#include <mutex>
#include <unordered_set>
#include <vector>

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
EventSink& event_sink() {
  static EventSink s;
  return s;
}
VerbositySource& verbosity_source() {
  static VerbositySource s = nullptr;
  return s;
}

// The reports of this thread held back by a Deferred (null: none alive); `warns`: also for the warning sink.
struct Held {
  Event event;
  bool warns;
};
thread_local std::vector<Held>* deferred = nullptr;

// Copies the sink under the lock and calls it outside: a sink may block or call back into kjit.
template <class S>
S current(S& slot) {
  std::lock_guard<std::mutex> lock(mu());
  return slot;
}

void deliver(const Event& e, bool warns) {
  if (warns) {
    if (Sink s = current(sink())) {
      s(e.message);
    } else {
      std::fprintf(stderr, "kjit warning: %s\n", e.message.c_str());
    }
  }
  if (EventSink s = current(event_sink())) {
    s(e);  // a warning is also a log record, with its data
  } else if (!warns) {
    print_verbose(e);
  }
}

void report(Event e, bool warns) {
  if (deferred) {
    deferred->push_back({std::move(e), warns});
    return;
  }
  deliver(e, warns);
}
}  // namespace

Sink set_warning_sink(Sink s) {
  std::lock_guard<std::mutex> lock(mu());
  Sink old = std::move(sink());
  sink() = std::move(s);
  return old;
}

EventSink set_event_sink(EventSink s) {
  std::lock_guard<std::mutex> lock(mu());
  EventSink old = std::move(event_sink());
  event_sink() = std::move(s);
  return old;
}

VerbositySource set_verbosity_source(VerbositySource source) {
  std::lock_guard<std::mutex> lock(mu());
  VerbositySource old = verbosity_source();
  verbosity_source() = source;
  return old;
}

void print_verbose(const Event& e) {
  int verbose = 0;
  if (VerbositySource source = current(verbosity_source())) {
    try {
      verbose = source();
    } catch (...) {
      verbose = 0;  // a bad KJIT_VERBOSE is raised, naming the variable, where the settings are used
    }
  }
  const int needs = e.level == Level::Debug ? 2 : 1;
  if (verbose >= needs) std::fprintf(stderr, "kjit: %s\n", e.message.c_str());
}

void emit(Event e) { report(std::move(e), false); }

void warn(Event e) {
  e.level = Level::Warning;
  e.warned = true;
  if (e.kind.empty()) e.kind = "warning";
  report(std::move(e), true);
}

void warn(const std::string& message) {
  Event e;
  e.message = message;
  warn(std::move(e));
}

bool warn_once(const std::string& topic, Event e) {
  static std::unordered_set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(mu());
    if (!seen.insert(topic).second) return false;
  }
  warn(std::move(e));
  return true;
}

bool warn_once(const std::string& topic, const std::string& message) {
  Event e;
  e.message = message;
  return warn_once(topic, std::move(e));
}

void info(int level, const std::string& message) {
  Event e;
  e.level = level >= 2 ? Level::Debug : Level::Info;
  e.kind = "info";
  e.message = message;
  emit(std::move(e));
}

Deferred::Deferred() : outermost_(deferred == nullptr) {
  if (outermost_) deferred = new std::vector<Held>();
}

Deferred::~Deferred() {
  if (!outermost_) return;
  std::vector<Held>* held = deferred;
  deferred = nullptr;
  for (const Held& h : *held) {
    try {
      deliver(h.event, h.warns);
    } catch (...) {  // a destructor must not throw; a sink that fails loses its event, not the process
    }
  }
  delete held;
}

}  // namespace kjit::log
