#include "ops/elementwise/function.hpp"

#include "torch/dtypes.hpp"

#include <ATen/ExpandUtils.h>
#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "ops/runtime/checks.hpp"
#include "ops/runtime/geometry.hpp"
#include "ops/runtime/kernels.hpp"
#include "ops/runtime/launch_context.hpp"
#include "ops/runtime/launch_kernel.hpp"
#include "ops/runtime/plan.hpp"
#include "ops/runtime/tensors.hpp"

namespace kjit::ops {
namespace {

constexpr unsigned kBlock = 256;  // kjit_ew::kBlock (kUnroll is 1)

const std::pair<const char*, at::ScalarType> kDtypes[] = {{"float32", at::ScalarType::Float},
                                                          {"float16", at::ScalarType::Half},
                                                          {"bfloat16", at::ScalarType::BFloat16},
                                                          {"float64", at::ScalarType::Double},
                                                          {"int8", at::ScalarType::Char},
                                                          {"int16", at::ScalarType::Short},
                                                          {"int32", at::ScalarType::Int},
                                                          {"int64", at::ScalarType::Long},
                                                          {"uint8", at::ScalarType::Byte},
                                                          {"bool", at::ScalarType::Bool},
                                                          {"complex64", at::ScalarType::ComplexFloat},
                                                          {"complex128", at::ScalarType::ComplexDouble}};

// "torch.float32, torch.float16, ...": the dtypes a function takes, for messages.
std::string allowed_dtypes() {
  std::string out;
  for (const auto& [n, t] : kDtypes) out += (out.empty() ? "torch." : ", torch.") + std::string(n);
  return out;
}

at::ScalarType dtype_named(const std::string& name) {
  for (const auto& [n, t] : kDtypes)
    if (name == n) return t;
  throw TypeError("kjit.elementwise: dtype '" + name +
                  "' of the function spec is not supported; allowed: " + allowed_dtypes());
}
const char* dtype_name(at::ScalarType t) {
  for (const auto& [n, d] : kDtypes)
    if (d == t) return n;
  return "?";
}
bool supported(at::ScalarType t) {
  for (const auto& [n, d] : kDtypes)
    if (d == t) return true;
  return false;
}
bool is_half(at::ScalarType t) { return t == at::ScalarType::Half || t == at::ScalarType::BFloat16; }
bool is_complex(at::ScalarType t) { return t == at::ScalarType::ComplexFloat || t == at::ScalarType::ComplexDouble; }
// The type the expression computes in: the result's (float for 16-bit results) or, with a complex input
// and a real result, complex128 where the result or an input is 64-bit, else complex64.
at::ScalarType compute_dtype(at::ScalarType out, const at::ScalarType* in, std::size_t n_in) {
  if (is_complex(out)) return out;
  bool cx = false, wide = out == at::ScalarType::Double;
  for (std::size_t i = 0; i < n_in; ++i) {
    cx = cx || is_complex(in[i]);
    wide = wide || in[i] == at::ScalarType::ComplexDouble;
  }
  if (cx) return wide ? at::ScalarType::ComplexDouble : at::ScalarType::ComplexFloat;
  return is_half(out) ? at::ScalarType::Float : out;
}
// A kernel's type parameters name the real type of a complex dtype; kjit_cx says which are complex
// (kernel_templates/elementwise.cuh).
TemplateArg real_type_arg(at::ScalarType t) {
  if (t == at::ScalarType::ComplexFloat) return TemplateArg::type(DType::Float32);
  if (t == at::ScalarType::ComplexDouble) return TemplateArg::type(DType::Float64);
  return type_arg(t);
}
// Bit 0: the result is complex, bit 1: the compute type, bit 2 + i: input i.
TemplateArg complex_mask(at::ScalarType out, at::ScalarType compute, const at::ScalarType* in, std::size_t n_in) {
  std::uint64_t m = (is_complex(out) ? 1u : 0u) | (is_complex(compute) ? 2u : 0u);
  for (std::size_t i = 0; i < n_in; ++i)
    if (is_complex(in[i])) m |= std::uint64_t{1} << (2 + i);
  return TemplateArg::unsigned_integer(m);
}

std::string torch_dtype(at::ScalarType t) { return "torch." + std::string(dtype_name(t)); }
using python::torch_dtype_name;
std::string torch_name(at::ScalarType t) { return torch_dtype_name(t); }

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string describe(const at::Tensor& t) {
  return "a " + torch_dtype(t.scalar_type()) + " tensor of shape " + shape_str(t.sizes()) + " on " + t.device().str();
}

// A kernel argument in an 8-byte slot: 32- or 64-bit integer (the index type I), pointer or double.
// launch() hands them to launch_kernel_array (their byte sizes are kept and checked in debug builds).
struct ArgPack {
  static constexpr int kMax =
      2 + ElementwiseFn::kMaxRank + ElementwiseFn::kMaxInputs * (1 + ElementwiseFn::kMaxRank) + 32;
  alignas(8) std::uint64_t slots[kMax];
  void* ptrs[kMax];
#ifndef NDEBUG
  std::size_t sizes[kMax];
#endif
  int n = 0;
  template <class T>
  void add(T v) {
    static_assert(sizeof(T) <= 8);
    slots[n] = 0;
    std::memcpy(&slots[n], &v, sizeof(T));
    ptrs[n] = &slots[n];
#ifndef NDEBUG
    sizes[n] = sizeof(T);
#endif
    ++n;
  }
  void launch(const SpecializedKernel& kernel, const LaunchConfig& config) {
#ifndef NDEBUG
    launch_kernel_array(kernel, config, ptrs, sizes, static_cast<std::size_t>(n));
#else
    launch_kernel_array(kernel, config, ptrs, nullptr, static_cast<std::size_t>(n));
#endif
  }
  void index(std::int64_t v, bool wide) {
    if (wide)
      add<long long>(v);
    else
      add<int>(static_cast<int>(v));
  }
};

// A spec may come from a saved graph rather than kjit/elementwise.py: the same rules as at definition.
void check_expression(const std::string& expr, const std::string& what) {
  for (const char* tok : ElementwiseFn::kNotAnExpression)
    if (expr.find(tok) != std::string::npos)
      throw ValueError("kjit.elementwise: " + what + " '" + expr +
                       "' must be one C++ expression (no ';', braces, comments or preprocessor lines) on one line: no "
                       "line breaks, backslashes, '#' or its digraphs and trigraph ('%:', '<%', '%>', '?\?=')");
}
void check_name(const std::string& n) {
  const bool ok =
      !n.empty() && (std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_') &&
      std::all_of(n.begin(), n.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  if (!ok) throw ValueError("kjit.elementwise: name '" + n + "' of the function spec is not a C++ identifier");
}

}  // namespace

std::string cpp_float(double v) {
  if (std::isnan(v)) return "__int_as_float(0x7fffffff)";
  if (std::isinf(v)) return v > 0 ? "(1.0 / 0.0)" : "(-1.0 / 0.0)";
  // Python's float.hex(): [-]0x<h>.<13 hex digits>p<sign><exponent>.
  std::string out = std::signbit(v) ? "-0x" : "0x";
  double m = std::fabs(v);
  if (m == 0.0) return out + "0.0p+0";
  int e = 0;
  m = std::frexp(m, &e);  // m in [0.5, 1)
  const int shift = 1 - std::max(-1021 - e, 0);
  m = std::ldexp(m, shift);
  e -= shift;
  static const char* kHex = "0123456789abcdef";
  const int lead = static_cast<int>(m);
  out += kHex[lead];
  out += '.';
  m -= lead;
  for (int i = 0; i < 13; ++i) {
    m *= 16;
    const int d = static_cast<int>(m);
    out += kHex[d];
    m -= d;
  }
  return out + "p" + (e >= 0 ? "+" : "") + std::to_string(e);
}

ElementwiseSpec ElementwiseSpec::from_json(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(std::string("kjit.elementwise: the function spec is not valid JSON: ") + e.what());
  }
  try {
    ElementwiseSpec s;
    s.name = j.value("name", std::string("elementwise"));
    s.expr = j.at("expr").get<std::string>();
    s.inputs = j.at("inputs").get<std::vector<std::string>>();
    s.scalars = j.value("scalars", std::vector<std::string>{});
    const auto spec = j.value("specialize", std::vector<std::string>{});
    for (const std::string& sc : s.scalars)
      s.specialized.push_back(std::find(spec.begin(), spec.end(), sc) != spec.end());
    if (j.contains("dtype") && !j["dtype"].is_null()) s.dtype = dtype_named(j["dtype"].get<std::string>());
    const auto grads = j.value("grads", nlohmann::json::object());
    const auto backward = j.value("backward", nlohmann::json::object());
    const auto no_grad = j.value("no_grad", nlohmann::json::object());
    for (const std::string& in : s.inputs) {
      s.grads.push_back(grads.contains(in) ? std::optional<std::string>(grads[in].get<std::string>()) : std::nullopt);
      s.backward.push_back(backward.contains(in) && grads.contains(in)
                               ? std::optional<std::string>(backward[in].get<std::string>())
                               : std::nullopt);
      s.no_grad_reasons.push_back(no_grad.contains(in) ? no_grad[in].get<std::string>() : std::string());
    }
    const auto defaults = j.value("defaults", nlohmann::json::object());
    for (const auto& [k, v] : defaults.items())
      s.defaults.emplace_back(k, v.is_string() ? std::strtod(v.get<std::string>().c_str(), nullptr) : v.get<double>());
    check_expression(s.expr, "the expression");
    for (std::size_t i = 0; i < s.grads.size(); ++i) {
      if (s.grads[i]) check_expression(*s.grads[i], "the derivative of '" + s.inputs[i] + "'");
      if (s.backward[i]) check_expression(*s.backward[i], "the gradient of '" + s.inputs[i] + "'");
    }
    for (const std::string& n : s.inputs) check_name(n);
    for (const std::string& n : s.scalars) check_name(n);
    if (s.inputs.empty() || s.inputs.size() > static_cast<std::size_t>(ElementwiseFn::kMaxInputs))
      throw ValueError("kjit.elementwise: a function takes 1 to " + std::to_string(ElementwiseFn::kMaxInputs) +
                       " input tensors, got " + std::to_string(s.inputs.size()));
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(std::string("kjit.elementwise: the function spec misses a field or has one of the wrong type: ") +
                     e.what());
  }
}

std::string ElementwiseSpec::to_json() const {
  nlohmann::json j;
  j["name"] = name;
  j["expr"] = expr;
  j["inputs"] = inputs;
  j["scalars"] = scalars;
  std::vector<std::string> spec;
  for (std::size_t i = 0; i < scalars.size(); ++i)
    if (specialized[i]) spec.push_back(scalars[i]);
  j["specialize"] = spec;
  j["dtype"] = dtype ? nlohmann::json(dtype_name(*dtype)) : nlohmann::json(nullptr);
  nlohmann::json g = nlohmann::json::object();
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (grads[i]) g[inputs[i]] = *grads[i];
  j["grads"] = g;
  nlohmann::json b = nlohmann::json::object();
  for (std::size_t i = 0; i < inputs.size() && i < backward.size(); ++i)
    if (backward[i]) b[inputs[i]] = *backward[i];
  j["backward"] = b;
  nlohmann::json why = nlohmann::json::object();
  for (std::size_t i = 0; i < inputs.size() && i < no_grad_reasons.size(); ++i)
    if (!no_grad_reasons[i].empty()) why[inputs[i]] = no_grad_reasons[i];
  j["no_grad"] = why;
  nlohmann::json defs = nlohmann::json::object();
  for (const auto& [k, v] : defaults)
    defs[k] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(std::to_string(v));
  j["defaults"] = defs;
  return j.dump();
}

ElementwiseFn::ElementwiseFn(ElementwiseSpec spec)
    : spec_(std::move(spec)), json_(spec_.to_json()), derivatives_(spec_.inputs.size()) {
  repr_ = "kjit.elementwise('" + spec_.name + "': '" + spec_.expr + "')";
  if (std::none_of(spec_.specialized.begin(), spec_.specialized.end(), [](bool b) { return b; })) {
    plain_ = std::make_unique<Compiled>();
    plain_->tmpl = Template::generated(source({}), "kjit_elementwise_" + spec_.name);
  }
}

std::string ElementwiseFn::source(const std::vector<double>& values) const {
  const auto& in = spec_.inputs;
  std::vector<std::string> runtime, specialized;
  for (std::size_t i = 0; i < spec_.scalars.size(); ++i)
    (spec_.specialized[i] ? specialized : runtime).push_back(spec_.scalars[i]);
  if (values.size() != specialized.size())
    throw ValueError(repr_ + ": specialized_values must be a tuple of one number per specialized scalar, got " +
                     std::to_string(values.size()) + " for " + std::to_string(specialized.size()));
  std::string comment = "// kjit.elementwise " + spec_.name + ": " + spec_.expr;
  std::replace(comment.begin(), comment.end(), '\n', ' ');
  std::replace(comment.begin(), comment.end(), '\r', ' ');
  std::vector<std::string> lines = {comment, "#include \"elementwise.cuh\"", "template <typename C>",
                                    "struct kjit_expr {"};
  // Scalars have the compute type's real type (C itself unless C is complex: a complex constant is C(re, im)).
  for (const std::string& s : runtime) lines.push_back("  kjit_ew::scalar_t<C> " + s + ";");
  std::vector<std::string> params, types, init, ptrs, args;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::string& n = in[i];
    params.push_back("C " + n);
    types.push_back("typename T_" + n);
    ptrs.push_back(", const T_" + n + "* __restrict__ " + n);
    args.push_back("kjit_ew::as<kjit_cx, " + std::to_string(2 + i) + ">(" + n + ")");
  }
  std::string scalar_params;
  for (const std::string& s : runtime) {
    init.push_back("static_cast<kjit_ew::scalar_t<kjit_c>>(" + s + ")");
    scalar_params += ", double " + s;
  }
  lines.push_back("  __device__ __forceinline__ C operator()(" + join(params, ", ") + ") const {");
  lines.push_back("    using namespace kjit_math;");
  for (std::size_t i = 0; i < specialized.size(); ++i)
    lines.push_back("    const kjit_ew::scalar_t<C> " + specialized[i] + " = static_cast<kjit_ew::scalar_t<C>>(" +
                    cpp_float(values[i]) + ");");
  lines.push_back("    return static_cast<C>(" + spec_.expr + ");");
  lines.push_back("  }");
  lines.push_back("};");
  // TO, C and T_<input> are real types; kjit_cx marks the complex ones (kernel_templates/elementwise.cuh).
  const std::string tparams = join(types, ", ");
  const std::string compute = "  using kjit_c = kjit_ew::elem_t<C, kjit_cx, 1>;";
  lines.push_back("template <typename TO, typename C, int VEC, bool TAIL, typename I, unsigned long long kjit_cx, " +
                  tparams + ">");
  lines.push_back(
      "__global__ void __launch_bounds__(kjit_ew::kBlock) kjit_elementwise(TO* __restrict__ kjit_out, I kjit_n" +
      join(ptrs, "") + scalar_params + ") {");
  lines.push_back(compute);
  lines.push_back("  kjit_ew::flat<kjit_c, VEC, TAIL>(kjit_expr<kjit_c>{" + join(init, ", ") +
                  "}, kjit_ew::as<kjit_cx, 0>(kjit_out), kjit_n, " + join(args, ", ") + ");");
  lines.push_back("}");
  for (int r = 1; r <= kMaxRank; ++r) {
    std::vector<std::string> sizes, size_names, ins;
    std::string strided;
    for (int d = 0; d < r; ++d) {
      sizes.push_back("I kjit_size" + std::to_string(d));
      size_names.push_back("kjit_size" + std::to_string(d));
    }
    for (std::size_t i = 0; i < in.size(); ++i) {
      const std::string& n = in[i];
      std::vector<std::string> strides;
      strided += ", const T_" + n + "* __restrict__ " + n;
      for (int d = 0; d < r; ++d) {
        strided += ", I kjit_stride" + std::to_string(d) + "_" + n;
        strides.push_back("kjit_stride" + std::to_string(d) + "_" + n);
      }
      const std::string bit = std::to_string(2 + i);
      ins.push_back("kjit_ew::StridedIn<kjit_ew::elem_t<T_" + n + ", kjit_cx, " + bit + ">, I, " + std::to_string(r) +
                    ">{" + args[i] + ", {" + join(strides, ", ") + "}}");
    }
    const std::string rs = std::to_string(r);
    lines.push_back("template <typename TO, typename C, typename I, unsigned long long kjit_cx, " + tparams + ">");
    lines.push_back("__global__ void __launch_bounds__(kjit_ew::kBlock) kjit_elementwise_strided" + rs +
                    "(TO* __restrict__ kjit_out, I kjit_n, " + join(sizes, ", ") + strided + scalar_params + ") {");
    lines.push_back(compute);
    lines.push_back("  const I kjit_size[" + rs + "] = {" + join(size_names, ", ") + "};");
    lines.push_back("  kjit_ew::strided<kjit_c, " + rs + ">(kjit_expr<kjit_c>{" + join(init, ", ") +
                    "}, kjit_ew::as<kjit_cx, 0>(kjit_out), kjit_n, kjit_size, " + join(ins, ", ") + ");");
    lines.push_back("}");
  }
  return join(lines, "\n") + "\n";
}

const ElementwiseFn::Compiled& ElementwiseFn::compiled(const std::vector<double>& values) const {
  if (plain_) return *plain_;
  std::vector<std::uint64_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) std::memcpy(&bits[i], &values[i], sizeof(double));
  std::lock_guard<std::mutex> lock(mu_);
  auto& c = by_values_[bits];
  if (!c) {
    auto made = std::make_unique<Compiled>();
    made->tmpl = Template::generated(source(values), "kjit_elementwise_" + spec_.name);
    c = std::move(made);
  }
  return *c;
}

