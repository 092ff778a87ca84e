// Launch geometry every op uses: the one rule for the vector width (from pointer alignment), the device's
// multiprocessor count, grid-stride grids. Hot-path safe: no allocation, no driver call once a device's
// count is known.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "kjit/launch_config.hpp"
#include "kjit/target.hpp"

namespace kjit::ops {

// The one rule for the vector width of every op. An access: a pointer and its element size.
struct Access {
  const void* ptr;
  std::size_t elem_size;
};
// Elements per vector access: the largest power of two up to 16 bytes / the widest element such that
// every pointer is aligned to its elem_size * VEC bytes and `divides` (when > 0) is a multiple of VEC.
// 1 for misaligned views.
int vector_width(const Access* accesses, std::size_t n, std::int64_t divides = 0);
// The same for pointers of one element size.
int pick_vec(std::size_t elem_size, std::initializer_list<const void*> ptrs, std::int64_t divides = 0);

// Multiprocessors of a device (read from the driver once per device).
int sm_count(int device);
// Tests: from now on sm_count(device) is `count` (0: the device's own again), as on a GPU of the same
// architecture with another count (an H100 PCIe after an H100 SXM, a MIG slice). kjit._C._override_sm_count.
void override_sm_count(int device, int count);
// The architecture the op's kernels are for: the device's (read from the driver once per device), or a
// compile-only plan's (plan.hpp). Ops ask this, never kjit::device_target, so that a plan sees its target.
const Target& target_of(int device);
// The most dynamic shared memory one block may opt in to on the device (the driver's
// CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, read once per device), or, for a compile-only plan,
// on a GPU of its target's architecture (the CUDA programming guide's table by compute capability).
unsigned max_shared_optin(int device);
// Resident blocks of 256 threads a grid-stride launch fills: 8 per multiprocessor.
inline std::int64_t max_blocks(int device) { return static_cast<std::int64_t>(sm_count(device)) * 8; }

inline std::int64_t cdiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A 1-D grid-stride launch over `n_vec` work items with `block` threads per block:
// min(cdiv(n_vec, block), SMs * 8) blocks, at least one (the scalar tail needs a thread).
Dim3 grid_1d(std::int64_t n_vec, int device, unsigned block = 256);

}  // namespace kjit::ops
