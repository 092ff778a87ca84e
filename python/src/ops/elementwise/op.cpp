// kjit::elementwise(str spec, Tensor[] inputs, float[] scalars) -> Tensor: a kjit.elementwise function
// as a registered op, so that torch.compile traces it (no graph break), fake tensors know its result, and
// autograd records it. `spec` is the function's JSON spec (elementwise_fn.hpp), `scalars` one value per
// scalar in declaration order. The gradient of each input is the derivative in the spec (derived
// symbolically by kjit/_derivative.py or given by the user), run as an elementwise function of the
// incoming gradient and the inputs, then summed over broadcast dims; an input that requires grad and has
// no derivative is refused with the reason.
#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>

#include <vector>

#include "torch/dtypes.hpp"
#include "ops/elementwise/function.hpp"
#include "ops/runtime/op.hpp"

namespace kjit::ops {
namespace {

using python::torch_dtype_name;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const ElementwiseFn& fn_of(c10::string_view spec) { return elementwise_fn(std::string(spec)); }

at::Tensor elementwise_cuda(c10::string_view spec, at::TensorList inputs, at::ArrayRef<double> scalars) {
  return fn_of(spec).call(inputs, scalars);
}

at::Tensor elementwise_meta(c10::string_view spec, at::TensorList inputs, at::ArrayRef<double> scalars) {
  const ElementwiseFn& fn = fn_of(spec);
  if (inputs.size() != fn.spec().inputs.size() || scalars.size() != fn.spec().scalars.size())
    throw TypeError(fn.repr() + " takes " + std::to_string(fn.spec().inputs.size()) + " tensor(s) and " +
                    std::to_string(fn.spec().scalars.size()) + " scalar(s), got " + std::to_string(inputs.size()) +
                    " and " + std::to_string(scalars.size()));
  std::vector<c10::SymInt> shape(inputs[0].sym_sizes().begin(), inputs[0].sym_sizes().end());
  for (std::size_t i = 1; i < inputs.size(); ++i) shape = at::infer_size_symint(shape, inputs[i].sym_sizes());
  return at::empty_symint(shape, inputs[0].options().dtype(fn.result_dtype(inputs)));
}

const c10::TypedOperatorHandle<at::Tensor(c10::string_view, at::TensorList, at::ArrayRef<double>)>& op() {
  return OpHandle<&elementwise_cuda>::get("elementwise");
}

// Refuses inputs that require grad where the function has no derivative: a complex input or result (kjit
// derives real functions; PyTorch's gradients of complex functions are conjugate Wirtinger derivatives, which
// kjit's symbolic derivatives are not), or an input without a derivative expression.
void check_differentiable(const ElementwiseFn& fn, at::TensorList inputs) {
  const at::ScalarType result = fn.result_dtype(inputs);
  bool complex = at::isComplexType(result);
  for (const at::Tensor& t : inputs) complex = complex || at::isComplexType(t.scalar_type());
  if (complex)
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].requires_grad()) continue;
      const std::string& in = fn.spec().inputs[i];
      std::string dtypes;
      for (std::size_t j = 0; j < inputs.size(); ++j)
        dtypes += (j ? ", " : "") + fn.spec().inputs[j] + " " + torch_dtype_name(inputs[j].scalar_type());
      throw ValueError(fn.repr() + ": input '" + in + "' requires grad, but this call is complex (inputs " + dtypes +
                       ", result " + torch_dtype_name(result) +
                       "), and kjit.elementwise has gradients of real "
                       "functions only: it does not build the conjugate Wirtinger gradients PyTorch gives complex "
                       "functions. Allowed: requires_grad with real floating inputs and a real result. Pass " +
                       in +
                       ".detach() (or call it under torch.no_grad()) where no gradient is needed, or compute the "
                       "function with torch operations where the complex gradient is needed");
    }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad() || fn.derivative(i)) continue;
    const std::string& in = fn.spec().inputs[i];
    if (inputs.size() >= static_cast<std::size_t>(ElementwiseFn::kMaxInputs))
      throw ValueError(
          fn.repr() + ": input '" + in + "' requires grad, but a function of " + std::to_string(inputs.size()) +
          " inputs has no derivative kernel (it would take the gradient "
          "and every input: at most " +
          std::to_string(ElementwiseFn::kMaxInputs) + " tensors); split the function, or pass " + in + ".detach()");
    const std::string& why = fn.spec().no_grad_reasons[i];
    throw ValueError(fn.repr() + ": input '" + in +
                     "' requires grad, but kjit has no derivative of the expression "
                     "with respect to it" +
                     (why.empty() ? std::string() : " (" + why + ")") +
                     "; give one with kjit.elementwise(..., grads={'" + in + "': '<C++ expression of d/d" + in +
                     ">'}), or pass " + in + ".detach() (or call it under torch.no_grad()) if no gradient is needed");
  }
}

