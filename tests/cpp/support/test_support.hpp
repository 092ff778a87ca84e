// Shared helpers for the C++ test suites.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace kjit::testing {

// A fresh directory under $TMPDIR, removed (with read/write permission restored) on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "kjit-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const noexcept { return path_; }
  std::filesystem::path operator/(const std::string& p) const { return path_ / p; }

 private:
  std::filesystem::path path_;
};

std::string read_file(const std::filesystem::path& p);
void write_file(const std::filesystem::path& p, const std::string& bytes);
// How many cache entry files (*.kjit) lie below `root` (0 when it does not exist).
std::size_t entries_in(const std::filesystem::path& root);

// Sets (or with nullopt unsets) an environment variable for the scope of the object.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value);
  ~ScopedEnv();

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Repository paths.
std::filesystem::path source_dir();
std::filesystem::path templates_dir();

// True when the process can see a CUDA device through the driver (used by gpu tests to skip).
bool have_cuda_device(std::string* why_not = nullptr);

}  // namespace kjit::testing
