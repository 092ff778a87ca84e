// kjit.Template and kjit.KernelFamily. KernelFamily.specialize is the hot path: keyword arguments are
// read straight from the vectorcall (no dict), converted to TemplateArgs by the kind of the parameter
// they name, and looked up in the engine's in-memory table (the SpecKey KernelFamily::get makes); a
// memory hit returns a cached Kernel object. A miss goes to KernelFamily::get without the GIL.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <array>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "kjit/compile_option_fields.hpp"
#include "kjit/driver_library.hpp"
#include "kjit/error.hpp"
#include "kjit/specialization.hpp"
#include "device_context.hpp"
#include "foreign.hpp"
#include "objects.hpp"
#include "option_keywords.hpp"
#include "torch_hooks.hpp"

namespace kjit::python {
namespace {

namespace fs = std::filesystem;

std::string prefix(const TemplateParam& p, const KernelDecl& k) {
  return "template parameter '" + p.name + "' of kernel '" + k.name + "'";
}

// What a parameter accepts, spelled for Python.
std::string wants(const TemplateParam& p) {
  switch (p.kind) {
    case TemplateParam::Kind::Type:
      return "is a type: pass a torch.dtype, a numpy / CuPy / JAX dtype or a dtype name (e.g. torch.float32, "
             "numpy.float32, 'bfloat16')";
    case TemplateParam::Kind::Integral: return "is an integer (" + p.cpp_type + "): pass an int";
    case TemplateParam::Kind::Floating: return "is a floating constant (" + p.cpp_type + "): pass a float or an int";
    case TemplateParam::Kind::Bool: return "is a bool: pass True or False";
    case TemplateParam::Kind::Unsupported: break;
  }
  return "has a kind kjit cannot specialize (a template template parameter, a pack or '" + p.cpp_type +
         "'): give it a default or use typename / integer / floating / bool parameters";
}

[[noreturn]] void wrong_kind(const TemplateParam& p, const KernelDecl& k, PyObject* v) {
  std::string hint;
  if (p.kind == TemplateParam::Kind::Type && type_name(v) == "torch.Tensor")
    hint = " (pass the tensor's .dtype)";
  else if (p.kind == TemplateParam::Kind::Type && is_foreign_array(v))
    hint = " (pass the array's .dtype)";
  throw TypeError(prefix(p, k) + " " + wants(p) + ", got " + describe_value(v) + hint);
}

// A Python int as an integer argument: any value of [-2^63, 2^64) (unsigned 64-bit parameters take those
// from 2^63 up); the parameter's own range is checked when it is rendered.
TemplateArg to_integer(const TemplateParam& p, const KernelDecl& k, PyObject* v) {
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (overflow > 0) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if (!(u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) return TemplateArg::unsigned_integer(u);
    PyErr_Clear();
  }
  if (overflow)
    throw ValueError(prefix(p, k) + " is " + p.cpp_type + ": the value " + py::repr(py::handle(v)).cast<std::string>() +
                     " does not fit in 64 bits (allowed: [-2^63, 2^64), and the range of " + p.cpp_type + ")");
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  return TemplateArg::integer(x);
}

// A Python value as the argument of template parameter `p`.
TemplateArg to_arg(const TemplateParam& p, const KernelDecl& k, PyObject* v) {
  switch (p.kind) {
    case TemplateParam::Kind::Type: {
      if (const TorchHooks* h = torch_hooks()) {
        DType d{};
        const int r = h->dtype(v, &d);
        if (r > 0) return TemplateArg::type(d);
        if (r == 0)
          throw TypeError(prefix(p, k) + " got " + describe_value(v) +
                          ", which kjit cannot specialize on; allowed dtypes: " + dtype_names());
      }
      if (PyUnicode_Check(v)) {
        Py_ssize_t n = 0;
        const char* s = PyUnicode_AsUTF8AndSize(v, &n);
        if (!s) throw py::error_already_set();
        std::string_view name(s, static_cast<std::size_t>(n));
        if (name.substr(0, 6) == "torch.") name.remove_prefix(6);
        if (auto d = dtype_from_name(name)) return TemplateArg::type(*d);
        throw ValueError(prefix(p, k) + ": unknown dtype name '" + std::string(s, static_cast<std::size_t>(n)) +
                         "'; allowed: " + dtype_names() + " (or a torch.dtype)");
      }
      if (auto name = foreign_dtype_name(v)) {  // numpy, CuPy, JAX, TensorFlow dtypes
        if (auto d = dtype_from_name(*name)) return TemplateArg::type(*d);
        // A scalar type by its name ("numpy.complex64"), not as "a type".
        const std::string got = PyType_Check(v) ? reinterpret_cast<PyTypeObject*>(v)->tp_name : describe_value(v);
        throw TypeError(prefix(p, k) + " got " + got + " (dtype '" + *name +
                        "'), which kjit cannot specialize on; allowed dtypes: " + dtype_names());
      }
      wrong_kind(p, k, v);
    }
    case TemplateParam::Kind::Integral:
      if (PyBool_Check(v) || PyFloat_Check(v)) wrong_kind(p, k, v);
      if (PyLong_Check(v)) return to_integer(p, k, v);
      if (PyIndex_Check(v)) {  // numpy integers
        py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(v));
        if (!i) throw py::error_already_set();
        return to_integer(p, k, i.ptr());
      }
      wrong_kind(p, k, v);
    case TemplateParam::Kind::Floating:
      if (PyBool_Check(v)) wrong_kind(p, k, v);
      if (PyFloat_Check(v)) return TemplateArg::floating(PyFloat_AS_DOUBLE(v));
      if (PyLong_Check(v)) {
        const TemplateArg i = to_integer(p, k, v);
        return TemplateArg::floating(i.above_int64() ? static_cast<double>(i.uint_value())
                                                     : static_cast<double>(i.int_value()));
      }
      if (!PyUnicode_Check(v) && Py_TYPE(v)->tp_as_number && Py_TYPE(v)->tp_as_number->nb_float) {  // numpy floats
        const double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) throw py::error_already_set();
        return TemplateArg::floating(d);
      }
      wrong_kind(p, k, v);
    case TemplateParam::Kind::Bool:
      if (PyBool_Check(v)) return TemplateArg::boolean(v == Py_True);
      wrong_kind(p, k, v);
    case TemplateParam::Kind::Unsupported: break;
  }
  throw TypeError(prefix(p, k) + " " + wants(p));
}