std::shared_ptr<const Template> ElementwiseFn::tmpl(const std::vector<double>& values) const {
  return compiled(values).tmpl;
}

const KernelFamily& ElementwiseFn::kernel_family(const std::vector<double>& specialized_values, int rank,
                                                 at::ScalarType out_dtype) const {
  if (rank < 0 || rank > kMaxRank)
    throw ValueError(repr_ + ": rank must be 0 (the flat kernel) to " + std::to_string(kMaxRank) + ", got " +
                     std::to_string(rank));
  return family(compiled(specialized_values), rank, is_half(out_dtype));
}

const KernelFamily& ElementwiseFn::family(const Compiled& c, int rank, bool fast_exp) const {
  std::atomic<const KernelFamily*>& slot = c.families[static_cast<std::size_t>(rank) * 2 + (fast_exp ? 1 : 0)];
  if (const KernelFamily* f = slot.load(std::memory_order_acquire)) return *f;
  std::lock_guard<std::mutex> lock(c.mu);
  if (const KernelFamily* f = slot.load(std::memory_order_relaxed)) return *f;
  CompileOptions options = CompileOptions::library();
  // 16-bit results: kjit_math's exp_ uses the hardware exp (far below one rounding of the result).
  if (fast_exp) options.defines["KJIT_FAST_EXP"] = "1";
  const std::string kernel = rank == 0 ? "kjit_elementwise" : "kjit_elementwise_strided" + std::to_string(rank);
  c.owned.push_back(std::make_unique<const KernelFamily>(Engine::global(), c.tmpl, kernel, std::move(options)));
  slot.store(c.owned.back().get(), std::memory_order_release);
  return *c.owned.back();
}

