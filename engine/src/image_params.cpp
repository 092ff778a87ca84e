#include "kjit/image_params.hpp"

#include <elf.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kjit {
namespace {

// Little-endian reads at any alignment (cubins are little-endian ELF64; so are the hosts kjit runs on).
template <class T>
T read_at(std::string_view bytes, std::size_t at) {
  T v{};
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

// The bytes of the section named `name`, or nullopt (not an ELF64 little-endian file, a header that
// points outside the image, or no such section).
std::optional<std::string_view> elf_section(std::string_view elf, std::string_view name) {
  if (elf.size() < sizeof(Elf64_Ehdr) || std::memcmp(elf.data(), ELFMAG, SELFMAG) != 0) return std::nullopt;
  const auto eh = read_at<Elf64_Ehdr>(elf, 0);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) return std::nullopt;
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 || eh.e_shstrndx >= eh.e_shnum) return std::nullopt;
  if (eh.e_shoff > elf.size() || (elf.size() - eh.e_shoff) / sizeof(Elf64_Shdr) < eh.e_shnum) return std::nullopt;
  auto header = [&](std::size_t i) { return read_at<Elf64_Shdr>(elf, eh.e_shoff + i * sizeof(Elf64_Shdr)); };
  auto contents = [&](const Elf64_Shdr& sh) -> std::optional<std::string_view> {
    if (sh.sh_type == SHT_NOBITS || sh.sh_offset > elf.size() || sh.sh_size > elf.size() - sh.sh_offset)
      return std::nullopt;
    return elf.substr(sh.sh_offset, sh.sh_size);
  };
  const std::optional<std::string_view> names = contents(header(eh.e_shstrndx));
  if (!names) return std::nullopt;
  for (std::size_t i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr sh = header(i);
    if (sh.sh_name >= names->size()) continue;
    const std::string_view rest = names->substr(sh.sh_name);
    const std::size_t end = rest.find('\0');
    if (end != std::string_view::npos && rest.substr(0, end) == name) return contents(sh);
  }
  return std::nullopt;
}

constexpr unsigned char kFormatNval = 1, kFormatBval = 2, kFormatHval = 3, kFormatSval = 4;
constexpr unsigned char kAttrParamCbank = 0x0a, kAttrKparamInfo = 0x17, kAttrCbankParamSize = 0x19,
                        kAttrKparamInfoV2 = 0x45;

struct ParamRecord {
  std::uint16_t ordinal = 0;
  std::uint16_t offset = 0;
};

}  // namespace

std::optional<std::size_t> cubin_param_count(std::string_view cubin, std::string_view lowered_name) {
  const std::optional<std::string_view> info = elf_section(cubin, ".nv.info." + std::string(lowered_name));
  if (!info) return std::nullopt;
  std::vector<ParamRecord> params;
  std::optional<std::uint16_t> param_bytes;  // EIATTR_CBANK_PARAM_SIZE
  bool param_cbank = false;                  // EIATTR_PARAM_CBANK: where the parameters are (none without any)
  std::size_t at = 0;
  while (at < info->size()) {
    if (info->size() - at < 4) return std::nullopt;
    const auto format = static_cast<unsigned char>((*info)[at]);
    const auto attr = static_cast<unsigned char>((*info)[at + 1]);
    const auto value16 = read_at<std::uint16_t>(*info, at + 2);
    if (format == kFormatNval || format == kFormatBval || format == kFormatHval) {
      if (attr == kAttrCbankParamSize && format == kFormatHval) param_bytes = value16;
      at += 4;
      continue;
    }
    if (format != kFormatSval || info->size() - at - 4 < value16) return std::nullopt;
    if (attr == kAttrParamCbank) param_cbank = true;
    if (attr == kAttrKparamInfo || attr == kAttrKparamInfoV2) {
      if (value16 < 8) return std::nullopt;  // u32 index, u16 ordinal, u16 offset, ...
      params.push_back({read_at<std::uint16_t>(*info, at + 8), read_at<std::uint16_t>(*info, at + 10)});
    }
    at += 4 + value16;
  }
  if (params.empty()) {
    // A kernel without parameters has no parameter space; one that has some but no record this reader
    // knows (a new attribute) is not known to have none.
    if ((param_bytes && *param_bytes != 0) || param_cbank) return std::nullopt;
    return 0;
  }
  // The records come in any order (ptxas writes the last parameter first): each ordinal 0..n-1 once,
  // at increasing offsets inside the parameter space.
  std::vector<const ParamRecord*> by_ordinal(params.size(), nullptr);
  for (const ParamRecord& p : params) {
    if (p.ordinal >= by_ordinal.size() || by_ordinal[p.ordinal]) return std::nullopt;
    by_ordinal[p.ordinal] = &p;
  }
  for (std::size_t i = 1; i < by_ordinal.size(); ++i)
    if (by_ordinal[i]->offset <= by_ordinal[i - 1]->offset) return std::nullopt;
  if (!param_bytes || by_ordinal.back()->offset >= *param_bytes) return std::nullopt;
  return params.size();
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
         c == '%' || c == '.';
}

