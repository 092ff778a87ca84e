// ElementwiseFn: one kjit.elementwise function in C++: its generated CUDA source (one flat and six strided
// kernels around the expression, kernel_templates/elementwise.cuh) and its call: broadcasting, dtype
// promotion, the out= checks, the choice of kernel (flat with VEC-wide accesses, or strided over the
// coalesced dims), the index type, and the launch. The hot path computes a fixed-size key (dtypes, VEC,
// TAIL, index type or rank) and finds the kernel in the Engine's table; no Python, no hashing of text.
//
// A function is described by its spec, a JSON object (made by kjit/elementwise.py at definition time):
//   {"name": str, "expr": str, "inputs": [str], "scalars": [str], "specialize": [str],
//    "dtype": "float32" | ... | "complex64" | "complex128" | null, "grads": {input: derivative expression},
//    "backward": {input: the input's gradient given the incoming gradient kjit_grad (where kjit derived it)},
//    "no_grad": {input: why it has no derivative}, "defaults": {scalar: value}}
// The spec string is also the key of the registered op kjit::elementwise(str spec, Tensor[] inputs,
// float[] scalars), whose autograd runs the derivative of each input as an ElementwiseFn of its own
// (inputs kjit_grad and the function's inputs).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kjit/kernel_family.hpp"
#include "kjit/template.hpp"

namespace kjit::ops {

struct Access;  // common.hpp: a pointer and its element size, for vector_width

// Up to N template arguments of one call, in place: only the arguments pushed are constructed, so a call
// pays for the arguments it has, not for the capacity (38 for a flat kernel of 32 inputs).
template <std::size_t N>
class TemplateArgList {
  static_assert(std::is_trivially_copyable_v<TemplateArg> && std::is_trivially_destructible_v<TemplateArg>);

 public:
  void push(const TemplateArg& a) noexcept { new (buf_ + n_++ * sizeof(TemplateArg)) TemplateArg(a); }
  const TemplateArg* data() const noexcept { return std::launder(reinterpret_cast<const TemplateArg*>(buf_)); }
  std::size_t size() const noexcept { return n_; }

 private:
  alignas(TemplateArg) unsigned char buf_[N * sizeof(TemplateArg)];
  std::size_t n_ = 0;
};

struct ElementwiseSpec {
  std::string name = "elementwise";
  std::string expr;
  std::vector<std::string> inputs;
  std::vector<std::string> scalars;               // in declaration order
  std::vector<bool> specialized;                  // per scalar
  std::optional<at::ScalarType> dtype;            // the result dtype (else the promotion of the inputs')
  std::vector<std::optional<std::string>> grads;  // per input: d expr / d input, where known
  // per input: its gradient in terms of kjit_grad, the incoming gradient (where kjit derived it: PyTorch's
  // masks hold for an inf or NaN kjit_grad too); else the backward computes kjit_grad * (grads[i])
  std::vector<std::optional<std::string>> backward;
  std::vector<std::string> no_grad_reasons;              // per input: why there is no derivative ("" where there is)
  std::vector<std::pair<std::string, double>> defaults;  // default values of scalars (runtime or specialized)

  static ElementwiseSpec from_json(std::string_view json);
  std::string to_json() const;
};

class ElementwiseFn {
 public:
  static constexpr int kMaxRank = 6;  // strided kernels exist for 1..6 coalesced dims
  // A flat kernel takes 6 + inputs template arguments (TO, C, VEC, TAIL, I, kjit_cx, one type per input):
  // 38 at most, within the Engine's table key (SpecKey::kMaxArgs). A derivative takes the incoming gradient
  // and every input, so a function of up to 31 inputs has derivative kernels.
  static constexpr int kMaxInputs = 32;

  // What an expression (and a derivative's) must not hold: it is one C++ expression on one line, never a
  // statement, block, comment or preprocessor line, in any spelling (the digraphs %: and %:%: are #, ??=
  // the trigraph of #). kjit/elementwise.py checks a definition with this list, the spec parser a saved one.
  static constexpr const char* kNotAnExpression[] = {
      ";", "{", "}", "#", "//", "/*", "%:", "?\?=", "<%", "%>", "\n", "\r", "\\"};

  explicit ElementwiseFn(ElementwiseSpec spec);

  const ElementwiseSpec& spec() const noexcept { return spec_; }
  const std::string& spec_json() const noexcept { return json_; }
  // "kjit.elementwise('name': 'expr')", the prefix of every message.
  const std::string& repr() const noexcept { return repr_; }

