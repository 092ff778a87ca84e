#include "kjit/compile_command.hpp"

#include "kjit/compile_option_fields.hpp"

namespace kjit {
namespace {

// `word` as one word of a POSIX shell command: as it is when it holds only characters no shell treats
// specially, else single-quoted (a ' inside as '\'').
std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_-+=.,:/@%") == std::string::npos;
  if (plain) return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string compile_command(const Specialization& spec, const Target& target) {
  std::string cmd = "kjit compile " + shell_word(spec.tmpl().name()) + " --kernel " + shell_word(spec.kernel().name);
  for (const auto& [name, value] : spec.args()) cmd += " --param " + shell_word(name + "=" + value.describe());
  for (const std::string& word : cli_arguments(spec.options())) cmd += " " + shell_word(word);
  return cmd + " --arch " + target.str();
}

}  // namespace kjit
