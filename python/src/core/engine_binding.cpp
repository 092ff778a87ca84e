// Process-wide functions: the engine's counters, the cache's location and state, where the built-in
// templates and the CUDA toolkit are.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstdint>
#include <string_view>

#include "kjit/compiler_preload.hpp"
#include "kjit/cuda_toolkit.hpp"
#include "kjit/engine.hpp"
#include "kjit/shape_policy.hpp"
#include "kjit/template.hpp"
#include "objects.hpp"
#include "torch_hooks.hpp"

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
        d["remote_hits"] = s.remote_hits;
        py::dict phases;
        for (std::size_t i = 0; i < kPhaseCount; ++i) phases[phase_name(static_cast<Phase>(i))] = s.phase_ms[i];
        d["phase_ms"] = std::move(phases);
        py::dict headers;
        headers["read"] = s.headers.read;
        headers["from_index"] = s.headers.from_index;
        d["headers"] = std::move(headers);
        py::dict kernels;
        for (const auto& [name, k] : Engine::global().kernel_stats()) {
          py::dict e;
          e["compiles"] = k.compiles;
          e["compile_ms"] = k.compile_ms;
          e["disk_loads"] = k.disk_loads;
          e["load_ms"] = k.load_ms;
          kernels[py::str(name)] = std::move(e);
        }
        d["kernels"] = std::move(kernels);
        if (const TorchHooks* h = torch_hooks()) h->extend_stats(d.ptr());  // op_calls (kjit.ops, torch)
        const ShapePolicy& policy = Engine::global().shape_policy();
        py::list specializations;
        for (const ShapePolicyEntry& e : policy.report()) {
          py::dict p;
          p["kernel"] = e.kernel;
          p["param"] = e.param;
          p["specialized_values"] = e.specialized_values;
          p["generic_values"] = e.generic_values;
          p["saturated"] = e.saturated;
          specializations.append(std::move(p));
        }
        d["specializations"] = std::move(specializations);
        d["max_specializations"] = policy.max_values();
        return d;
      },
      "Counters of this process: memory_hits, disk_hits, remote_hits, compiles, compile_ms, disk_load_ms, "
      "strict_misses; "
      "phase_ms: {template, key, store, compile, module_load}: milliseconds spent reading and hashing templates, "
      "computing cache keys, looking entries up in the stores, in NVRTC and loading modules (where cold starts go); "
      "headers: {read, from_index}: header files that template loads read and hashed, and those the header index "
      "(in the cache root) vouched for without reading them; "
      "kernels: per name expression {compiles, compile_ms, disk_loads, load_ms} (at most 1024 entries, the last "
      "one '(other kernels)' summing the rest); "
      "op_calls (with torch): {direct, dispatched}: calls of kjit.ops.* that ran the CUDA function directly, and "
      "those that went through the dispatcher (autograd, fake tensors, subclasses, modes); "
      "specializations: per (kernel, shape parameter) {kernel, param, specialized_values, generic_values, "
      "saturated}; max_specializations (KJIT_MAX_SPECIALIZATIONS).");
  m.def(
      "reset_stats",
      [] {
        Engine::global().reset_stats();
        if (const TorchHooks* h = torch_hooks()) h->reset_stats();
      },
      "Sets every counter of stats() to zero (the specialization policy is state and is kept).");
  m.def(
      "admit_shape",
      [](std::string_view kernel, std::string_view param, std::int64_t value) {
        return Engine::global().shape_policy().admit(kernel, param, value);
      },
      py::arg("kernel"), py::arg("param"), py::arg("value"),
      "The value to specialize shape parameter `param` of `kernel` on: `value` while the kernel has seen at "
      "most KJIT_MAX_SPECIALIZATIONS distinct values of it, else 0 (its generic variant, the size as a "
      "runtime argument; a warning says so once). 0 in gives 0 and counts nothing.");
  m.def(
      "pin_generic_shape",
      [](std::string_view kernel, std::string_view param, std::int64_t value, bool pinned) {
        Engine::global().shape_policy().pin_generic(kernel, param, value, pinned);
      },
      py::arg("kernel"), py::arg("param"), py::arg("value"), py::arg("pinned") = true,
      "Routes `value` of shape parameter `param` of `kernel` to its generic variant (pinned=False lifts "
      "it): for benchmarks and tests of the generic variant.");
  m.def(
      "reset_shape_policy", [] { Engine::global().shape_policy().reset(); },
      "Forgets every value admit_shape() has seen (for tests).");
  m.def(
      "_drain_background_jobs",
      [](bool drop_queued) {
        Engine* e = Engine::global_if_made();  // a process that never used kjit has nothing to wait for
        if (e && drop_queued)
          e->stop_background_jobs();
        else if (e)
          e->drain_background_jobs();
      },
      py::arg("drop_queued") = false, py::call_guard<py::gil_scoped_release>(),
      "Waits for the kernels being compiled ahead on background threads (an op's backward, compiled at its "
      "forward). With drop_queued, those not started are dropped and no more are taken: registered so with "
      "atexit, so that none is inside NVRTC while the interpreter finalizes and a long queue does not hold the "
      "exit.");
  m.def("_preload_compiler", &preload_compiler, py::arg("sm") = 0,
        "Starts the compiler preload (kjit/compiler_preload.hpp): NVRTC loaded and one tiny compile run on a "
        "background thread, so that the process's first kernel compile does not pay NVRTC's start-up. The "
        "package calls it when torch starts CUDA. False (nothing started) when KJIT_PRELOAD_COMPILER=0, with one "
        "usable CPU or bad settings; in strict mode it runs without loading NVRTC.");
  m.def("_wait_for_compiler_preload", &wait_for_compiler_preload, py::call_guard<py::gil_scoped_release>(),
        "Waits until the compiler preload (if any) has ended (registered with atexit).");
  m.def(
      "_compiler_preload",
      []() -> py::object {
        const auto r = compiler_preload_report();
        if (!r) return py::none();
        py::dict d;
        d["ms"] = r->ms;
        d["compiled"] = r->compiled;
        return d;
      },
      "What the compiler preload did once it ended: {'ms': how long it took, 'compiled': whether NVRTC was loaded "
      "and its compile ran}; None before, or when none ran.");
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
        std::string state, problem;
        {
          // The cache's lock may be held by a compile on another thread that is warning (and so
          // waiting for the GIL): do not hold the GIL while taking it.
          py::gil_scoped_release nogil;
          writable = engine.disk().writable();
          state = engine.disk().describe();
          problem = engine.disk().problem();
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
        d["problem"] = problem.empty() ? py::object(py::none()) : py::object(py::str(problem));
        return d;
      },
      "The disk cache of this process: dir, dir_source, mode, writable, layers (read-only), max_bytes, state, "
      "problem (why dir is not used although the mode is readwrite, as the warning said; None while it is usable "
      "and outside readwrite mode).");
  m.def("set_builtin_templates_dir", &set_builtin_templates_dir, py::arg("path"),
        "Where Template.builtin() looks (KJIT_TEMPLATES_DIR still wins).");
  m.def("builtin_templates_dir", &builtin_templates_dir);
  m.def("register_toolkit_root", &register_toolkit_root, py::arg("root"),
        "Adds a CUDA root (include/ and lib/) searched before /usr/local/cuda; False once the toolkit was "
        "discovered.");
  m.def("register_cutlass_dir", &register_cutlass_dir, py::arg("include_dir"), py::arg("source") = "registered",
        "Adds CUTLASS's include/ folder (cutlass/version.h and cute/), appended last to the CUDA include dirs; "
        "`source` says who found it (kjit info shows it). False once the toolkit was discovered; ValueError when "
        "the folder does not hold CUTLASS.");
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
        auto library = [](const HeaderLibrary& lib) -> py::object {
          if (!lib.found()) return py::none();
          py::dict l;
          l["include_dir"] = lib.include_dir.string();
          l["version"] = lib.version;
          l["from"] = lib.from;
          return std::move(l);
        };
        d["cccl"] = library(t.cccl);
        d["cutlass"] = library(t.cutlass);
        return d;
      },
      "Where the CUDA headers, libnvrtc, CCCL and CUTLASS were found (nothing is loaded); cccl / cutlass are None "
      "or {include_dir, version, from}.");
}

}  // namespace kjit::python
