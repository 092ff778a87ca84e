// Process-wide functions: the engine's counters, the cache's location and state, where the built-in
// templates and the CUDA toolkit are.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "kjit/cuda_toolkit.hpp"
#include "kjit/engine.hpp"
#include "kjit/template.hpp"
#include "objects.hpp"

namespace kjit::python {

void bind_engine(py::module_& m) {
  m.def(
      "stats",
      [] {
        const EngineStats s = Engine::global().stats();
        py::dict d;
        d["memory_hits"] = s.memory_hits;
        d["disk_hits"] = s.disk_hits;
        d["compiles"] = s.compiles;
        d["compile_ms"] = s.compile_ms;
        d["disk_load_ms"] = s.disk_load_ms;
        d["strict_misses"] = s.strict_misses;
        return d;
      },
      "Counters of this process: memory_hits, disk_hits, compiles, compile_ms, disk_load_ms, strict_misses.");
  m.def("reset_stats", [] { Engine::global().reset_stats(); }, "Sets every counter of stats() to zero.");
  m.def(
      "clear_memory",
      [] {
        clear_kernel_objects();
        Engine::global().clear_memory();
      },
      "Forgets every kernel loaded by this process (the disk cache is untouched); the next specialize() "
      "of each goes to the disk cache.");
  m.def(
      "cache_info",
      [] {
        Engine& engine = Engine::global();
        bool writable;
        std::string state;
        {
          // The cache's lock may be held by a compile on another thread that is warning (and so
          // waiting for the GIL): do not hold the GIL while taking it.
          py::gil_scoped_release nogil;
          writable = engine.disk().writable();
          state = engine.disk().describe();
        }
        const cache::DiskCacheConfig& c = engine.disk().config();
        py::dict d;
        d["dir"] = c.root.string();
        d["dir_source"] = engine.settings().cache_dir_source;
        d["mode"] = to_string(c.mode);
        d["writable"] = writable;
        std::vector<std::string> layers;
        for (const auto& l : c.layers) layers.push_back(l.string());
        d["layers"] = layers;
        d["max_bytes"] = c.max_bytes ? py::object(py::int_(*c.max_bytes)) : py::object(py::none());
        d["state"] = state;
        return d;
      },
      "The disk cache of this process: dir, dir_source, mode, writable, layers (read-only), max_bytes, state.");
  m.def("set_builtin_templates_dir", &set_builtin_templates_dir, py::arg("path"),
        "Where Template.builtin() looks (KJIT_TEMPLATES_DIR still wins).");
  m.def("builtin_templates_dir", &builtin_templates_dir);
  m.def("register_toolkit_root", &register_toolkit_root, py::arg("root"),
        "Adds a CUDA root (include/ and lib/) searched before /usr/local/cuda; False once the toolkit was "
        "discovered.");
  m.def(
      "toolkit",
      [] {
        const CudaToolkit& t = cuda_toolkit();
        py::dict d;
        std::vector<std::string> inc;
        for (const auto& p : t.include_dirs) inc.push_back(p.string());
        d["include_dirs"] = inc;
        d["headers_from"] = t.headers_from;
        d["nvrtc_library"] = t.nvrtc_library.string();
        d["nvrtc_from"] = t.nvrtc_from;
        d["nvrtc_version"] = t.nvrtc_version;
        d["nvrtc_identity"] = t.nvrtc_identity();
        d["searched"] = t.searched;
        return d;
      },
      "Where the CUDA headers and libnvrtc were found (nothing is loaded).");
}

}  // namespace kjit::python
