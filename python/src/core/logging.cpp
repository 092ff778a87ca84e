// kjit::log events -> logging.getLogger("kjit") (kjit/_logging.py makes the records). No torch here.
//
// Events come from any thread: Python threads that released the GIL for a compile, kjit's warm threads,
// C++ threads of the embedding program. The sink takes the GIL to deliver one, which is safe because
// the core emits only outside its locks (kjit/log.hpp: the cache's per-key lock defers its events) and
// the binding releases the GIL around every engine call that may wait. After the interpreter began to
// exit (atexit ran _close_log(), or it is finalizing) an event is never delivered to Python: it is the
// KJIT_VERBOSE line on stderr, as without Python.
#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <thread>

#include "bindings.hpp"
#include "kjit/log.hpp"
#include "kjit/settings.hpp"

namespace kjit::python {
namespace {

struct LogState {
  std::atomic<bool> open{false};
  std::atomic<int> delivering{0};  // sink calls in progress (counted before `open` is read)
  PyObject* handler = nullptr;     // kjit._logging._handle_event; a strong reference, never released
};

LogState& state() {
  static LogState* s = new LogState();  // never destroyed: threads may still call the sink at exit
  return *s;
}

bool interpreter_exiting() {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

py::object or_none(const std::string& s) { return s.empty() ? py::object(py::none()) : py::object(py::str(s)); }

void to_python(const log::Event& e) {
  LogState& s = state();
  s.delivering.fetch_add(1);
  struct Leave {
    ~Leave() { state().delivering.fetch_sub(1); }
  } leave;
  if (!s.open.load() || interpreter_exiting()) {
    if (!e.warned) log::print_verbose(e);  // a warning was printed by the warning sink
    return;
  }
  py::gil_scoped_acquire gil;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);  // a pending error (if any) survives the record
  try {
    py::dict data;
    data["event"] = e.kind;
    data["key"] = or_none(e.key);
    data["template"] = or_none(e.template_name);
    data["kernel"] = or_none(e.kernel);
    data["target"] = or_none(e.target);
    data["origin"] = or_none(e.origin);
    data["ms"] = e.ms < 0 ? py::object(py::none()) : py::object(py::float_(e.ms));
    data["warned"] = e.warned;
    py::handle(s.handler)(static_cast<int>(e.level), e.message, data);
  } catch (py::error_already_set& err) {
    // A failing log handler must not fail a compile: report it as logging itself does.
    err.discard_as_unraisable("kjit: delivering a log record");
  } catch (const std::exception& err) {
    std::fprintf(stderr, "kjit: could not deliver a log record (%s): %s\n", err.what(), e.message.c_str());
  }
  PyErr_Restore(type, value, tb);
}

// Stops delivering to Python (atexit): waits for deliveries in progress, without the GIL they need.
void close_log() {
  LogState& s = state();
  s.open.store(false);
  py::gil_scoped_release nogil;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s.delivering.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

void register_logging(py::module_& m) {
  m.def(
      "_set_log_handler",
      [](py::function handler) {
        LogState& s = state();
        if (s.handler) throw std::logic_error("kjit: the log handler is installed once, at import");
        s.handler = handler.release().ptr();
        s.open.store(true);
        log::set_event_sink(to_python);
      },
      py::arg("handler"),
      "Routes kjit's log events to handler(level, message, data) (kjit._logging does this at import).");
  m.def("_close_log", &close_log,
        "Stops routing log events to Python (at exit): later ones are KJIT_VERBOSE lines on stderr.");
  m.def(
      "_verbose",
      [] {
        try {
          return settings().verbose;
        } catch (const std::exception&) {
          return 0;  // a bad KJIT_VERBOSE is raised, naming the variable, at first use of the engine
        }
      },
      "KJIT_VERBOSE (0, 1 or 2) as the settings read it.");
}

}  // namespace kjit::python
