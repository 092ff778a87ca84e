#include "format.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>

#include "kjit/error.hpp"

namespace kjit::cli {

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

Table::Table(std::vector<std::string> header) : header_(std::move(header)) {}

void Table::add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

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

void Fields::add(std::string key, std::string value) { rows_.emplace_back(std::move(key), std::move(value)); }

void Fields::print(std::ostream& out, const std::string& indent) const {
  std::size_t width = 0;
  for (const auto& [k, v] : rows_) width = std::max(width, k.size());
  for (const auto& [k, v] : rows_)
    out << indent << k << ':' << std::string(width - k.size() + 2, ' ') << v << '\n';
}

void print_json(std::ostream& out, const Json& value) {
  out << value.dump(2, ' ', false, Json::error_handler_t::replace) << '\n';
}

}  // namespace kjit::cli
