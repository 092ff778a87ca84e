// CudaToolkit: where the CUDA headers and libnvrtc are, found without loading anything.
// Searched in order: KJIT_NVRTC_LIBRARY (library only), KJIT_CUDA_HOME / CUDA_HOME / CUDA_PATH,
// /usr/local/cuda, the toolkit kjit was built with, and roots registered at run time (the Python
// package registers the pip `nvidia` packages).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kjit {

struct CudaToolkit {
  std::vector<std::filesystem::path> include_dirs;  // holds cuda_fp16.h (and cccl/ when present)
  std::string headers_from;                          // which root gave the headers
  std::filesystem::path nvrtc_library;               // the libnvrtc file that will be loaded
  std::string nvrtc_from;                            // which root / variable gave it
  std::string nvrtc_version;                         // "13.0" (from the file names)
  std::string nvrtc_build_id;                        // GNU build ID of the library file
  std::vector<std::string> searched;                 // every place looked at, for error messages

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

// Discovery from explicit candidates (tests).
CudaToolkit discover_cuda_toolkit(const std::vector<std::filesystem::path>& roots,
                                  const std::filesystem::path& explicit_nvrtc = {});

}  // namespace kjit
