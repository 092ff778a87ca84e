// torch dtypes <-> kjit DTypes: the one mapping the binding and the ops share.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "kjit/dtype.hpp"

namespace kjit::python {

// The kjit element type of a torch dtype, or nullopt for one kjit cannot specialize on (complex, fp8...).
inline std::optional<DType> dtype_of(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return DType::Float32;
    case c10::ScalarType::Double: return DType::Float64;
    case c10::ScalarType::Half: return DType::Float16;
    case c10::ScalarType::BFloat16: return DType::BFloat16;
    case c10::ScalarType::Char: return DType::Int8;
    case c10::ScalarType::Short: return DType::Int16;
    case c10::ScalarType::Int: return DType::Int32;
    case c10::ScalarType::Long: return DType::Int64;
    case c10::ScalarType::Byte: return DType::UInt8;
    case c10::ScalarType::UInt16: return DType::UInt16;
    case c10::ScalarType::UInt32: return DType::UInt32;
    case c10::ScalarType::UInt64: return DType::UInt64;
    case c10::ScalarType::Bool: return DType::Bool;
    default: return std::nullopt;
  }
}

// A dtype as PyTorch users write it, for every message: "torch.float32", "torch.complex64" (never c10's
// C++ names "Float", "ComplexFloat").
inline std::string torch_dtype_name(c10::ScalarType t) {
  return "torch." + std::string(c10::getDtypeNames(t).first);  // std::string up to torch 2.14, string_view after
}

// The torch dtypes kjit can specialize a template on, as torch_dtype_name writes them, comma-separated.
inline std::string torch_dtype_names() {
  std::string out;
  for (c10::ScalarType t : {c10::ScalarType::Float, c10::ScalarType::Double, c10::ScalarType::Half,
                            c10::ScalarType::BFloat16, c10::ScalarType::Char, c10::ScalarType::Short,
                            c10::ScalarType::Int, c10::ScalarType::Long, c10::ScalarType::Byte, c10::ScalarType::UInt16,
                            c10::ScalarType::UInt32, c10::ScalarType::UInt64, c10::ScalarType::Bool})
    out += (out.empty() ? "" : ", ") + torch_dtype_name(t);
  return out;
}

}  // namespace kjit::python