// Template arguments in parameter order, on the stack for the usual few.
class ArgList {
 public:
  explicit ArgList(std::size_t n) : n_(n) {
    if (n > kInline) heap_.assign(n, TemplateArg::boolean(false));
  }
  TemplateArg* data() { return n_ > kInline ? heap_.data() : inline_.data(); }
  bool given(std::size_t i) const { return i < kInline ? given_[i] : heap_given_.count(i) > 0; }
  void set(std::size_t i, const TemplateArg& a) {
    data()[i] = a;
    if (i < kInline)
      given_[i] = true;
    else
      heap_given_[i] = true;
  }

 private:
  static constexpr std::size_t kInline = 16;
  template <std::size_t... I>
  static std::array<TemplateArg, kInline> filled(std::index_sequence<I...>) {
    return {{((void)I, TemplateArg::boolean(false))...}};
  }
  std::size_t n_;
  std::array<TemplateArg, kInline> inline_ = filled(std::make_index_sequence<kInline>{});
  std::array<bool, kInline> given_{};
  std::vector<TemplateArg> heap_;
  std::map<std::size_t, bool> heap_given_;
};

[[noreturn]] void no_device() {
  std::string why;
  DriverLibrary::available(&why);
  const auto stop = why.find(". ");  // the first sentence says why
  if (stop != std::string::npos) why.resize(stop);
  if (why.empty()) why = torch_hooks() ? "torch.cuda.device_count() is 0" : "the CUDA driver reports no device";
  throw ValueError("no CUDA device is available (" + why +
                   "); to compile without a GPU, pass the target architecture, e.g. specialize(arch='sm_90', ...)");
}

