// Warnings, and structured events (compiles, disk loads, cache stores and evictions, degradations).
//
// Warnings go to a sink (stderr by default; the Python package routes them to the `warnings` module).
// `warn_once` reports a given topic once per process. Every warning is also an Event (level Warning).
//
// Events go to an event sink when one is installed (the Python package forwards them to
// logging.getLogger("kjit")); without one, an event is a "kjit: <message>" line on stderr when
// KJIT_VERBOSE is at least its verbosity (Info and Warning: 1, Debug: 2), as before events existed.
//
// This is the base library (kjit_base), below both the cache and the engine: it knows nothing of the
// settings. The engine installs the verbosity source (KJIT_VERBOSE, engine/src/settings.cpp); without one
// (a program that links only the cache) verbose lines are off.
//
// Rules for emitters: only the cold paths emit (a memory hit never does), and never while holding a lock
// that a thread of the embedding program may wait on with its own lock held: a sink may block (the Python
// one takes the GIL). A scope that must hold such a lock (a per-key file lock around a compile and
// store) wraps it in `Deferred`: its warnings and events are delivered when the outermost Deferred of the
// thread ends.
#pragma once

#include <functional>
#include <string>

namespace kjit::log {

// The values of Python's logging levels, so that a sink passes them through.
enum class Level : int { Debug = 10, Info = 20, Warning = 30 };

struct Event {
  Level level = Level::Info;
  // What happened, one word: "compile", "disk_load", "cache_store", "cache_evict", "strict_miss",
  // "degraded", "warning", "info".
  std::string kind;
  std::string message;  // the human line (what KJIT_VERBOSE prints after "kjit: ")
  // Data of the event, empty (ms < 0) where it does not apply.
  std::string key;            // cache key, hex
  std::string template_name;  // the template's name
  std::string kernel;         // the NVRTC name expression, e.g. "add_constant<float, 4>"
  std::string target;         // e.g. "sm_90", "compute_90"
  std::string origin;         // "compiled" | "disk" | "memory"
  double ms = -1;
  // Also reported to the warning sink (warn()): a log handler that shows warnings already shown by the
  // warning sink (warnings.warn in Python) may skip it.
  bool warned = false;
};

using Sink = std::function<void(const std::string& message)>;
using EventSink = std::function<void(const Event& event)>;

// Replaces the warning sink; returns the previous one. An empty sink restores stderr.
Sink set_warning_sink(Sink sink);
// Replaces the event sink; returns the previous one. An empty sink restores the KJIT_VERBOSE lines.
EventSink set_event_sink(EventSink sink);

// To the warning sink, and as an Event (kind "warning" unless `e` says otherwise) to the event sink.
void warn(const std::string& message);
void warn(Event e);
// Reports `message` the first time `topic` is seen in this process; returns whether it did.
bool warn_once(const std::string& topic, const std::string& message);
bool warn_once(const std::string& topic, Event e);

// Where print_verbose reads the verbosity (0, 1 or 2) when it needs it; may throw (taken as 0).
// Returns the previous source; nullptr: verbose lines are off.
using VerbositySource = int (*)();
VerbositySource set_verbosity_source(VerbositySource source);

// An event for the event sink (or the KJIT_VERBOSE line without one).
void emit(Event e);
// What `emit` does without an event sink: "kjit: <message>" on stderr when KJIT_VERBOSE allows it.
void print_verbose(const Event& e);

// Verbose log lines: an Event of kind "info" (level 1: Info, 2: Debug).
void info(int level, const std::string& message);

// While one is alive on a thread, that thread's warnings and events wait; the outermost one delivers them, in order,
// when it ends (after the lock it was made for is released: declare it before the lock).
class Deferred {
 public:
  Deferred();
  ~Deferred();
  Deferred(const Deferred&) = delete;
  Deferred& operator=(const Deferred&) = delete;

 private:
  bool outermost_;
};

}  // namespace kjit::log
