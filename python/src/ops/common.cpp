#include "common.hpp"

#include "torch/dtypes.hpp"

#include <Python.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

#include "direct.hpp"
#include "kjit/driver_library.hpp"
#include "kjit/error.hpp"

namespace kjit::ops {
namespace {

std::string torch_name(at::ScalarType t) { return python::torch_dtype_name(t); }

}  // namespace

DType to_dtype(at::ScalarType t) {
  if (auto d = python::dtype_of(t)) return *d;
  throw TypeError("dtype " + torch_name(t) + " has no kjit element type: allowed " + python::torch_dtype_names() +
                  "; convert the tensor with .to(torch.float32) (or another allowed dtype)");
}

[[noreturn]] void fail_value(const char* op, const std::string& message) {
  throw ValueError(std::string(op) + ": " + message);
}

int device_for(const char* op, std::initializer_list<NamedTensor> tensors) {
  try {
    return device_of(tensors);
  } catch (const ValueError& e) {
    fail_value(op, e.what());
  }
}

void check_dtype(const char* op, const char* arg, const at::Tensor& t, std::initializer_list<at::ScalarType> allowed) {
  const at::ScalarType s = t.scalar_type();
  for (at::ScalarType a : allowed)
    if (a == s) return;
  std::string names;
  for (at::ScalarType a : allowed) names += (names.empty() ? "" : ", ") + torch_name(a);
  throw TypeError(std::string(op) + ": " + arg + " has dtype " + torch_name(s) + ", which is not supported; allowed: " +
                  names + "; convert it with " + arg + ".to(" + torch_name(*allowed.begin()) + ")");
}

void check_contiguous(const char* op, const char* arg, const at::Tensor& t) {
  if (t.is_contiguous()) return;
  fail_value(op, std::string(arg) + " is not contiguous (shape " + shape_str(t.sizes()) + ", strides " +
                     shape_str(t.strides()) + "): call " + arg + ".contiguous() first");
}

void check_same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref) {
  if (t.scalar_type() == ref.scalar_type()) return;
  throw TypeError(std::string(op) + ": " + arg + " has dtype " + torch_name(t.scalar_type()) + " but " + ref_arg +
                  " has dtype " + torch_name(ref.scalar_type()) + ": the dtypes must match; convert with " + arg +
                  ".to(" + ref_arg + ".dtype)");
}

void check_same_shape(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref) {
  if (t.sizes() == ref.sizes()) return;
  fail_value(op, std::string(arg) + " has shape " + shape_str(t.sizes()) + " but " + ref_arg + " has shape " +
                     shape_str(ref.sizes()) + ": the shapes must be equal (kjit ops do not broadcast)");
}

int vector_width(const Access* accesses, std::size_t n, std::int64_t divides) {
  std::size_t widest = 1;
  for (std::size_t i = 0; i < n; ++i) widest = std::max(widest, accesses[i].elem_size);
  int vec = std::max<int>(1, static_cast<int>(16 / widest));
  for (; vec > 1; vec /= 2) {
    bool ok = divides <= 0 || divides % vec == 0;
    for (std::size_t i = 0; ok && i < n; ++i)
      ok = reinterpret_cast<std::uintptr_t>(accesses[i].ptr) % (accesses[i].elem_size * vec) == 0;
    if (ok) break;
  }
  return vec;
}

int pick_vec(std::size_t elem_size, std::initializer_list<const void*> ptrs, std::int64_t divides) {
  Access a[8];
  std::size_t n = 0;
  for (const void* p : ptrs)
    if (n < 8) a[n++] = {p, elem_size};
  return vector_width(a, n, divides);
}

namespace {
constexpr int kMaxSmDevices = 64;
std::array<std::atomic<int>, kMaxSmDevices>& sm_counts() {
  static std::array<std::atomic<int>, kMaxSmDevices> counts{};
  return counts;
}
void check_sm_device(int device) {
  if (device < 0 || device >= kMaxSmDevices)
    throw ValueError("device ordinal " + std::to_string(device) + " is out of range [0, " +
                     std::to_string(kMaxSmDevices) + ")");
}
}  // namespace

void override_sm_count(int device, int count) {
  check_sm_device(device);
  if (count < 0)
    throw ValueError("a multiprocessor count must be 0 (the device's own) or more, got " + std::to_string(count));
  sm_counts()[device].store(count, std::memory_order_relaxed);
}

