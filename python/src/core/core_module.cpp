// kjit._core: the torch-free binding of the kjit core (templates, kernels, the engine's counters and
// cache, the CLI, other frameworks' arrays, logging). Its code lives in libkjit_core.so with the core,
// so that kjit._C (torch) shares the one engine, settings and cache; kjit._C fills torch's hooks
// (torch_hooks.hpp) when imported.
#include "bindings.hpp"
#include "kjit/settings.hpp"

#ifndef KJIT_VERSION
#define KJIT_VERSION "0.0.0"
#endif

PYBIND11_MODULE(_core, m) {
  using namespace kjit::python;
  m.doc() = "kjit core binding, torch-free (use the kjit package, not this module)";
  m.attr("__version__") = KJIT_VERSION;
  bind_errors(m);
  bind_template(m);
  bind_kernel(m);
  bind_engine(m);
  bind_cli(m);
  register_logging(m);
  bind_arrays(m);
  // The settings, relative paths made absolute, are read once, at import: a later os.chdir() does not
  // move the cache. A bad value is raised at first use instead, naming the variable.
  try {
    (void)kjit::settings();
  } catch (const std::exception&) {
  }
}