struct ElementwiseFunction : public torch::autograd::Function<ElementwiseFunction> {
  static constexpr const char* kName = "elementwise";
  static at::Tensor forward(AutogradContext* ctx, c10::string_view spec, at::TensorList inputs,
                            at::ArrayRef<double> scalars) {
    ctx->saved_data["spec"] = std::string(spec);
    ctx->saved_data["scalars"] = scalars.vec();
    ctx->save_for_backward(inputs.vec());
    // When this forward's kernel must compile, the derivative kernels of the inputs that want gradients
    // compile beside it (on background threads); the gradient (kjit_grad) is most often a fresh tensor of
    // the result's dtype.
    const auto predict = [&] {
      const ElementwiseFn& fn = elementwise_fn(std::string(spec));
      const at::ScalarType grad_dtype = fn.result_dtype(inputs);
      for (std::size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i].requires_grad())
          if (const ElementwiseFn* d = fn.derivative(i)) d->prepare_ahead(grad_dtype, inputs, scalars);
    };
    static const at::Tensor none;
    const CompileAheadOnMiss ahead(inputs.empty() ? none : inputs[0], predict);
    return call_below_autograd<&elementwise_cuda>(kName, spec, inputs, scalars);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const ElementwiseFn& fn = elementwise_fn(ctx->saved_data["spec"].toStringRef());
    const std::vector<double> scalars = ctx->saved_data["scalars"].toDoubleVector();
    const variable_list inputs = ctx->get_saved_variables();
    std::vector<at::Tensor> args;
    args.reserve(inputs.size() + 1);
    args.push_back(grads[0]);
    args.insert(args.end(), inputs.begin(), inputs.end());
    variable_list out;
    out.reserve(inputs.size() + 2);
    out.emplace_back();  // spec
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!ctx->needs_input_grad(i)) {  // edges are the tensor inputs alone
        out.emplace_back();
        continue;
      }
      const ElementwiseFn* d = fn.derivative(i);  // forward refused inputs without one
      at::Tensor g = op().call(d->spec_json(), args, scalars);
      g = at::sum_to(g, inputs[i].sym_sizes());
      if (g.scalar_type() != inputs[i].scalar_type()) g = g.to(inputs[i].scalar_type());
      out.push_back(std::move(g));
    }
    out.emplace_back();  // scalars
    return out;
  }
};

at::Tensor elementwise_autograd(c10::string_view spec, at::TensorList inputs, at::ArrayRef<double> scalars) {
  bool grad = false;
  if (c10::GradMode::is_enabled())
    for (const at::Tensor& t : inputs) grad = grad || t.requires_grad();
  if (!grad) return call_below_autograd<&elementwise_cuda>("elementwise", spec, inputs, scalars);
  check_differentiable(fn_of(spec), inputs);
  return ElementwiseFunction::apply(spec, inputs, scalars);
}

}  // namespace

// No direct entry: a kjit.elementwise function calls ElementwiseFn::call itself when nothing needs the
// dispatcher (python/src/ops/elementwise/binding.cpp).
KJIT_OP_KERNELS(elementwise, "elementwise(str spec, Tensor[] inputs, float[] scalars) -> Tensor", elementwise_cuda,
                elementwise_meta);
KJIT_OP_AUTOGRAD(elementwise, kjit_errors<&elementwise_autograd>)

}  // namespace kjit::ops