int sm_count(int device) {
  check_sm_device(device);
  auto& counts = sm_counts();
  int n = counts[device].load(std::memory_order_relaxed);
  if (n > 0) return n;
  const DriverLibrary& d = DriverLibrary::get();
  CUdevice dev = 0;
  d.check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  d.check(d.cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute");
  if (n < 1) n = 1;
  counts[device].store(n, std::memory_order_relaxed);
  return n;
}

Dim3 grid_1d(std::int64_t n_vec, int device, unsigned block) {
  std::int64_t blocks = std::min(cdiv(n_vec, block), max_blocks(device));
  if (blocks < 1) blocks = 1;
  Dim3 g;
  g.x = static_cast<unsigned>(blocks);
  return g;
}

namespace {
// Releases the GIL for the scope when this thread holds it (a direct entry's miss); nothing otherwise
// (torch.ops calls run without it).
class UnlessNoGil {
 public:
  UnlessNoGil() : state_(Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
  ~UnlessNoGil() {
    if (state_) PyEval_RestoreThread(state_);
  }
  UnlessNoGil(const UnlessNoGil&) = delete;
  UnlessNoGil& operator=(const UnlessNoGil&) = delete;

 private:
  PyThreadState* state_;
};
}  // namespace

namespace {
thread_local CompileAheadOnMiss* pending_ahead = nullptr;
}

CompileAheadOnMiss::CompileAheadOnMiss(const at::Tensor& x, const void* predict, void (*call)(const void*)) noexcept
    : predict_(predict), outer_(pending_ahead) {
  pending_ahead = this;
  if (plain_cuda_tensor(x) && x.numel() > 0 && !c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Python))
    call_ = call;
}

CompileAheadOnMiss::~CompileAheadOnMiss() { pending_ahead = outer_; }

void CompileAheadOnMiss::run_pending() noexcept {
  CompileAheadOnMiss* p = pending_ahead;
  if (!p || !p->call_) return;
  auto call = p->call_;
  p->call_ = nullptr;  // once, and not again from a kernel_for inside the prediction
  try {
    call(p->predict_);
  } catch (...) {
    // The backward meets whatever this was and reports it.
  }
}

std::shared_ptr<const SpecializedKernel> kernel_for(const KernelFamily& family, const TemplateArg* args, std::size_t n,
                                                    int device, const char* compile_forbidden) {
  if (auto hit = family.find(args, n, device)) return hit;
  CompileAheadOnMiss::run_pending();
  UnlessNoGil nogil;
  return family.get(args, n, device, nullptr, compile_forbidden);
}

std::shared_ptr<const SpecializedKernel> typed_kernel(const KernelFamily& family, at::ScalarType dtype, int vec,
                                                      int device, const char* compile_forbidden) {
  const TemplateArg args[2] = {TemplateArg::type(to_dtype(dtype)), TemplateArg::integer(vec)};
  return kernel_for(family, args, device, compile_forbidden);
}

std::shared_ptr<const Template> builtin_template(const char* name) { return Template::builtin(name); }

at::Tensor new_empty(c10::IntArrayRef sizes, const at::Tensor& like, std::optional<at::ScalarType> dtype) {
  return at::detail::empty_cuda(sizes, dtype.value_or(like.scalar_type()), like.device(), std::nullopt);
}

std::int64_t normalize_dim(const char* op, std::int64_t dim, std::int64_t ndim) {
  const std::int64_t rank = std::max<std::int64_t>(ndim, 1);
  if (dim < -rank || dim >= rank)
    fail_value(op, "dim " + std::to_string(dim) + " is out of range for a tensor of " + std::to_string(ndim) +
                       " dims (allowed: " + std::to_string(-rank) + " to " + std::to_string(rank - 1) + ")");
  return dim < 0 ? dim + rank : dim;
}

ElementScalar::ElementScalar(double value, at::ScalarType dtype) {
  switch (dtype) {
    case at::ScalarType::Double:
      std::memcpy(bytes_, &value, sizeof(double));
      size_ = sizeof(double);
      break;
    case at::ScalarType::Float: {
      const float f = static_cast<float>(value);
      std::memcpy(bytes_, &f, sizeof(float));
      size_ = sizeof(float);
      break;
    }
    case at::ScalarType::Half: {
      const c10::Half h(static_cast<float>(value));
      std::memcpy(bytes_, &h.x, sizeof(h.x));
      size_ = sizeof(h.x);
      break;
    }
    case at::ScalarType::BFloat16: {
      const c10::BFloat16 b(static_cast<float>(value));
      std::memcpy(bytes_, &b.x, sizeof(b.x));
      size_ = sizeof(b.x);
      break;
    }
    default:
      throw TypeError("kjit: no floating element type for dtype " + torch_name(dtype) +
                      ": allowed torch.float32, torch.float16, torch.bfloat16, torch.float64");
  }
}

}  // namespace kjit::ops
