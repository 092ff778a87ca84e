// CudaToolkit: where the CUDA headers and libnvrtc are, found without loading anything.
// Searched in order: KJIT_NVRTC_LIBRARY (library only), KJIT_CUDA_HOME / CUDA_HOME / CUDA_PATH,
// /usr/local/cuda, the toolkit kjit was built with, and roots registered at run time (the Python
// package registers the pip `nvidia` packages).
//
// Header libraries (docs/header-libraries.md):
// - CCCL (CUB, thrust, libcu++): from the root that gave cuda_fp16.h when it has CCCL (CUDA 13:
//   <root>/include/cccl, CUDA 12: cub/ thrust/ cuda/ directly in <root>/include); else from the first
//   other root, in the same order, that has it (the pip `nvidia-cuda-cccl-cu12` root holds only CCCL),
//   its folder appended after the toolkit's include/. The toolkit's include/ always stays first.
// - CUTLASS / CuTe: folders registered at run time (the Python package registers pip's
//   `nvidia-cutlass`), appended last. A user's own CUTLASS goes into include_dirs / KJIT_INCLUDE_PATH,
//   which the header resolver searches before these folders.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kjit {

// A header-only library found with the toolkit (CCCL, CUTLASS).
struct HeaderLibrary {
  std::filesystem::path include_dir;  // the folder a kernel's #include <cub/cub.cuh> / <cute/tensor.hpp> is under
  std::string version;                // "3.0.1", from the library's version header; "unknown" when unreadable
  std::string from;                   // which root or registration gave it

  bool found() const { return !include_dir.empty(); }
};

// A folder registered to give a header library, and who registered it ("pip nvidia-cutlass").
struct LibraryFolder {
  std::filesystem::path include_dir;
  std::string from;
};

struct CudaToolkit {
  // cuda_fp16.h's folder first, then CCCL's folder when it is another one, then registered CUTLASS folders.
  std::vector<std::filesystem::path> include_dirs;
  std::string headers_from;             // which root gave the headers
  std::filesystem::path nvrtc_library;  // the libnvrtc file that will be loaded
  std::string nvrtc_from;               // which root / variable gave it
  std::string nvrtc_version;            // "13.0" (from the file names)
  std::string nvrtc_build_id;           // GNU build ID of the library file
  std::vector<std::string> searched;    // every place looked at, for error messages
  HeaderLibrary cccl;                   // CUB / thrust / libcu++
  HeaderLibrary cutlass;                // CUTLASS and CuTe (the first registered folder)

  bool has_headers() const { return !include_dirs.empty(); }
  bool has_nvrtc() const { return !nvrtc_library.empty(); }
  // The NVRTC identity hashed into cache keys: version and exact build.
  std::string nvrtc_identity() const;
};

// Discovered once per process (after the first call, registered roots are ignored).
const CudaToolkit& cuda_toolkit();

// Adds a candidate root (with include/ and lib/ or lib64/) searched after the others.
// Must be called before the first cuda_toolkit(); returns false if discovery already happened.
bool register_toolkit_root(const std::filesystem::path& root);

// Adds a CUTLASS include folder (holding cutlass/version.h and cute/), appended last to include_dirs.
// Must be called before the first cuda_toolkit(); returns false if discovery already happened.
// Throws ValueError when the folder does not hold CUTLASS (the message names what was looked for).
bool register_cutlass_dir(const std::filesystem::path& include_dir, const std::string& from = "registered");

// Discovery from explicit candidates (tests). A cutlass_dirs folder without CUTLASS is skipped.
CudaToolkit discover_cuda_toolkit(const std::vector<std::filesystem::path>& roots,
                                  const std::filesystem::path& explicit_nvrtc = {},
                                  const std::vector<LibraryFolder>& cutlass_dirs = {});

// The CCCL in `include_dir` (cub/version.cuh or cuda/std/__cccl/version.h), or nothing.
std::optional<HeaderLibrary> cccl_in(const std::filesystem::path& include_dir);
// The CUTLASS in `include_dir` (cutlass/version.h and cute/), or nothing.
std::optional<HeaderLibrary> cutlass_in(const std::filesystem::path& include_dir);

}  // namespace kjit
