#include "ops/runtime/plan.hpp"

#include <string>
#include <utility>

#include "core/bindings.hpp"
#include "kjit/error.hpp"

namespace kjit::ops {
namespace {

thread_local PlanScope* t_scope = nullptr;

}  // namespace

PlanScope::PlanScope(const Target& target, int sm_count, bool generic, bool candidates, bool compile)
    : target_(target),
      sm_count_(sm_count),
      generic_(generic),
      candidates_(candidates),
      compile_(compile),
      outer_(t_scope) {
  t_scope = this;
}

PlanScope::~PlanScope() { t_scope = outer_; }

PlanScope* PlanScope::current() noexcept { return t_scope; }

PlanScope& PlanScope::require() {
  if (!t_scope)
    throw Error("internal: a built-in op ran on the plan device outside a compile-only plan (kjit._C._plan_op)");
  return *t_scope;
}

void bind_plan(pybind11::module_& m) {
  namespace py = pybind11;
  m.def(
      "_plan_op",
      [m](const std::string& name, const py::tuple& args, const py::dict& kwargs, const std::string& arch, int sm_count,
          bool generic, bool candidates, bool compile) {
        const Target target = Target::parse(arch);
        if (target.kind != Target::Kind::Sm)
          throw ValueError(
              "kjit._C._plan_op: arch must be an sm_XY target (an op picks its sm_XYa kernels itself), got '" + arch +
              "'");
        if (sm_count < 1)
          throw ValueError("kjit._C._plan_op: sm_count must be 1 or more, got " + std::to_string(sm_count));
        const py::object ops = m.attr("ops");
        if (!py::hasattr(ops, name.c_str()))
          throw ValueError("kjit._C._plan_op: no built-in op '" + name + "' (kjit.ops.__all__ lists them)");
        const py::object op = ops.attr(name.c_str());
        PlanScope scope(target, sm_count, generic, candidates, compile);
        py::object result = op(*args, **kwargs);
        py::list kernels;
        for (const PlanScope::Planned& p : scope.planned()) {
          const cache::EntryMetadata& meta = p.kernel->meta;
          py::dict d;
          d["template"] = p.tmpl;
          d["kernel"] = meta.kernel;
          d["name_expression"] = meta.name_expression;
          d["target"] = meta.target;
          d["key"] = p.origin ? py::object(py::str(p.kernel->key.hex())) : py::object(py::none());
          d["origin"] = p.origin ? py::object(py::str(to_string(*p.origin))) : py::object(py::none());
          kernels.append(std::move(d));
        }
        return py::make_tuple(result, kernels);
      },
      py::arg("name"), py::arg("args"), py::arg("kwargs"), py::kw_only(), py::arg("arch"), py::arg("sm_count") = 132,
      py::arg("generic") = false, py::arg("candidates") = false, py::arg("compile") = true,
      "Tests and warm-up: calls kjit.ops.<name>(*args, **kwargs) with meta tensors as on a GPU of `arch` with "
      "`sm_count` multiprocessors (`generic`: the variants that serve every size; `candidates`: every configuration "
      "tuning would time), compiling the kernels it would launch into the cache (`compile` False: naming them only) "
      "and launching nothing. Returns the "
      "op's result (meta tensors, shaped by its CUDA function) and the kernels in order, as dicts (template, kernel, "
      "name_expression, target, key, origin).");
}

}  // namespace kjit::ops
