// kjit._C: the pybind11 + libtorch binding of the kjit core. Each area registers itself; the built-in
// ops (python/src/ops/) register with torch.library when the module loads.
#include "bindings.hpp"
#include "ops/ops.hpp"
#include "kjit/settings.hpp"

#ifndef KJIT_VERSION
#define KJIT_VERSION "0.0.0"
#endif

PYBIND11_MODULE(_C, m) {
  using namespace kjit::python;
  m.doc() = "kjit core binding (use the kjit package, not this module)";
  m.attr("__version__") = KJIT_VERSION;
  bind_errors(m);
  bind_template(m);
  bind_kernel(m);
  bind_engine(m);
  bind_cli(m);
  bind_elementwise(m);
  register_logging(m);
  register_profiler(m);
  bind_arrays(m);
  kjit::ops::bind_direct_ops(m);
  // The settings, relative paths made absolute, are read once, at import: a later os.chdir() does not
  // move the cache. A bad value is raised at first use instead, naming the variable.
  try {
    (void)kjit::settings();
  } catch (const std::exception&) {
  }
}