at::ScalarType ElementwiseFn::result_dtype(c10::ArrayRef<at::Tensor> inputs) const {
  if (spec_.dtype) return *spec_.dtype;
  at::ScalarType t = inputs[0].scalar_type();
  for (std::size_t i = 1; i < inputs.size(); ++i) t = c10::promoteTypes(t, inputs[i].scalar_type());
  return t;
}

void ElementwiseFn::check_out(const at::Tensor& out, c10::IntArrayRef shape, at::ScalarType dtype,
                              c10::ArrayRef<at::Tensor> ins) const {
  if (out.sizes() != shape || out.scalar_type() != dtype || out.device() != ins[0].device() || !out.is_contiguous())
    throw ValueError(repr_ + ": out must be a contiguous " + torch_dtype(dtype) + " tensor of shape " +
                     shape_str(shape) + " on " + ins[0].device().str() + ", got " + describe(out) +
                     " (contiguous: " + (out.is_contiguous() ? "True" : "False") + ")");
  // In place (out is an input, element for element) is fine; any other overlap is not.
  const auto lo = reinterpret_cast<std::uintptr_t>(out.const_data_ptr());
  const auto hi = lo + out.numel() * out.element_size();
  for (std::size_t i = 0; i < ins.size(); ++i) {
    const at::Tensor& t = ins[i];
    const auto p = reinterpret_cast<std::uintptr_t>(t.const_data_ptr());
    if (p == lo && t.sizes() == out.sizes() && t.strides() == out.strides() && t.scalar_type() == out.scalar_type())
      continue;
    std::int64_t span = 0;
    for (std::int64_t d = 0; d < t.dim(); ++d) span += std::max<std::int64_t>(t.size(d) - 1, 0) * t.stride(d);
    const auto t_hi = p + (span + 1) * t.element_size();
    if (t.numel() && p < hi && lo < t_hi)
      throw ValueError(repr_ + ": out overlaps input '" + spec_.inputs[i] +
                       "' without being that very tensor; pass a separate out (or the input itself, for in place)");
  }
}

