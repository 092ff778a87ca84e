// Output helpers shared by the commands: human-readable sizes and times, aligned tables, JSON.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kjit::cli {

// JSON objects keep their keys in insertion order (the order the human-readable output uses).
using Json = nlohmann::ordered_json;

// "0 B", "512 B", "1.5 KiB", "12.0 MiB", "3.2 GiB".
std::string human_bytes(std::uint64_t bytes);
// "1 entry", "3 entries".
std::string count_of(std::uint64_t n, const char* one, const char* many);
// "48.3 ms".
std::string human_ms(double ms);

// Columns padded to their widest cell, separated by two spaces; the last column is not padded.
class Table {
 public:
  explicit Table(std::vector<std::string> header = {});
  void add_row(std::vector<std::string> row);
  // Pads column `index` on the left (numbers, sizes).
  void align_right(std::size_t index);
  bool empty() const noexcept { return rows_.empty(); }
  void print(std::ostream& out, const std::string& indent = "") const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<bool> right_;
};

// Key/value lines "  key:   value" aligned on the values.
class Fields {
 public:
  void add(std::string key, std::string value);
  void print(std::ostream& out, const std::string& indent = "  ") const;

 private:
  std::vector<std::pair<std::string, std::string>> rows_;
};

// Pretty JSON and a newline. Invalid UTF-8 (paths, driver messages) is replaced, never an exception.
void print_json(std::ostream& out, const Json& value);

}  // namespace kjit::cli