// A device string without torch: "cuda", "cuda:N" or another device type ("cpu", "mps:0", ...).
bool parse_device_name(const std::string& s, std::string* type, int* index) {
  const auto colon = s.find(':');
  *type = s.substr(0, colon);
  if (type->empty()) return false;
  for (char c : *type)
    if (!(c >= 'a' && c <= 'z') && c != '_') return false;
  *index = -1;
  if (colon == std::string::npos) return true;
  const std::string digits = s.substr(colon + 1);
  if (digits.empty() || digits.size() > 7) return false;
  for (char c : digits)
    if (c < '0' || c > '9') return false;
  *index = std::stoi(digits);
  return true;
}

int parse_device(PyObject* v) {
  const int count = cuda_device_count();
  int d = 0;
  if (!v || v == Py_None) {
    if (count == 0) no_device();
    return cuda_current_device();
  }
  std::string type;
  int index = -1;
  const TorchHooks* h = torch_hooks();
  if (PyLong_Check(v) && !PyBool_Check(v)) {
    const long x = PyLong_AsLong(v);
    if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
    d = x < -1 || x > 1 << 20 ? -2 : static_cast<int>(x);
  } else if ((h && h->device(v, &type, &index)) || PyUnicode_Check(v)) {
    if (type.empty()) {  // a str, without torch
      const std::string s = py::str(py::handle(v));
      if (!parse_device_name(s, &type, &index))
        throw ValueError("device '" + s +
                         "' is not a device name: pass an int, a torch.device or a str such as "
                         "'cuda:0'");
    }
    if (type != "cuda")
      throw ValueError("kernels run on CUDA devices, got the device '" + type +
                       (index >= 0 ? ":" + std::to_string(index) : std::string()) + "'");
    if (count == 0) no_device();
    d = index >= 0 ? index : cuda_current_device();
  } else {
    throw TypeError(
        "device must be None (the current device), an int, a torch.device or a str such as 'cuda:0', "
        "got " +
        describe_value(v));
  }
  if (count == 0) no_device();
  if (d < 0 || d >= count)
    throw ValueError("device " + std::to_string(d) + " is not available: there " +
                     (count == 1
                          ? std::string("is 1 CUDA device (0)")
                          : "are " + std::to_string(count) + " CUDA devices (0 to " + std::to_string(count - 1) + ")"));
  return d;
}

// Kernel objects by loaded kernel; for memory hits the same object is returned on every call.
// Guarded by the GIL (the module does not declare free-threading support).
struct KernelEntry {
  std::shared_ptr<const KernelInfo> info;
  std::vector<PyObject*> memory_objects;  // by device; owned references, kept for the process lifetime
};
std::unordered_map<const SpecializedKernel*, KernelEntry>& kernel_table() {
  static auto* t = new std::unordered_map<const SpecializedKernel*, KernelEntry>();
  return *t;
}

std::vector<std::pair<std::string, TemplateArg>> named(const KernelDecl& k, const TemplateArg* args, std::size_t n) {
  std::vector<std::pair<std::string, TemplateArg>> out;
  for (std::size_t i = 0; i < n && i < k.template_params.size(); ++i)
    if (args[i].kind() != TemplateArg::Kind::Default) out.emplace_back(k.template_params[i].name, args[i]);
  return out;
}