at::Tensor ElementwiseFn::call(c10::ArrayRef<at::Tensor> ins, c10::ArrayRef<double> scalars,
                               const at::Tensor* out_arg) const {
  if (ins.size() != spec_.inputs.size())
    throw TypeError(repr_ + " takes " + std::to_string(spec_.inputs.size()) + " tensor(s), got " +
                    std::to_string(ins.size()));
  if (scalars.size() != spec_.scalars.size())
    throw TypeError(repr_ + " takes " + std::to_string(spec_.scalars.size()) + " scalar(s), got " +
                    std::to_string(scalars.size()));
  bool one_device = on_op_device(ins[0]);
  for (const at::Tensor& t : ins) one_device = one_device && t.device() == ins[0].device();
  if (!one_device) {
    std::vector<std::string> placed;
    for (std::size_t i = 0; i < ins.size(); ++i) placed.push_back(spec_.inputs[i] + " on " + ins[i].device().str());
    throw ValueError(repr_ + ": expected all inputs on one CUDA device, got " + join(placed, ", ") +
                     "; move them with .to('cuda')");
  }
  for (std::size_t i = 0; i < ins.size(); ++i)
    if (!supported(ins[i].scalar_type()))
      throw TypeError(repr_ + ": input '" + spec_.inputs[i] + "' has dtype " + torch_name(ins[i].scalar_type()) +
                      ", which is not supported; allowed: " + allowed_dtypes() + "; convert it with " +
                      spec_.inputs[i] + ".to(torch.float32)");
  const at::ScalarType dtype = result_dtype(ins);
  bool same = true;
  for (const at::Tensor& t : ins) same = same && t.sizes() == ins[0].sizes();
  std::vector<std::int64_t> shape = ins[0].sizes().vec();
  if (!same) {
    try {
      for (std::size_t i = 1; i < ins.size(); ++i) shape = at::infer_size(shape, ins[i].sizes());
    } catch (const c10::Error&) {
      std::vector<std::string> shapes;
      for (std::size_t i = 0; i < ins.size(); ++i) shapes.push_back(spec_.inputs[i] + " " + shape_str(ins[i].sizes()));
      throw ValueError(repr_ + ": the input shapes do not broadcast: " + join(shapes, ", "));
    }
  }
  at::Tensor out;
  if (out_arg) {
    check_out(*out_arg, shape, dtype, ins);
    out = *out_arg;
  } else {
    out = new_empty(shape, ins[0], dtype);
  }
  if (out.numel() == 0) return out;
  std::vector<double> spec_values;
  double runtime[32];
  std::size_t n_runtime = 0;
  for (std::size_t i = 0; i < scalars.size(); ++i) {
    if (spec_.specialized[i])
      spec_values.push_back(scalars[i]);
    else if (n_runtime < 32)
      runtime[n_runtime++] = scalars[i];
    else
      throw ValueError(repr_ + ": at most 32 runtime scalars");
  }
  const Compiled& c = compiled(spec_values);
  bool contiguous = same;
  for (const at::Tensor& t : ins) contiguous = contiguous && t.is_contiguous();
  if (contiguous)
    launch_flat(ins, out, c, c10::ArrayRef<double>(runtime, n_runtime));
  else
    launch_strided(ins, out, c, c10::ArrayRef<double>(runtime, n_runtime));
  return out;
}