  // The generated source for these specialized scalar values (one per specialized scalar).
  std::string source(const std::vector<double>& specialized_values) const;
  // The Template of that source (one per tuple of values, kept).
  std::shared_ptr<const Template> tmpl(const std::vector<double>& specialized_values) const;
  // The kernel family a call with a result of `out_dtype` uses (rank 0: the flat kernel; 1..kMaxRank the
  // strided ones): the template of those values with the call's compile options. Kept for the process.
  const KernelFamily& kernel_family(const std::vector<double>& specialized_values, int rank,
                                    at::ScalarType out_dtype) const;

  // The result dtype for inputs of these dtypes.
  at::ScalarType result_dtype(c10::ArrayRef<at::Tensor> inputs) const;

  // Computes the function: `scalars` holds one value per scalar, in declaration order. `out` (optional)
  // receives the result (contiguous, of the result's shape and dtype; it may be an input, element for
  // element). Checks devices, shapes and dtypes with messages prefixed by repr().
  at::Tensor call(c10::ArrayRef<at::Tensor> inputs, c10::ArrayRef<double> scalars,
                  const at::Tensor* out = nullptr) const;

  // The derivative function of input i (inputs: kjit_grad, then this function's inputs), or null when
  // the spec has no derivative for it.
  const ElementwiseFn* derivative(std::size_t i) const;

  // For a derivative (inputs kjit_grad, then the function's `inputs`): the kernel of its later call with
  // a fresh gradient of dtype `grad_dtype` and of the inputs' shape compiles ahead
  // (KernelFamily::prepare_ahead), when that call takes the flat kernel (inputs of one shape,
  // contiguous). An autograd forward asks this of each derivative it will run, before its own compile.
  void prepare_ahead(at::ScalarType grad_dtype, c10::ArrayRef<at::Tensor> inputs,
                     c10::ArrayRef<double> scalars) const noexcept;

 private:
  struct Compiled {  // one tuple of specialized values
    std::shared_ptr<const Template> tmpl;
    // [rank][fast exp]: published once (release) after construction under `mu`, read without a lock.
    mutable std::array<std::atomic<const KernelFamily*>, 2 * (kMaxRank + 1)> families{};
    mutable std::vector<std::unique_ptr<const KernelFamily>> owned;  // under mu
    mutable std::mutex mu;
  };
  const Compiled& compiled(const std::vector<double>& values) const;
  // The flat kernel's template arguments (one list for launch_flat and prepare_ahead): a result of
  // `out_dtype` and `n` elements from inputs of `in_dtypes`; accesses[0] is the result's, then one per
  // input (a null pointer: a fresh, aligned tensor).
  struct FlatPlan {
    TemplateArgList<6 + kMaxInputs> args;
    int vec;
    bool wide;
  };
  static FlatPlan flat_plan(at::ScalarType out_dtype, std::int64_t n, const Access* accesses,
                            const at::ScalarType* in_dtypes, std::size_t n_in);
  const KernelFamily& family(const Compiled& c, int rank, bool fast_exp) const;
  void check_out(const at::Tensor& out, c10::IntArrayRef shape, at::ScalarType dtype,
                 c10::ArrayRef<at::Tensor> ins) const;
  void launch_flat(c10::ArrayRef<at::Tensor> ins, const at::Tensor& out, const Compiled& c,
                   c10::ArrayRef<double> runtime) const;
  void launch_strided(c10::ArrayRef<at::Tensor> ins, const at::Tensor& out, const Compiled& c,
                      c10::ArrayRef<double> runtime) const;

  ElementwiseSpec spec_;
  std::string json_;
  std::string repr_;
  std::unique_ptr<Compiled> plain_;  // the one Compiled of a function without specialized scalars
  mutable std::mutex mu_;
  // By the bit patterns of the values (NaN, -0.0 and 0.0 are distinct values, each its own kernel).
  mutable std::map<std::vector<std::uint64_t>, std::unique_ptr<Compiled>> by_values_;
  mutable std::vector<const ElementwiseFn*> derivatives_;  // from elementwise_fn(), made on first use under mu_
};

// The function of a spec, made on first sight and kept for the process (the registered op's lookup). Specs
// that differ only in their JSON spelling are one function (looked up by the canonical spec_json()).
const ElementwiseFn& elementwise_fn(const std::string& spec_json);

// Python's float.hex() of v ("0x1.8000000000000p+1"), or a C++ expression for NaN and infinities.
std::string cpp_float(double v);

}  // namespace kjit::ops
