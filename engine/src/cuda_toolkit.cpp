#include "kjit/cuda_toolkit.hpp"

#include <algorithm>
#include <fstream>
#include <mutex>
#include <optional>
#include <string_view>

#include "kjit/elf_build_id.hpp"
#include "kjit/error.hpp"
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
std::vector<LibraryFolder>& registered_cutlass() {
  static auto* r = new std::vector<LibraryFolder>;
  return *r;
}
bool& discovered() {
  static bool d = false;
  return d;
}

// The integer a header defines for `name` ("#define NAME 3000001 // ..."), if it defines one. Version
// headers are small; a missing or unreadable file is nothing.
std::optional<long long> defined_number(const fs::path& header, std::string_view name) {
  std::ifstream in(header);
  std::string line;
  while (std::getline(in, line)) {
    std::string_view rest = text::skip_blanks(line);
    if (!text::starts_with(rest, "#")) continue;
    rest = text::skip_blanks(rest.substr(1));
    if (!text::starts_with(rest, "define")) continue;
    rest = rest.substr(6);
    if (rest.empty() || (rest.front() != ' ' && rest.front() != '\t')) continue;
    rest = text::skip_blanks(rest);
    if (!text::starts_with(rest, name)) continue;
    rest = rest.substr(name.size());
    if (rest.empty() || (rest.front() != ' ' && rest.front() != '\t')) continue;
    rest = text::skip_blanks(rest);
    std::size_t n = 0;
    while (n < rest.size() && n < 18 && text::is_digit(rest[n])) ++n;
    if (n == 0 || (n < rest.size() && text::is_digit(rest[n]))) return std::nullopt;
    long long v = 0;
    for (std::size_t i = 0; i < n; ++i) v = v * 10 + (rest[i] - '0');
    return v;
  }
  return std::nullopt;
}

std::string dotted(long long major, long long minor, long long patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// CCCL in a toolkit root: <root>/include/cccl (CUDA 13, pip nvidia-cuda-cccl) or <root>/include (CUDA 12,
// pip nvidia-cuda-cccl-cu12).
std::optional<HeaderLibrary> cccl_in_root(const fs::path& root) {
  for (const fs::path& dir : {root / "include" / "cccl", root / "include"}) {
    if (auto lib = cccl_in(dir)) {
      lib->from = root.string();
      return lib;
    }
  }
  return std::nullopt;
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

std::optional<HeaderLibrary> cccl_in(const fs::path& include_dir) {
  const fs::path cccl_h = include_dir / "cuda" / "std" / "__cccl" / "version.h";  // CCCL 2.3 and later
  const fs::path cub_h = include_dir / "cub" / "version.cuh";                     // every CUB
  if (!is_file(cccl_h) && !is_file(cub_h)) return std::nullopt;
  HeaderLibrary lib;
  lib.include_dir = include_dir;
  lib.version = "unknown";
  if (auto v = defined_number(cccl_h, "CCCL_VERSION")) {  // MMMmmmppp
    lib.version = dotted(*v / 1000000, *v / 1000 % 1000, *v % 1000);
  } else if (auto c = defined_number(cub_h, "CUB_VERSION")) {  // MMMmmmpp
    lib.version = dotted(*c / 100000, *c / 100 % 1000, *c % 100);
  }
  return lib;
}

std::optional<HeaderLibrary> cutlass_in(const fs::path& include_dir) {
  const fs::path version_h = include_dir / "cutlass" / "version.h";
  std::error_code ec;
  if (!is_file(version_h) || !fs::is_directory(include_dir / "cute", ec)) return std::nullopt;
  HeaderLibrary lib;
  lib.include_dir = include_dir;
  lib.version = "unknown";
  auto major = defined_number(version_h, "CUTLASS_MAJOR");
  auto minor = defined_number(version_h, "CUTLASS_MINOR");
  auto patch = defined_number(version_h, "CUTLASS_PATCH");
  if (major && minor && patch) lib.version = dotted(*major, *minor, *patch);
  return lib;
}

std::string CudaToolkit::nvrtc_identity() const {
  if (!has_nvrtc()) return "none";
  return nvrtc_version + " build-id " + (nvrtc_build_id.empty() ? "unknown" : nvrtc_build_id);
}

CudaToolkit discover_cuda_toolkit(const std::vector<fs::path>& roots, const fs::path& explicit_nvrtc,
                                  const std::vector<LibraryFolder>& cutlass_dirs) {
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
      tk.headers_from = root.string();
      if (auto lib = cccl_in_root(root)) tk.cccl = *lib;  // the toolkit's own CCCL wins
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
  // CCCL: the headers' root had none (or there are no headers): the first root, in search order, that has it.
  for (const auto& root : roots) {
    if (tk.cccl.found()) break;
    if (!root.empty())
      if (auto lib = cccl_in_root(root)) tk.cccl = *lib;
  }
  if (tk.cccl.found() &&
      std::find(tk.include_dirs.begin(), tk.include_dirs.end(), tk.cccl.include_dir) == tk.include_dirs.end())
    tk.include_dirs.push_back(tk.cccl.include_dir);
  // CUTLASS: registered folders, last; the first one is the one a kernel gets.
  for (const auto& folder : cutlass_dirs) {
    auto lib = cutlass_in(folder.include_dir);
    if (!lib) continue;  // register_cutlass_dir checked it; a folder gone since is skipped
    if (!tk.cutlass.found()) {
      tk.cutlass = *lib;
      tk.cutlass.from = folder.from;
    }
    if (std::find(tk.include_dirs.begin(), tk.include_dirs.end(), folder.include_dir) == tk.include_dirs.end())
      tk.include_dirs.push_back(folder.include_dir);
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

bool register_cutlass_dir(const fs::path& include_dir, const std::string& from) {
  if (!cutlass_in(include_dir))
    throw ValueError("register_cutlass_dir: " + include_dir.string() +
                     " does not hold CUTLASS (expected cutlass/version.h and cute/ in it); pass CUTLASS's "
                     "include/ folder, e.g. <site-packages>/cutlass_library/source/include of pip's nvidia-cutlass");
  std::lock_guard<std::mutex> lock(mu());
  if (discovered()) return false;
  registered_cutlass().push_back({include_dir, from});
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
    tk = discover_cuda_toolkit(roots, s.nvrtc_library.value_or(fs::path{}), registered_cutlass());
    discovered() = true;
  }
  return tk;
}

}  // namespace kjit