ElementwiseFn::FlatPlan ElementwiseFn::flat_plan(at::ScalarType out_dtype, std::int64_t n, const Access* accesses,
                                                 const at::ScalarType* in_dtypes, std::size_t n_in) {
  FlatPlan p;
  p.vec = vector_width(accesses, 1 + n_in);
  p.wide = n > INT_MAX;
  const at::ScalarType compute = compute_dtype(out_dtype, in_dtypes, n_in);
  p.args.push(real_type_arg(out_dtype));
  p.args.push(real_type_arg(compute));
  p.args.push(int_arg(p.vec));
  p.args.push(bool_arg(n % p.vec != 0));
  p.args.push(TemplateArg::type(p.wide ? DType::Int64 : DType::Int32));
  p.args.push(complex_mask(out_dtype, compute, in_dtypes, n_in));
  for (std::size_t i = 0; i < n_in; ++i) p.args.push(real_type_arg(in_dtypes[i]));
  return p;
}

void ElementwiseFn::prepare_ahead(at::ScalarType grad_dtype, c10::ArrayRef<at::Tensor> inputs,
                                  c10::ArrayRef<double> scalars) const noexcept {
  try {
    // This is a derivative: its inputs are kjit_grad, then the function's inputs.
    if (inputs.empty() || inputs.size() + 1 != spec_.inputs.size() || inputs.size() + 1 > kMaxInputs ||
        scalars.size() != spec_.scalars.size() || !supported(grad_dtype))
      return;
    for (const at::Tensor& t : inputs)  // the flat kernel only: one shape, contiguous
      if (!t.is_cuda() || !t.is_contiguous() || t.sizes() != inputs[0].sizes() || !supported(t.scalar_type())) return;
    const std::int64_t n = inputs[0].numel();
    if (n == 0) return;
    std::vector<double> spec_values;
    for (std::size_t i = 0; i < scalars.size(); ++i)
      if (spec_.specialized[i]) spec_values.push_back(scalars[i]);
    at::ScalarType dtypes[kMaxInputs];
    dtypes[0] = grad_dtype;
    at::ScalarType dtype = grad_dtype;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      dtypes[i + 1] = inputs[i].scalar_type();
      dtype = c10::promoteTypes(dtype, dtypes[i + 1]);
    }
    if (spec_.dtype) dtype = *spec_.dtype;
    // The result and the gradient are fresh tensors (aligned): null pointers stand for them.
    Access accesses[1 + kMaxInputs];
    accesses[0] = {nullptr, static_cast<std::size_t>(c10::elementSize(dtype))};
    accesses[1] = {nullptr, static_cast<std::size_t>(c10::elementSize(grad_dtype))};
    for (std::size_t i = 0; i < inputs.size(); ++i)
      accesses[i + 2] = {inputs[i].const_data_ptr(), static_cast<std::size_t>(inputs[i].element_size())};
    const FlatPlan p = flat_plan(dtype, n, accesses, dtypes, inputs.size() + 1);
    family(compiled(spec_values), 0, is_half(dtype))
        .prepare_ahead(p.args.data(), p.args.size(), inputs[0].device().index());
  } catch (const std::exception&) {
    // The call that wants it meets whatever this was and reports it.
  }
}

