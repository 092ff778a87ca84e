#include "kjit/dynamic_library.hpp"

#include <dlfcn.h>
#include <link.h>

#include <fstream>
#include <string>

#include "kjit/error.hpp"

namespace kjit {

DynamicLibrary::DynamicLibrary(const std::string& name_or_path) : name_(name_or_path) {
  ::dlerror();
  handle_ = ::dlopen(name_or_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* e = ::dlerror();
    throw Error("cannot load " + name_or_path + ": " + (e ? e : "unknown dlopen error"));
  }
}

DynamicLibrary DynamicLibrary::try_open(const std::string& name_or_path, std::string* error) {
  try {
    return DynamicLibrary(name_or_path);
  } catch (const Error& e) {
    if (error) *error = e.what();
    return DynamicLibrary();
  }
}

DynamicLibrary::~DynamicLibrary() {
  // Deliberately not dlclose'd: CUDA libraries register atexit handlers and keep threads; unloading
  // them while handles may still exist is a well-known source of crashes at exit.
}

DynamicLibrary::DynamicLibrary(DynamicLibrary&& o) noexcept : handle_(o.handle_), name_(std::move(o.name_)) {
  o.handle_ = nullptr;
}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& o) noexcept {
  handle_ = o.handle_;
  name_ = std::move(o.name_);
  o.handle_ = nullptr;
  return *this;
}

void* DynamicLibrary::find(const char* symbol) const noexcept { return handle_ ? ::dlsym(handle_, symbol) : nullptr; }

void* DynamicLibrary::require(const char* symbol) const {
  void* p = find(symbol);
  if (!p)
    throw Error(std::string("symbol ") + symbol + " not found in " + name_ +
                "; the library is older than kjit needs (CUDA 12.4 or newer)");
  return p;
}

std::filesystem::path DynamicLibrary::path() const {
  if (!handle_) return {};
  struct link_map* map = nullptr;
  if (::dlinfo(handle_, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) return map->l_name;
  return name_;
}

bool library_is_mapped(const std::string& prefix) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    auto slash = line.rfind('/');
    if (slash == std::string::npos) continue;
    if (line.compare(slash + 1, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

}  // namespace kjit
