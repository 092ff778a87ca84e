// Small text scanners for the engine's own formats (file names, #include lines, NVRTC log lines).
// Deliberately not std::regex: the engine is linked into the PyTorch extension, and libstdc++'s
// regex instantiations there can bind to libtorch's copies, built by another GCC (seen crashing).
#pragma once

#include <cctype>
#include <optional>
#include <string_view>

namespace kjit::text {

inline bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

inline bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

// Non-empty and only digits.
inline bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!is_digit(c)) return false;
  return true;
}

// "13", "13.0", "13.0.88": digit groups separated by single dots.
inline bool dotted_version(std::string_view s) {
  if (s.empty()) return false;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = s.find('.', start);
    if (!all_digits(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start)))
      return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// Parses a whole string of at most 9 digits.
inline std::optional<int> small_int(std::string_view s) {
  if (!all_digits(s) || s.size() > 9) return std::nullopt;
  int v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return v;
}

inline std::string_view skip_blanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

}  // namespace kjit::text
