// DynamicLibrary: RAII over dlopen/dlsym. libcuda and libnvrtc are only ever loaded through it,
// on first use, so that everything but launching works without a GPU or driver.
#pragma once

#include <filesystem>
#include <string>

namespace kjit {

class DynamicLibrary {
 public:
  DynamicLibrary() = default;
  // Opens `name_or_path` (RTLD_NOW | RTLD_LOCAL). Throws kjit::Error with dlerror() on failure.
  explicit DynamicLibrary(const std::string& name_or_path);
  ~DynamicLibrary();
  DynamicLibrary(DynamicLibrary&& o) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& o) noexcept;
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  // Opens the library, or returns an empty object and sets `error`.
  static DynamicLibrary try_open(const std::string& name_or_path, std::string* error);

  bool loaded() const noexcept { return handle_ != nullptr; }
  // Returns the symbol or nullptr.
  void* find(const char* symbol) const noexcept;
  // Returns the symbol or throws kjit::Error naming the library and symbol.
  void* require(const char* symbol) const;
  // The file the loader actually mapped.
  std::filesystem::path path() const;

 private:
  void* handle_ = nullptr;
  std::string name_;
};

// True when a shared object whose file name starts with `prefix` is mapped into this process
// (reads /proc/self/maps; used to prove strict mode never loads NVRTC).
bool library_is_mapped(const std::string& prefix);

}  // namespace kjit