PyObject* kernel_object(const KernelFamily& fam, const std::shared_ptr<const SpecializedKernel>& loaded,
                        const TemplateArg* args, std::size_t n, Origin origin, int device) {
  auto& table = kernel_table();
  auto it = table.find(loaded.get());
  if (it == table.end()) {
    auto info = std::make_shared<KernelInfo>();
    info->specialized = loaded;
    info->name_expression = loaded->kernel->name();
    info->args = named(fam.decl(), args, n);
    info->layout = ParamLayout(fam.decl(), info->args, info->name_expression);
    if (loaded->kernel->param_sizes_known()) info->layout.check_sizes(loaded->kernel->param_sizes());
    it = table.emplace(loaded.get(), KernelEntry{std::move(info), {}}).first;
  }
  KernelEntry& e = it->second;  // entries are nodes: references stay valid when the table grows
  if (origin != Origin::Memory) return py::cast(PyKernel{e.info, origin, device}).release().ptr();
  const auto slot = static_cast<std::size_t>(device);
  if (slot < e.memory_objects.size() && e.memory_objects[slot]) {
    Py_INCREF(e.memory_objects[slot]);
    return e.memory_objects[slot];
  }
  // Creating the object may run Python code (a garbage collection) that comes back here: store it after.
  PyObject* obj = py::cast(PyKernel{e.info, Origin::Memory, device}).release().ptr();
  if (e.memory_objects.size() <= slot) e.memory_objects.resize(slot + 1, nullptr);
  if (e.memory_objects[slot]) {
    Py_DECREF(obj);
    obj = e.memory_objects[slot];
  } else {
    e.memory_objects[slot] = obj;
  }
  Py_INCREF(obj);
  return obj;
}

py::object compile_only(const KernelFamily& fam, const TemplateArg* args, std::size_t n, PyObject* arch) {
  if (!PyUnicode_Check(arch))
    throw TypeError("arch must be a str such as 'sm_90', 'sm_90a' or 'compute_90', got " + describe_value(arch));
  const Target target = Target::parse(py::str(py::handle(arch)));
  Specialization spec = fam.specialization(args, n);
  Origin origin = Origin::Memory;
  std::shared_ptr<const SpecializedKernel> compiled;
  {
    py::gil_scoped_release nogil;
    compiled = fam.engine().compile_only(spec, target, &origin);  // remembered by the engine
  }
  auto info = std::make_shared<KernelInfo>();
  info->specialized = std::move(compiled);
  info->arch = target.str();
  info->name_expression = spec.name_expression();
  info->args = spec.args();
  info->layout = ParamLayout(spec.kernel(), info->args, info->name_expression);
  return py::cast(PyKernel{std::move(info), origin, -1});
}

[[noreturn]] void unknown_param(const KernelFamily& fam, std::string_view name) {
  // The core's message (one wording for every front end).
  Specialization(fam.template_ptr(), fam.decl().name, {{std::string(name), TemplateArg::boolean(false)}},
                 fam.options());
  throw ValueError("unknown template parameter '" + std::string(name) + "'");
}

[[noreturn]] void missing_params(const KernelFamily& fam, ArgList& list, std::size_t n) {
  std::vector<std::pair<std::string, TemplateArg>> given;
  for (std::size_t i = 0; i < n; ++i)
    if (list.given(i)) given.emplace_back(fam.decl().template_params[i].name, list.data()[i]);
  Specialization(fam.template_ptr(), fam.decl().name, given, fam.options());
  throw ValueError("kernel '" + fam.decl().name + "' needs more template parameters: " + fam.decl().describe_params());
}

