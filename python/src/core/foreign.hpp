// Arrays and streams from other frameworks (CuPy, JAX, Numba, TensorFlow, ...), read through their
// protocols without torch: the CUDA Array Interface (v2, v3) and DLPack for arrays, int handles,
// `__cuda_stream__`, `.ptr`, `.cuda_stream` and `.handle` for streams. A kernel's pointer argument may
// be such an array: it passes its device pointer, its element type is checked like a tensor's, and the
// launch is ordered after the producer's work (CAI v3 `stream`; DLPack's consumer-stream contract).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "kjit/dtype.hpp"
#include "kjit/param_layout.hpp"

namespace kjit::python {

// What an array's protocol says about it (CAI is preferred when both are offered: a dict, no export).
struct ArrayInfo {
  enum class Protocol { CudaArrayInterface, DLPack };
  Protocol protocol = Protocol::CudaArrayInterface;
  int device = -1;  // CUDA ordinal; -1 for an empty CAI array with a null pointer (nothing to read)
  // CAI only (DLPack tells these when the array is exported, on the launch stream):
  void* data = nullptr;
  std::optional<DType> dtype;  // nullopt: no kjit element type (complex, big-endian...)
  std::string typestr;         // as given ("<f4")
  std::vector<long long> shape;
  std::vector<long long> strides;        // in bytes; empty when the array is C-contiguous
  std::optional<std::uintptr_t> stream;  // v3 `stream`: the producer's stream (1 legacy, 2 per-thread)
};

// Whether `o` offers __cuda_array_interface__ or __dlpack__ (two attribute lookups).
bool is_foreign_array(PyObject* o);

// Reads the protocol of `o` and its CUDA device. `what` names it in messages ("argument 'x' of
// add<float>"). Throws kjit::ValueError for an array outside CUDA memory and for a malformed interface.
ArrayInfo read_array(PyObject* o, const std::string& what);
// The same, nullopt when `o` speaks neither protocol.
std::optional<ArrayInfo> try_read_array(PyObject* o, const std::string& what);

// The dtype name of another framework's dtype, for a template type parameter: a numpy / CuPy / JAX /
// TensorFlow dtype object (its `.name`: 'float32'; it has `.itemsize` or `.as_numpy_dtype`, so that
// any object with a `.name` is not taken for one) or scalar type (np.float32, jnp.bfloat16: its
// `__name__`, numpy 1's trailing '_' dropped). nullopt for anything else: arrays, Python's own types
// (`float` is float64 to numpy but float32 to C++: refused rather than guessed).
std::optional<std::string> foreign_dtype_name(PyObject* v);

// The CUDA stream a stream object from another framework stands for: an int handle (0 and 1: the
// legacy default stream, 2: per-thread), an object with __cuda_stream__ (returns (version, handle)),
// or with an int `.cuda_stream`, `.ptr` (CuPy) or `.handle` (Numba, a ctypes pointer). nullopt for
// anything else.
std::optional<CUstream> stream_from_protocol(PyObject* v);

// The pointer arguments of one launch that are arrays from other frameworks. Collected while the
// arguments are packed, resolved once the launch stream is known; no allocation when there are none.
class ForeignArgs {
 public:
  ForeignArgs() = default;
  ForeignArgs(const ForeignArgs&) = delete;
  ForeignArgs& operator=(const ForeignArgs&) = delete;
  ~ForeignArgs();  // releases the DLPack exports (after the launch was enqueued)

  // Pointer parameter i of `L` got `v` (neither a tensor nor None). Checks its device and, for CAI,
  // its element type now; rejects (as ParamLayout::reject) what speaks neither protocol.
  void add(const ParamLayout& L, std::size_t i, PyObject* v, int device);
  bool empty() const noexcept { return items_.empty(); }
  // The first CAI v3 producer stream among them: where a launch with no other stream to use goes.
  std::optional<CUstream> producer_stream() const;
  // Writes each array's pointer into its slot: DLPack arrays are exported for `stream` (their element
  // type and device checked then), and `stream` waits for every CAI producer stream that differs.
  void pack(const ParamLayout& L, CUstream stream, ArgBuffer& buf);

 private:
  struct Item {
    std::size_t index;
    PyObject* obj;  // borrowed: the launch's argument
    ArrayInfo info;
  };
  std::vector<Item> items_;
  std::vector<void*> exports_;  // DLManagedTensor* taken from their capsules, released by the destructor
};

}  // namespace kjit::python
