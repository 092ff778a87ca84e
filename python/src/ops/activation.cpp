// Activations and their backward: relu, sigmoid, tanh, silu, mish, gelu (approximate 'none' or 'tanh'), each an
// elementwise function of kernel_templates/math.cuh (ElementwiseFn): inputs of any shape and layout
// (strided views are read through their strides); the result is contiguous, of the input's dtype. relu,
// sigmoid and tanh differentiate through their output, gelu, silu and mish through their input, as PyTorch's
// kernels do: <name>_backward(grad, saved).
#include <ATen/ops/empty.h>

#include "ops/elementwise/function.hpp"
#include "ops/runtime/op.hpp"

namespace kjit::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

enum class Act { Relu, Sigmoid, Tanh, Silu, Mish, Gelu, GeluTanh };

struct ActInfo {
  const char* name;           // the op, and the elementwise function's name
  const char* op;             // the op's name in messages (a literal: no allocation per call)
  const char* backward_op;    // its backward's
  const char* expr;           // forward, of x
  const char* backward_expr;  // of g and the saved tensor
  bool through_output;        // the saved tensor is the output (else the input)
};

constexpr ActInfo info(Act a) {
  switch (a) {
    case Act::Relu: return {"relu", "kjit.ops.relu", "kjit.ops.relu_backward", "relu(x)", "relu_backward(g, y)", true};
    case Act::Sigmoid:
      return {"sigmoid", "kjit.ops.sigmoid", "kjit.ops.sigmoid_backward", "sigmoid(x)", "sigmoid_backward(g, y)", true};
    case Act::Tanh: return {"tanh", "kjit.ops.tanh", "kjit.ops.tanh_backward", "tanh_(x)", "tanh_backward(g, y)", true};
    case Act::Silu: return {"silu", "kjit.ops.silu", "kjit.ops.silu_backward", "silu(x)", "silu_backward(g, x)", false};
    case Act::Mish: return {"mish", "kjit.ops.mish", "kjit.ops.mish_backward", "mish(x)", "mish_backward(g, x)", false};
    case Act::Gelu: return {"gelu", "kjit.ops.gelu", "kjit.ops.gelu_backward", "gelu(x)", "gelu_backward(g, x)", false};
    default:
      return {"gelu_tanh",    "kjit.ops.gelu_tanh",       "kjit.ops.gelu_tanh_backward",
              "gelu_tanh(x)", "gelu_tanh_backward(g, x)", false};
  }
}

ElementwiseFn make_fn(const std::string& name, const std::string& expr, std::vector<std::string> inputs) {
  ElementwiseSpec s;
  s.name = name;
  s.expr = expr;
  s.grads.assign(inputs.size(), std::nullopt);
  s.backward.assign(inputs.size(), std::nullopt);
  s.no_grad_reasons.assign(inputs.size(), "");
  s.inputs = std::move(inputs);
  return ElementwiseFn(std::move(s));
}

template <Act A>
const ElementwiseFn& forward_fn() {
  static const ElementwiseFn f = make_fn(info(A).name, info(A).expr, {"x"});
  return f;
}
template <Act A>
const ElementwiseFn& backward_fn() {
  static const ElementwiseFn f = make_fn(std::string(info(A).name) + "_backward", info(A).backward_expr,
                                         {"g", info(A).through_output ? "y" : "x"});
  return f;
}

template <Act A>
at::Tensor forward(const char* op, const at::Tensor& x) {
  const int device = device_for(op, {{"x", x}});
  (void)device;
  check_dtype(op, "x", x, kFloatingTypes);
  return forward_fn<A>().call({x}, {});
}

template <Act A>
at::Tensor backward(const char* op, const at::Tensor& grad, const at::Tensor& saved, const char* saved_arg) {
  const int device = device_for(op, {{"grad", grad}, {saved_arg, saved}});
  (void)device;
  check_like(op, "grad", grad, saved_arg, saved, saved.sym_sizes());
  check_dtype(op, saved_arg, saved, kFloatingTypes);
  return backward_fn<A>().call({grad, saved}, {});
}

at::Tensor like_meta(const char* op, const at::Tensor& x) {
  check_dtype(op, "x", x, kFloatingTypes);
  return at::empty_symint(x.sym_sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous));
}
at::Tensor backward_meta(const char* op, const at::Tensor& grad, const at::Tensor& saved, const char* saved_arg) {
  check_like(op, "grad", grad, saved_arg, saved, saved.sym_sizes());
  check_dtype(op, saved_arg, saved, kFloatingTypes);
  return at::empty_symint(saved.sym_sizes(), saved.options().memory_format(c10::MemoryFormat::Contiguous));
}