void ElementwiseFn::launch_flat(c10::ArrayRef<at::Tensor> ins, const at::Tensor& out, const Compiled& c,
                                c10::ArrayRef<double> runtime) const {
  const std::int64_t n = out.numel();
  Access accesses[1 + kMaxInputs];
  at::ScalarType dtypes[kMaxInputs];
  accesses[0] = {out.const_data_ptr(), static_cast<std::size_t>(out.element_size())};
  for (std::size_t i = 0; i < ins.size(); ++i) {
    accesses[i + 1] = {ins[i].const_data_ptr(), static_cast<std::size_t>(ins[i].element_size())};
    dtypes[i] = ins[i].scalar_type();
  }
  const FlatPlan p = flat_plan(out.scalar_type(), n, accesses, dtypes, ins.size());
  const int vec = p.vec;
  const bool wide = p.wide;
  const int device = op_device(out);
  LaunchContext ctx(device);
  const auto k =
      kernel_for(family(c, 0, is_half(out.scalar_type())), p.args.data(), p.args.size(), device, ctx.compile_forbidden);
  ArgPack a;
  a.add<void*>(out.data_ptr());
  a.index(n, wide);
  for (const at::Tensor& t : ins) a.add<const void*>(t.const_data_ptr());
  for (double v : runtime) a.add<double>(v);
  LaunchConfig cfg;
  cfg.grid.x = static_cast<unsigned>(std::max<std::int64_t>(1, cdiv(n / vec, kBlock)));
  cfg.block.x = kBlock;
  cfg.stream = ctx.stream;
  a.launch(*k, cfg);
}