PyObject* specialize(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const PyFamily& pf = py::handle(self).cast<const PyFamily&>();
  const KernelFamily& fam = *pf.family;
  const KernelDecl& decl = fam.decl();
  if (nargs != 0)
    throw TypeError(
        "specialize() takes keyword arguments only (the template parameters by name, and device= or "
        "arch=), got " +
        std::to_string(nargs) + " positional; the parameters of '" + decl.name + "' are " + decl.describe_params());
  const std::size_t np = decl.template_params.size();
  ArgList list(np);
  std::size_t n = 0;
  PyObject* device = nullptr;
  PyObject* arch = nullptr;
  for_each_kwarg(args, nargs, kwnames, [&](std::string_view name, PyObject* value) {
    if (name == "device") {
      device = value;
      return;
    }
    if (name == "arch") {
      arch = value;
      return;
    }
    std::size_t j = 0;
    while (j < np && decl.template_params[j].name != name) ++j;
    if (j == np) unknown_param(fam, name);
    list.set(j, to_arg(decl.template_params[j], decl, value));
    if (j + 1 > n) n = j + 1;
  });
  for (std::size_t j = 0; j < n; ++j) {
    if (list.given(j)) continue;
    const TemplateParam& p = decl.template_params[j];
    if (!p.default_value) missing_params(fam, list, n);
    list.set(j, TemplateArg::defaulted());  // the core renders the default, as for every front end
  }
  if (arch && arch != Py_None) {
    if (device && device != Py_None)
      throw ValueError("specialize() takes device= (to launch) or arch= (to compile only), not both");
    return compile_only(fam, list.data(), n, arch).release().ptr();
  }
  const int dev = parse_device(device);
  // The hot path: the engine's in-memory table.
  if (auto hit = fam.find(list.data(), n, dev)) return kernel_object(fam, hit, list.data(), n, Origin::Memory, dev);
  // A miss: the disk cache or NVRTC, without the GIL (other threads run; warnings from compiles on
  // other threads can take it).
  DeviceContext ctx(dev);
  Origin origin = Origin::Memory;
  std::shared_ptr<const SpecializedKernel> loaded;
  {
    py::gil_scoped_release nogil;
    loaded = fam.get(list.data(), n, dev, &origin, ctx.compile_forbidden);
  }
  return kernel_object(fam, loaded, list.data(), n, origin, dev);
}

PyMethodDef specialize_def = {
    "specialize", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&guarded<&specialize>)),
    METH_FASTCALL | METH_KEYWORDS,
    "specialize($self, /, *, device=None, arch=None, **params)\n--\n\n"
    "The kernel specialized on `params` (template parameters by name: a torch.dtype or dtype name for\n"
    "a type, an int for an integer, a float or int for a floating constant, a bool for a bool).\n"
    "Compiles on the first use of a specialization, then finds it in the disk cache or in memory.\n\n"
    "device: int, torch.device, 'cuda:N' or None (the current device): the kernel can be launched.\n"
    "arch: 'sm_90', 'sm_90a', 'compute_90', ...: compile only (no GPU needed); such a kernel cannot\n"
    "be launched."};

// A family of Template.kernel(): its compile options come from the keywords (option_keywords.hpp).
PyFamily make_family(const PyTemplate& t, const std::string& name, const CompileOptions& o) {
  Engine& engine = Engine::global();
  auto family = std::make_shared<const KernelFamily>(engine, t.tmpl, name, o);
  return PyFamily{std::move(family)};
}

// The name of a bound class as pybind11's signatures write it: "kjit._core.Template".
template <typename T>
std::string class_name() {
  const py::type t = py::type::of<T>();
  return py::str(t.attr("__module__")).cast<std::string>() + "." + py::str(t.attr("__qualname__")).cast<std::string>();
}

py::list template_params(const KernelDecl& k) {
  py::list out;
  for (const auto& p : k.template_params)
    out.append(py::make_tuple(p.name, to_string(p.kind), p.kind == TemplateParam::Kind::Type ? "typename" : p.cpp_type,
                              p.default_value ? py::object(py::str(*p.default_value)) : py::object(py::none())));
  return out;
}

}  // namespace

void clear_kernel_objects() {
  for (auto& [loaded, entry] : kernel_table())
    for (PyObject* o : entry.memory_objects) Py_XDECREF(o);
  kernel_table().clear();
}

