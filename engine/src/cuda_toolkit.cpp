#include "kjit/cuda_toolkit.hpp"

#include <algorithm>
#include <mutex>
#include <optional>
#include <string_view>

#include "kjit/elf_build_id.hpp"
#include "kjit/settings.hpp"
#include "text_scan.hpp"

#ifndef KJIT_BUILD_CUDA_HOME
#define KJIT_BUILD_CUDA_HOME ""
#endif

namespace kjit {
namespace fs = std::filesystem;

namespace {

std::mutex& mu() {
  static std::mutex m;
  return m;
}
std::vector<fs::path>& registered() {
  static auto* r = new std::vector<fs::path>;  // never destroyed, as the toolkit below
  return *r;
}
bool& discovered() {
  static bool d = false;
  return d;
}

// libnvrtc.so.<major>[.<minor>...] in `dir`, the highest major first; skips the .alt variant.
std::optional<fs::path> find_nvrtc_in(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  std::optional<fs::path> best;
  int best_major = -1;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string_view prefix = "libnvrtc.so.";
    if (!text::starts_with(name, prefix) || !text::dotted_version(std::string_view(name).substr(prefix.size())))
      continue;
    std::string_view version = std::string_view(name).substr(prefix.size());
    auto major_text = version.substr(0, version.find('.'));
    if (major_text.size() > 9) continue;
    int major = *text::small_int(major_text);
    if (major > best_major) {
      best_major = major;
      best = e.path();
    }
  }
  if (!best) {
    fs::path plain = dir / "libnvrtc.so";
    if (fs::exists(plain, ec)) best = plain;
  }
  return best;
}

// "13.0" from libnvrtc-builtins.so.13.0 beside the library, else the major from the file name.
std::string nvrtc_version_near(const fs::path& lib) {
  std::error_code ec;
  const std::string_view builtins = "libnvrtc-builtins.so.";
  for (const auto& e : fs::directory_iterator(lib.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (!text::starts_with(name, builtins)) continue;
    std::string_view v = std::string_view(name).substr(builtins.size());
    if (text::dotted_version(v) && std::count(v.begin(), v.end(), '.') == 1) return std::string(v);
  }
  fs::path real = fs::weakly_canonical(lib, ec);
  const std::string name = real.filename().string();
  const std::string_view soname = "libnvrtc.so.";
  if (text::starts_with(name, soname) && text::dotted_version(std::string_view(name).substr(soname.size())))
    return name.substr(soname.size());
  return "unknown";
}

}  // namespace

std::string CudaToolkit::nvrtc_identity() const {
  if (!has_nvrtc()) return "none";
  return nvrtc_version + " build-id " + (nvrtc_build_id.empty() ? "unknown" : nvrtc_build_id);
}

CudaToolkit discover_cuda_toolkit(const std::vector<fs::path>& roots, const fs::path& explicit_nvrtc) {
  CudaToolkit tk;
  std::error_code ec;
  if (!explicit_nvrtc.empty()) {
    tk.searched.push_back("KJIT_NVRTC_LIBRARY=" + explicit_nvrtc.string());
    if (fs::is_regular_file(explicit_nvrtc, ec)) {
      tk.nvrtc_library = explicit_nvrtc;
      tk.nvrtc_from = "KJIT_NVRTC_LIBRARY";
    }
  }
  for (const auto& root : roots) {
    if (root.empty()) continue;
    tk.searched.push_back(root.string());
    if (!tk.has_headers() && fs::is_regular_file(root / "include" / "cuda_fp16.h", ec)) {
      tk.include_dirs.push_back(root / "include");
      if (fs::is_directory(root / "include" / "cccl", ec)) tk.include_dirs.push_back(root / "include" / "cccl");
      tk.headers_from = root.string();
    }
    if (!tk.has_nvrtc()) {
      for (const char* sub : {"lib64", "lib", "lib/x86_64-linux-gnu", "targets/x86_64-linux/lib"}) {
        if (auto lib = find_nvrtc_in(root / sub)) {
          tk.nvrtc_library = *lib;
          tk.nvrtc_from = root.string();
          break;
        }
      }
    }
  }
  if (tk.has_nvrtc()) {
    tk.nvrtc_version = nvrtc_version_near(tk.nvrtc_library);
    fs::path real = fs::weakly_canonical(tk.nvrtc_library, ec);
    tk.nvrtc_build_id = elf_build_id(ec ? tk.nvrtc_library : real);
  }
  return tk;
}

bool register_toolkit_root(const fs::path& root) {
  std::lock_guard<std::mutex> lock(mu());
  if (discovered()) return false;
  registered().push_back(root);
  return true;
}

const CudaToolkit& cuda_toolkit() {
  // Never destroyed: a background thread (the compiler preload) may read it while the process's static
  // objects are destroyed at exit.
  static CudaToolkit& tk = *new CudaToolkit;
  std::lock_guard<std::mutex> lock(mu());
  if (!discovered()) {
    const Settings& s = settings();
    std::vector<fs::path> roots;
    if (s.cuda_home) roots.push_back(*s.cuda_home);
    roots.emplace_back("/usr/local/cuda");
    roots.emplace_back(KJIT_BUILD_CUDA_HOME);
    // Registered roots (the pip `nvidia` packages) come last, so that the C++ CLI and Python pick the
    // same toolkit (and so the same cache keys) wherever a system toolkit exists.
    for (const auto& r : registered()) roots.push_back(r);
    tk = discover_cuda_toolkit(roots, s.nvrtc_library.value_or(fs::path{}));
    discovered() = true;
  }
  return tk;
}

}  // namespace kjit