// Skips white space and comments (// to the end of the line, /* ... */) from `at`.
std::size_t skip_blank(std::string_view s, std::size_t at) {
  while (at < s.size()) {
    if (is_space(s[at])) {
      ++at;
    } else if (s.compare(at, 2, "//") == 0) {
      const std::size_t eol = s.find('\n', at);
      at = eol == std::string_view::npos ? s.size() : eol + 1;
    } else if (s.compare(at, 2, "/*") == 0) {
      const std::size_t end = s.find("*/", at + 2);
      if (end == std::string_view::npos) return s.size();
      at = end + 2;
    } else {
      break;
    }
  }
  return at;
}

}  // namespace

std::optional<std::size_t> ptx_param_count(std::string_view ptx, std::string_view lowered_name) {
  if (lowered_name.empty()) return std::nullopt;
  // Each `.entry` directive (at the start of a token), then its name: the one whose name is lowered_name.
  constexpr std::string_view kEntry = ".entry";
  for (std::size_t at = ptx.find(kEntry); at != std::string_view::npos; at = ptx.find(kEntry, at + 1)) {
    if (at > 0 && !is_space(ptx[at - 1])) continue;
    std::size_t name_at = at + kEntry.size();
    if (name_at >= ptx.size() || !is_space(ptx[name_at])) continue;
    name_at = skip_blank(ptx, name_at);
    std::size_t name_end = name_at;
    while (name_end < ptx.size() && is_name_char(ptx[name_end])) ++name_end;
    if (ptx.substr(name_at, name_end - name_at) != lowered_name) continue;
    std::size_t p = skip_blank(ptx, name_end);
    if (p >= ptx.size() || ptx[p] != '(') return 0;  // `.entry name {` or directives: no parameter list
    // The list: `.param` declarations separated by commas (none of which holds a comma or a parenthesis).
    std::size_t count = 0;
    p = skip_blank(ptx, p + 1);
    if (p < ptx.size() && ptx[p] == ')') return 0;
    while (p < ptx.size()) {
      if (ptx.compare(p, 6, ".param") != 0 || p + 6 >= ptx.size() || !is_space(ptx[p + 6])) return std::nullopt;
      ++count;
      while (p < ptx.size() && ptx[p] != ',' && ptx[p] != ')' && ptx[p] != '(') {
        if (ptx.compare(p, 2, "//") == 0 || ptx.compare(p, 2, "/*") == 0)
          p = skip_blank(ptx, p);
        else
          ++p;
      }
      if (p >= ptx.size() || ptx[p] == '(') return std::nullopt;
      if (ptx[p] == ')') return count;
      p = skip_blank(ptx, p + 1);
    }
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::size_t> image_param_count(std::string_view image, std::string_view lowered_name) {
  if (image.size() >= SELFMAG && std::memcmp(image.data(), ELFMAG, SELFMAG) == 0)
    return cubin_param_count(image, lowered_name);
  return ptx_param_count(image, lowered_name);
}

}  // namespace kjit