namespace {
// CompileOptions as the keyword arguments of Template.kernel(): the same names, the same values.
py::dict options_dict(const CompileOptions& o) {
  py::dict d;
  for (const CompileOptionField& f : compile_option_fields()) d[f.name.c_str()] = to_python(f.get(o));
  return d;
}

// The field table, for tools and tests: one dict per option.
py::list option_fields() {
  py::list out;
  for (const CompileOptionField& f : compile_option_fields()) {
    py::dict d;
    d["name"] = f.name;
    d["kind"] = to_string(f.kind);
    d["default"] = to_python(f.default_value);
    d["choices"] = f.choices;
    d["min"] = f.min;
    d["max"] = f.max;
    d["flag"] = f.flag;
    d["cli"] = f.cli;
    d["help"] = f.help;
    out.append(d);
  }
  return out;
}
}  // namespace

void bind_template(py::module_& m) {
  m.def("compile_option_fields", &option_fields,
        "The compile options, one dict each (name: the keyword of Template.kernel(); kind: bool, int, enum, string "
        "or defines; default; choices; min, max; flag: NVRTC's; cli: the `kjit compile` flag; help).");
  m.def(
      "library_compile_options", [] { return options_dict(CompileOptions::library()); },
      "The compile options kjit's own kernels use (kjit.ops, kjit.elementwise), as Template.kernel() takes them: "
      "compile a built-in kernel with kernel(name, **library_compile_options()) to get the key an op gets.");
  // Declared before Template, so that Template.kernel()'s signature names kjit.KernelFamily (stubs, help()).
  py::class_<PyFamily> family(m, "KernelFamily",
                              "One kernel of a template with fixed compile options; specialize() it to get a "
                              "kjit.Kernel.");
  py::class_<PyTemplate> tmpl(m, "Template",
                              "CUDA C++ source of kernels: from a string, a file (Template.from_file) or a built-in "
                              "template (Template.builtin). Every header it includes is resolved and hashed.");
  tmpl
      // Loading reads headers, hashes them and parses the source (a large one takes a while): without the GIL,
      // so other Python threads run meanwhile. The arguments are C++ copies by then.
      .def(py::init([](std::string source, std::optional<std::string> name, std::vector<fs::path> include_dirs) {
             py::gil_scoped_release nogil;
             return PyTemplate{Template::from_string(std::move(source), name.value_or(""), std::move(include_dirs))};
           }),
           py::arg("source"), py::arg("name") = py::none(), py::arg("include_dirs") = std::vector<fs::path>{},
           "A template from source text; `name` (e.g. 'my_kernels.cu') names it in messages and cache metadata.")
      .def_static(
          "from_file",
          [](const fs::path& path, std::vector<fs::path> include_dirs) {
            py::gil_scoped_release nogil;
            return PyTemplate{Template::from_file(path, std::move(include_dirs))};
          },
          py::arg("path"), py::arg("include_dirs") = std::vector<fs::path>{},
          "A template from a .cu / .cuh file; its includes are resolved from its folder, `include_dirs`, "
          "KJIT_INCLUDE_PATH and the CUDA headers.")
      .def_static(
          "builtin",
          [](const std::string& name) {
            py::gil_scoped_release nogil;
            return PyTemplate{Template::builtin(name)};
          },
          py::arg("name"), "A built-in template of kjit's kernel_templates/ by name ('add_constant').")
      .def_static("builtin_names", &Template::builtin_names, "Names of the built-in templates.")
      .def_property_readonly("name", [](const PyTemplate& t) { return t.tmpl->name(); })
      .def_property_readonly(
          "digest", [](const PyTemplate& t) { return t.tmpl->digest(); },
          "Hex SHA-256 of the source and every included header.")
      .def_property_readonly("source", [](const PyTemplate& t) { return t.tmpl->source(); })
      .def_property_readonly("is_builtin", [](const PyTemplate& t) { return t.tmpl->is_builtin(); })
      .def_property_readonly(
          "kernels",
          [](const PyTemplate& t) {
            std::vector<std::string> out;
            for (const auto& k : t.tmpl->kernels()) out.push_back(k.name);
            return out;
          },
          "Names of the __global__ functions, in source order.")
      .def_property_readonly(
          "headers",
          [](const PyTemplate& t) {
            std::vector<std::string> out;
            for (const auto& h : t.tmpl->headers()) out.push_back(h.include_name);
            return out;
          },
          "Include names of the resolved headers.")
      .def_property_readonly("unresolved_includes", [](const PyTemplate& t) { return t.tmpl->unresolved_includes(); });
  {
    // Template.kernel(name, *, <one keyword per compile option>): its keywords are read from **kwargs
    // (option_keywords.hpp), so the signature pybind11 would write (the first line of the docstring, which
    // help() and the stubs read) is written here, from the field table.
    const std::string signature = "(self: " + class_name<PyTemplate>() + ", name: str, *, " +
                                  option_keywords_signature() + ") -> " + class_name<PyFamily>();
    const std::string doc = "kernel" + signature +
                            "\n\nThe kernel `name` with these compile options, to specialize (kjit._core."
                            "compile_option_fields() lists them):\n" +
                            option_keywords_doc() + "\n";
    py::options no_signature;
    no_signature.disable_function_signatures();
    tmpl.def(
        "kernel",
        [signature](const PyTemplate& t, const py::args& args, const py::kwargs& kwargs) {
          auto refuse = [&] {
            // The object called (registered: the existing instance, not a copy), for the message.
            incompatible_call("kernel", signature, py::cast(&t, py::return_value_policy::reference), args, kwargs);
          };
          // `name`: the one positional argument, or the keyword.
          py::object name_arg;
          if (args.size() == 1 && !kwargs.contains("name"))
            name_arg = args[0];
          else if (args.empty() && kwargs.contains("name"))
            name_arg = kwargs["name"];
          py::detail::make_caster<std::string> name;
          if (!name_arg || !name.load(name_arg, true)) refuse();
          const std::optional<CompileOptions> options = read_option_keywords(kwargs, "name");
          if (!options) refuse();
          return make_family(t, py::detail::cast_op<std::string>(std::move(name)), *options);
        },
        doc.c_str());
  }
  tmpl.def("__repr__", [](const PyTemplate& t) {
    std::string ks;
    for (const auto& k : t.tmpl->kernels()) ks += (ks.empty() ? "" : ", ") + k.name;
    return "<kjit.Template '" + t.tmpl->name() + "' kernels=[" + ks + "] digest=" + t.tmpl->digest().substr(0, 12) +
           ">";
  });

  family.def_property_readonly("name", [](const PyFamily& f) { return f.family->decl().name; })
      .def_property_readonly("template", [](const PyFamily& f) { return PyTemplate{f.family->template_ptr()}; })
      .def_property_readonly(
          "params", [](const PyFamily& f) { return template_params(f.family->decl()); },
          "Template parameters: (name, kind, cpp_type, default) with kind 'type', 'integer', "
          "'floating', 'bool' or 'unsupported' and default None or its source text.")
      .def_property_readonly("param_summary", [](const PyFamily& f) { return f.family->decl().describe_params(); })
      .def_property_readonly(
          "args",
          [](const PyFamily& f) {
            py::list out;
            for (const auto& p : f.family->decl().params) out.append(py::make_tuple(p.name, p.type));
            return out;
          },
          "Function parameters as declared: (name, type).")
      .def_property_readonly(
          "options", [](const PyFamily& f) { return options_dict(f.family->options()); },
          "The compile options, as the keyword arguments of Template.kernel() take them.")
      .def("__repr__", [](const PyFamily& f) {
        std::string ps;
        for (const auto& p : f.family->decl().template_params) ps += (ps.empty() ? "" : ", ") + p.name;
        return "<kjit.KernelFamily " + f.family->decl().name + "<" + ps + "> of template '" + f.family->tmpl().name() +
               "'>";
      });
  add_fast_method(family, &specialize_def);
}

}  // namespace kjit::python