void ElementwiseFn::launch_strided(c10::ArrayRef<at::Tensor> ins, const at::Tensor& out, const Compiled& c,
                                   c10::ArrayRef<double> runtime) const {
  const c10::IntArrayRef shape = out.sizes();
  const std::int64_t nd = static_cast<std::int64_t>(shape.size());
  // Each input's strides over the output's dims (0 where it broadcasts).
  std::vector<std::vector<std::int64_t>> strides;
  for (const at::Tensor& t : ins) {
    std::vector<std::int64_t> s(nd, 0);
    const std::int64_t off = nd - t.dim();
    for (std::int64_t d = 0; d < t.dim(); ++d) s[off + d] = t.size(d) == 1 && shape[off + d] != 1 ? 0 : t.stride(d);
    strides.push_back(std::move(s));
  }
  // Coalesce: drop size-1 dims, merge neighbours that are contiguous with each other in every input.
  std::vector<std::int64_t> sizes;
  std::vector<std::vector<std::int64_t>> per_input(ins.size());
  for (std::int64_t d = 0; d < nd; ++d) {
    if (shape[d] == 1) continue;
    bool merge = !sizes.empty();
    for (std::size_t i = 0; merge && i < ins.size(); ++i) merge = per_input[i].back() == strides[i][d] * shape[d];
    if (merge) {
      sizes.back() *= shape[d];
      for (std::size_t i = 0; i < ins.size(); ++i) per_input[i].back() = strides[i][d];
      continue;
    }
    sizes.push_back(shape[d]);
    for (std::size_t i = 0; i < ins.size(); ++i) per_input[i].push_back(strides[i][d]);
  }
  if (sizes.empty()) {
    sizes.push_back(1);
    for (auto& p : per_input) p.push_back(0);
  }
  if (sizes.size() > static_cast<std::size_t>(kMaxRank)) {
    // Rare: more than 6 dims that cannot be merged. Materialize the inputs in the output's shape.
    std::vector<at::Tensor> dense;
    for (const at::Tensor& t : ins) dense.push_back(t.expand(shape).contiguous());
    launch_flat(dense, out, c, runtime);
    return;
  }
  const std::int64_t n = out.numel();
  std::int64_t reach = 0;
  for (const auto& p : per_input) {
    std::int64_t r = 0;
    for (std::size_t d = 0; d < sizes.size(); ++d) r += (sizes[d] - 1) * p[d];
    reach = std::max(reach, r);
  }
  const bool wide = std::max(n, reach) > INT_MAX;
  const int rank = static_cast<int>(sizes.size());
  const int device = op_device(out);
  LaunchContext ctx(device);
  at::ScalarType dtypes[kMaxInputs];
  for (std::size_t i = 0; i < ins.size(); ++i) dtypes[i] = ins[i].scalar_type();
  const at::ScalarType compute = compute_dtype(out.scalar_type(), dtypes, ins.size());
  TemplateArgList<4 + kMaxInputs> targs;
  targs.push(real_type_arg(out.scalar_type()));
  targs.push(real_type_arg(compute));
  targs.push(TemplateArg::type(wide ? DType::Int64 : DType::Int32));
  targs.push(complex_mask(out.scalar_type(), compute, dtypes, ins.size()));
  for (std::size_t i = 0; i < ins.size(); ++i) targs.push(real_type_arg(dtypes[i]));
  const auto k = kernel_for(family(c, rank, is_half(out.scalar_type())), targs.data(), targs.size(), device,
                            ctx.compile_forbidden);
  ArgPack a;
  a.add<void*>(out.data_ptr());
  a.index(n, wide);
  for (std::int64_t s : sizes) a.index(s, wide);
  for (std::size_t i = 0; i < ins.size(); ++i) {
    a.add<const void*>(ins[i].const_data_ptr());
    for (std::int64_t s : per_input[i]) a.index(s, wide);
  }
  for (double v : runtime) a.add<double>(v);
  LaunchConfig cfg;
  cfg.grid.x = static_cast<unsigned>(std::max<std::int64_t>(1, cdiv(n, kBlock)));
  cfg.block.x = kBlock;
  cfg.stream = ctx.stream;
  a.launch(*k, cfg);
}

