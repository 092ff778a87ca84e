#include "kjit/elf_build_id.hpp"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <vector>

namespace kjit {

std::string elf_build_id(const std::filesystem::path& file) {
  std::ifstream f(file, std::ios::binary);
  if (!f) return "";
  Elf64_Ehdr eh{};
  if (!f.read(reinterpret_cast<char*>(&eh), sizeof eh)) return "";
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) return "";
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > 4096) return "";
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  f.seekg(static_cast<std::streamoff>(eh.e_phoff));
  if (!f.read(reinterpret_cast<char*>(ph.data()), static_cast<std::streamsize>(ph.size() * sizeof(Elf64_Phdr))))
    return "";
  for (const auto& p : ph) {
    if (p.p_type != PT_NOTE || p.p_filesz == 0 || p.p_filesz > (1u << 20)) continue;
    std::vector<unsigned char> notes(p.p_filesz);
    f.clear();
    f.seekg(static_cast<std::streamoff>(p.p_offset));
    if (!f.read(reinterpret_cast<char*>(notes.data()), static_cast<std::streamsize>(notes.size()))) continue;
    std::size_t off = 0;
    auto align4 = [](std::size_t n) { return (n + 3) & ~std::size_t{3}; };
    while (off + sizeof(Elf64_Nhdr) <= notes.size()) {
      Elf64_Nhdr nh;
      std::memcpy(&nh, notes.data() + off, sizeof nh);
      std::size_t name_at = off + sizeof nh;
      std::size_t desc_at = name_at + align4(nh.n_namesz);
      std::size_t next = desc_at + align4(nh.n_descsz);
      if (next > notes.size() || desc_at > notes.size()) break;
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && std::memcmp(notes.data() + name_at, "GNU", 4) == 0) {
        static const char* hex = "0123456789abcdef";
        std::string out;
        for (std::size_t i = 0; i < nh.n_descsz; ++i) {
          out += hex[notes[desc_at + i] >> 4];
          out += hex[notes[desc_at + i] & 15];
        }
        return out;
      }
      off = next;
    }
  }
  return "";
}

}  // namespace kjit
