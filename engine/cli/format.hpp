// Output helpers shared by the commands: human-readable sizes and times, aligned tables, JSON, and the
// one escaping function for text that comes from files (printable()).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kjit::cli {

// JSON objects keep their keys in insertion order (the order the human-readable output uses).
using Json = nlohmann::ordered_json;

// Whether printable() keeps line breaks and tabs: a multi-line compile log or error stays readable
// (Keep); a table cell, a progress line or a name must stay on its line (Escape: \n and \t).
enum class Newlines { Keep, Escape };

// `text` made safe for a terminal. Everything the CLI prints that comes from a file or another program
// (template and kernel names, compile logs, keys, paths, error messages) goes through here, so that a
// manifest cannot clear the screen, set the window title or move the cursor:
//  - C0 controls (but newline and tab with Newlines::Keep), DEL and C1 controls (U+0080..U+009F,
//    among them the one-byte CSI U+009B) are written as \xHH or \u00HH;
//  - bidirectional overrides and isolates (U+202A..U+202E, U+2066..U+2069), which reorder what is
//    shown, are written as \u202E etc.;
//  - bytes that are not valid UTF-8 are written as \xHH;
//  - a backslash stays a backslash (the escapes are for reading, not for parsing back).
// Valid UTF-8 text (accents, CJK) is unchanged.
std::string printable(std::string_view text, Newlines newlines = Newlines::Escape);

// "0 B", "512 B", "1.5 KiB", "12.0 MiB", "3.2 GiB".
std::string human_bytes(std::uint64_t bytes);
// "1 entry", "3 entries".
std::string count_of(std::uint64_t n, const char* one, const char* many);
// "48.3 ms".
std::string human_ms(double ms);

// Columns padded to their widest cell, separated by two spaces; the last column is not padded. Cells
// are printed through printable() (one line each).
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

// Key/value lines "  key:   value" aligned on the values; keys and values through printable().
class Fields {
 public:
  void add(std::string key, std::string value);
  void print(std::ostream& out, const std::string& indent = "  ") const;

 private:
  std::vector<std::pair<std::string, std::string>> rows_;
};

// Pretty JSON and a newline, ASCII only (non-ASCII text as \u escapes, so nothing in it reaches a terminal
// raw). Invalid UTF-8 (paths, driver messages) is replaced, never an exception.
void print_json(std::ostream& out, const Json& value);

}  // namespace kjit::cli
