// The number of parameters of a kernel, read from the image kjit loads (a cubin or PTX) rather than from
// the driver. Before CUDA 13.2 the driver has no count query: probing cuKernelGetParamInfo until it fails
// counts too, but every kernel's probe then ends in CUDA_ERROR_INVALID_VALUE, which compute-sanitizer
// reports as an API error in the user's program. Kernel (module.hpp) counts here instead, then asks the
// driver for each parameter's size.
//
// A cubin (ELF) lists a kernel's parameters in its section ".nv.info.<lowered name>": a sequence of
// records, each a format byte, an attribute byte, then
//   EIFMT_NVAL (1), EIFMT_BVAL (2), EIFMT_HVAL (3): two bytes of value (4-byte records);
//   EIFMT_SVAL (4): a u16 size, then that many bytes;
// one EIATTR_KPARAM_INFO (0x17) record per parameter (EIATTR_KPARAM_INFO_V2, 0x45, for large parameter
// lists: ptxas wrote V2 from about 8000 bytes of parameters on), whose value begins u32 index, u16
// ordinal, u16 offset; and one
// EIATTR_CBANK_PARAM_SIZE (0x19, HVAL) with the bytes of all parameters when there are any. (As cuobjdump
// -elf and readelf -x show them for NVRTC's cubins of sm_80 to sm_121.) PTX declares them in the entry's
// list: `.visible .entry name(.param .u64 name_param_0, ...)`.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace kjit {

// The parameter count of kernel `lowered_name` in `image`, a cubin (ELF) or PTX text (as NVRTC makes them);
// nullopt when the image does not say for sure: another format, no such kernel, a record or a list this
// reader does not know, parameters whose ordinals are not 0..n-1 or whose offsets do not increase.
std::optional<std::size_t> image_param_count(std::string_view image, std::string_view lowered_name);

// The same for each format. Exposed for tests.
std::optional<std::size_t> cubin_param_count(std::string_view cubin, std::string_view lowered_name);
std::optional<std::size_t> ptx_param_count(std::string_view ptx, std::string_view lowered_name);

}  // namespace kjit
