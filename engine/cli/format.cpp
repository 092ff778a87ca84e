#include "format.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>

#include "kjit/error.hpp"

namespace kjit::cli {

namespace {

void escape_byte(std::string& out, unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", b);
  out += buf;
}

void escape_code_point(std::string& out, char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
  out += buf;
}

// The length of the well-formed UTF-8 sequence of two to four bytes that starts at s[i] (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), and its code point; 0 when there is none.
std::size_t utf8_sequence(std::string_view s, std::size_t i, char32_t* cp) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char b0 = byte(0);
  std::size_t n;
  char32_t min, value;
  if (b0 >= 0xc2 && b0 <= 0xdf)
    n = 2, min = 0x80, value = b0 & 0x1f;
  else if (b0 >= 0xe0 && b0 <= 0xef)
    n = 3, min = 0x800, value = b0 & 0x0f;
  else if (b0 >= 0xf0 && b0 <= 0xf4)
    n = 4, min = 0x10000, value = b0 & 0x07;
  else
    return 0;
  if (s.size() - i < n) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(k) & 0xc0) != 0x80) return 0;
    value = (value << 6) | (byte(k) & 0x3f);
  }
  if (value < min || value > 0x10ffff || (value >= 0xd800 && value <= 0xdfff)) return 0;
  *cp = value;
  return n;
}

// Code points a terminal acts on or that reorder what is shown: C1 controls (U+009B is CSI, as ESC [
// is) and the bidirectional embeddings, overrides and isolates ("Trojan source").
bool is_hidden_control(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string printable(std::string_view text, Newlines newlines) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      const bool layout = b == '\n' || b == '\t';
      const bool kept = (b >= 0x20 && b != 0x7f) || (layout && newlines == Newlines::Keep);
      if (kept)
        out += static_cast<char>(b);
      else if (layout)
        out += b == '\n' ? "\\n" : "\\t";
      else
        escape_byte(out, b);
      ++i;
      continue;
    }
    char32_t cp = 0;
    const std::size_t n = utf8_sequence(text, i, &cp);
    if (n == 0) {
      escape_byte(out, b);  // not UTF-8: this byte alone, then resynchronise on the next
      ++i;
    } else {
      if (is_hidden_control(cp))
        escape_code_point(out, cp);
      else
        out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string human_bytes(std::uint64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[unit]);
  return buf;
}

std::string count_of(std::uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string human_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", ms);
  return buf;
}

Table::Table(std::vector<std::string> header) : header_(std::move(header)) {
  for (auto& cell : header_) cell = printable(cell);
}

void Table::add_row(std::vector<std::string> row) {
  for (auto& cell : row) cell = printable(cell);
  rows_.push_back(std::move(row));
}

void Table::align_right(std::size_t index) {
  if (right_.size() <= index) right_.resize(index + 1, false);
  right_[index] = true;
}

void Table::print(std::ostream& out, const std::string& indent) const {
  std::vector<std::size_t> width;
  auto measure = [&](const std::vector<std::string>& row) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  };
  if (!header_.empty()) measure(header_);
  for (const auto& r : rows_) measure(r);
  auto line = [&](const std::vector<std::string>& row) {
    std::string s = indent;
    for (std::size_t i = 0; i < row.size(); ++i) {
      const bool last = i + 1 == row.size();
      const std::size_t pad = width[i] - row[i].size();
      const bool right = i < right_.size() && right_[i];
      if (i) s += "  ";
      if (right) s.append(pad, ' ');
      s += row[i];
      if (!right && !last) s.append(pad, ' ');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << '\n';
  };
  if (!header_.empty()) line(header_);
  for (const auto& r : rows_) line(r);
}

void Fields::add(std::string key, std::string value) { rows_.emplace_back(printable(key), printable(value)); }

void Fields::print(std::ostream& out, const std::string& indent) const {
  std::size_t width = 0;
  for (const auto& [k, v] : rows_) width = std::max(width, k.size());
  for (const auto& [k, v] : rows_) out << indent << k << ':' << std::string(width - k.size() + 2, ' ') << v << '\n';
}

void print_json(std::ostream& out, const Json& value) {
  // ensure_ascii: JSON escapes C0 controls anyway; with it, C1 controls and bidirectional overrides (valid
  // UTF-8 that a terminal may act on) are \u escapes too, and every parser reads the same text back.
  out << value.dump(2, ' ', true, Json::error_handler_t::replace) << '\n';
}

}  // namespace kjit::cli