// The unary activations (one argument): relu, sigmoid, tanh, silu, mish.
template <Act A>
at::Tensor unary_cuda(const at::Tensor& x) {
  return forward<A>(info(A).op, x);
}
template <Act A>
at::Tensor unary_meta(const at::Tensor& x) {
  return like_meta(info(A).op, x);
}
template <Act A>
at::Tensor unary_backward_cuda(const at::Tensor& grad, const at::Tensor& saved) {
  return backward<A>(info(A).backward_op, grad, saved, "saved");
}
template <Act A>
at::Tensor unary_backward_meta(const at::Tensor& grad, const at::Tensor& saved) {
  return backward_meta(info(A).backward_op, grad, saved, "saved");
}

template <Act A>
struct UnaryFunction : public torch::autograd::Function<UnaryFunction<A>> {
  static constexpr const char* kName = info(A).name;
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    at::Tensor y = call_below_autograd<&unary_cuda<A>>(kName, x);
    ctx->save_for_backward({info(A).through_output ? y : x});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const std::string bwd = std::string(kName) + "_backward";
    return {OpHandle<&unary_backward_cuda<A>>::get(bwd.c_str()).call(grads[0], ctx->get_saved_variables()[0])};
  }
};

// gelu(x, approximate='none' | 'tanh').
bool tanh_approximation(const char* op, c10::string_view approximate) {
  if (approximate == "none") return false;
  if (approximate == "tanh") return true;
  throw ValueError(std::string(op) + ": approximate='" + std::string(approximate) +
                   "' is not supported; allowed: 'none', 'tanh'");
}

at::Tensor gelu_cuda(const at::Tensor& x, c10::string_view approximate) {
  constexpr const char* op = info(Act::Gelu).op;
  const int device = device_for(op, {{"x", x}});
  (void)device;
  check_dtype(op, "x", x, kFloatingTypes);
  return tanh_approximation(op, approximate) ? forward<Act::GeluTanh>(op, x) : forward<Act::Gelu>(op, x);
}
at::Tensor gelu_meta(const at::Tensor& x, c10::string_view approximate) {
  at::Tensor y = like_meta("kjit.ops.gelu", x);
  tanh_approximation("kjit.ops.gelu", approximate);
  return y;
}
at::Tensor gelu_backward_cuda(const at::Tensor& grad, const at::Tensor& x, c10::string_view approximate) {
  constexpr const char* op = info(Act::Gelu).backward_op;
  return tanh_approximation(op, approximate) ? backward<Act::GeluTanh>(op, grad, x, "x")
                                             : backward<Act::Gelu>(op, grad, x, "x");
}
at::Tensor gelu_backward_meta(const at::Tensor& grad, const at::Tensor& x, c10::string_view approximate) {
  tanh_approximation("kjit.ops.gelu_backward", approximate);
  return backward_meta("kjit.ops.gelu_backward", grad, x, "x");
}

struct GeluFunction : public torch::autograd::Function<GeluFunction> {
  static constexpr const char* kName = "gelu";
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::string_view approximate) {
    ctx->saved_data["approximate"] = std::string(approximate);
    ctx->save_for_backward({x});
    return call_below_autograd<&gelu_cuda>(kName, x, approximate);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::string approximate = ctx->saved_data["approximate"].toStringRef();
    return {
        OpHandle<&gelu_backward_cuda>::get("gelu_backward").call(grads[0], ctx->get_saved_variables()[0], approximate),
        at::Tensor()};
  }
};

}  // namespace

#define KJIT_UNARY_ACTIVATION(name, act)                                                                     \
  KJIT_OP(name, #name "(Tensor x) -> Tensor", unary_cuda<act>, unary_meta<act>);                             \
  KJIT_OP(name##_backward, #name "_backward(Tensor grad, Tensor saved) -> Tensor", unary_backward_cuda<act>, \
          unary_backward_meta<act>);                                                                         \
  KJIT_OP_AUTOGRAD(name, (autograd_kernel<UnaryFunction<act>, &unary_cuda<act>>))

KJIT_UNARY_ACTIVATION(relu, Act::Relu)
KJIT_UNARY_ACTIVATION(sigmoid, Act::Sigmoid)
KJIT_UNARY_ACTIVATION(tanh, Act::Tanh)
KJIT_UNARY_ACTIVATION(silu, Act::Silu)
KJIT_UNARY_ACTIVATION(mish, Act::Mish)
KJIT_OP(gelu, "gelu(Tensor x, str approximate='none') -> Tensor", gelu_cuda, gelu_meta);
KJIT_OP(gelu_backward, "gelu_backward(Tensor grad, Tensor x, str approximate='none') -> Tensor", gelu_backward_cuda,
        gelu_backward_meta);
KJIT_OP_AUTOGRAD(gelu, (autograd_kernel<GeluFunction, &gelu_cuda>))

}  // namespace kjit::ops