const ElementwiseFn* ElementwiseFn::derivative(std::size_t i) const {
  if (i >= spec_.inputs.size() || !spec_.grads[i]) return nullptr;
  if (spec_.inputs.size() + 1 > static_cast<std::size_t>(kMaxInputs)) return nullptr;  // kjit_grad + the inputs
  std::lock_guard<std::mutex> lock(mu_);
  if (!derivatives_[i]) {
    ElementwiseSpec d;
    d.name = spec_.name + "_d" + spec_.inputs[i];
    const bool derived = i < spec_.backward.size() && spec_.backward[i];
    d.expr = derived ? *spec_.backward[i] : "kjit_grad * (" + *spec_.grads[i] + ")";
    d.inputs.push_back("kjit_grad");
    d.inputs.insert(d.inputs.end(), spec_.inputs.begin(), spec_.inputs.end());
    d.scalars = spec_.scalars;
    d.specialized = spec_.specialized;
    d.grads.assign(d.inputs.size(), std::nullopt);
    d.backward.assign(d.inputs.size(), std::nullopt);
    d.no_grad_reasons.assign(d.inputs.size(),
                             "kjit differentiates an elementwise function once (its derivative "
                             "has no derivative of its own)");
    derivatives_[i] = &elementwise_fn(d.to_json());  // the one the registered op finds by this spec
  }
  return derivatives_[i];
}

const ElementwiseFn& elementwise_fn(const std::string& spec_json) {
  static std::mutex mu;
  static std::unordered_map<std::string, const ElementwiseFn*> by_text;                  // as given
  static std::unordered_map<std::string, std::unique_ptr<const ElementwiseFn>> by_spec;  // canonical
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = by_text.find(spec_json);
    if (it != by_text.end()) return *it->second;
  }
  auto made = std::make_unique<const ElementwiseFn>(ElementwiseSpec::from_json(spec_json));  // outside the lock
  std::lock_guard<std::mutex> lock(mu);
  auto& owned = by_spec[made->spec_json()];
  if (!owned) owned = std::move(made);
  by_text[spec_json] = owned.get();
  by_text[owned->spec_json()] = owned.get();
  return *owned;
}

}  // namespace kjit::ops
