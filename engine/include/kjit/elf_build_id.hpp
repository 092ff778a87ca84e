// Reads the GNU build ID of an ELF shared object from its file, without loading it. It identifies
// the exact NVRTC build in cache keys, also in strict mode where NVRTC is never loaded.
#pragma once

#include <filesystem>
#include <string>

namespace kjit {

// Lowercase hex build ID, or "" when the file is not a 64-bit ELF or carries none.
std::string elf_build_id(const std::filesystem::path& file);

}  // namespace kjit
