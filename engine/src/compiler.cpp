#include "kjit/compiler.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string_view>
#include <sstream>

#include "kjit/error.hpp"
#include "kjit/nvrtc_library.hpp"
#include "text_scan.hpp"

namespace kjit {
namespace {

// RAII owner of one nvrtcProgram.
class Program {
 public:
  Program(const NvrtcLibrary& lib, const std::string& source, const std::string& name,
          const std::vector<const Header*>& headers)
      : lib_(lib) {
    std::vector<const char*> contents, names;
    for (const Header* h : headers) {
      contents.push_back(h->bytes.c_str());
      names.push_back(h->include_name.c_str());
    }
    lib_.check(lib_.nvrtcCreateProgram(&prog_, source.c_str(), name.c_str(), static_cast<int>(headers.size()),
                                       contents.data(), names.data()),
               "nvrtcCreateProgram");
  }
  ~Program() {
    if (prog_) lib_.nvrtcDestroyProgram(&prog_);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return prog_; }

  std::string log() const {
    std::size_t n = 0;
    if (lib_.nvrtcGetProgramLogSize(prog_, &n) != NVRTC_SUCCESS || n <= 1) return "";
    std::string s(n, '\0');
    if (lib_.nvrtcGetProgramLog(prog_, s.data()) != NVRTC_SUCCESS) return "";
    s.resize(n - 1);
    return s;
  }

 private:
  const NvrtcLibrary& lib_;
  nvrtcProgram prog_ = nullptr;
};

std::string join_archs(const std::vector<int>& archs) {
  std::string out;
  for (int a : archs) out += (out.empty() ? "sm_" : ", sm_") + std::to_string(a);
  return out;
}

const std::string* text_of(const std::string& file, const Template& t, const std::string& program_name) {
  if (file == program_name) return &t.source();
  for (const auto& h : t.headers())
    if (h.include_name == file || h.path.string() == file) return &h.bytes;
  return nullptr;
}

}  // namespace

// "file(12): error ..." or "file(12): catastrophic error ...": the first "(digits): " of the line.
static bool parse_error_location(std::string_view line, std::string& file, int& at) {
  for (std::size_t open = line.find('('); open != std::string_view::npos && open > 0;
       open = line.find('(', open + 1)) {
    const std::size_t close = line.find(')', open);
    if (close == std::string_view::npos) return false;
    auto number = text::small_int(line.substr(open + 1, close - open - 1));
    if (!number) continue;
    std::string_view rest = line.substr(close + 1);
    if (!text::starts_with(rest, ": ")) continue;
    rest.remove_prefix(2);
    if (text::starts_with(rest, "catastrophic ")) rest.remove_prefix(13);
    if (!text::starts_with(rest, "error")) return false;
    file = std::string(line.substr(0, open));
    at = *number;
    return true;
  }
  return false;
}

std::string Compiler::program_name(const Template& t) {
  if (t.is_builtin()) return t.name() + ".cuh";
  // NVRTC searches the program name's folder for includes: a confined template's name is a bare file name.
  if (t.confined()) return std::filesystem::path(t.name()).filename().string();
  return t.name();
}

CompilePlan Compiler::plan(const Target& requested) {
  CompilePlan p;
  p.requested = requested;
  p.actual = requested;
  if (requested.is_ptx()) {
    p.output = cache::OutputKind::Ptx;
    return p;
  }
  const NvrtcLibrary& lib = NvrtcLibrary::get();
  std::vector<int> archs = lib.supported_archs();
  if (std::find(archs.begin(), archs.end(), requested.arch) != archs.end()) return p;
  int highest = archs.empty() ? 0 : *std::max_element(archs.begin(), archs.end());
  if (requested.arch > highest && highest > 0) {
    p.actual = Target{highest, Target::Kind::Compute};
    p.output = cache::OutputKind::Ptx;
    p.note = "NVRTC " + lib.version() + " cannot make a cubin for " + requested.str() + " (newest: sm_" +
             std::to_string(highest) + "); compiled PTX for " + p.actual.str() +
             ", which the driver JIT-compiles at load";
    return p;
  }
  throw ValueError("NVRTC " + lib.version() + " cannot compile for " + requested.str() + ": it supports " +
                   join_archs(archs) + " (or compute_XY for PTX)");
}

CompiledBinary Compiler::compile(const Specialization& spec, const CompilePlan& plan) {
  const NvrtcLibrary& lib = NvrtcLibrary::get();
  const Template& t = spec.tmpl();
  CompiledBinary out;
  out.plan = plan;
  out.flags = spec.options().nvrtc_flags(plan.actual, t.nvrtc_include_dirs());
  if (t.confined()) out.flags.push_back("--no-source-include");
  std::vector<const Header*> in_memory;
  for (const auto& h : t.headers())
    if (!h.from_cuda) in_memory.push_back(&h);

  auto start = std::chrono::steady_clock::now();
  const std::string name = program_name(t);
  Program prog(lib, t.source(), name, in_memory);
  const std::string& expr = spec.name_expression();
  lib.check(lib.nvrtcAddNameExpression(prog.get(), expr.c_str()), "nvrtcAddNameExpression");
  std::vector<const char*> argv;
  for (const auto& f : out.flags) argv.push_back(f.c_str());
  nvrtcResult r = lib.nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());
  out.log = prog.log();
  if (r != NVRTC_SUCCESS) {
    std::string excerpt = excerpt_errors(out.log, t, name);
    std::ostringstream msg;
    msg << "NVRTC could not compile " << spec.describe() << " for " << plan.actual.str() << " ("
        << lib.nvrtcGetErrorString(r) << ")\n  name expression: " << expr << "\n  options:";
    for (const auto& f : out.flags) msg << ' ' << f;
    msg << "\n--- log ---\n" << out.log;
    if (!excerpt.empty()) msg << "\n--- source ---\n" << excerpt;
    throw CompileError(msg.str(), out.log, expr, out.flags, excerpt);
  }
  const char* lowered = nullptr;
  lib.check(lib.nvrtcGetLoweredName(prog.get(), expr.c_str(), &lowered), "nvrtcGetLoweredName");
  out.lowered_name = lowered ? lowered : "";
  std::size_t size = 0;
  if (plan.output == cache::OutputKind::Cubin) {
    lib.check(lib.nvrtcGetCUBINSize(prog.get(), &size), "nvrtcGetCUBINSize");
    out.payload.resize(size);
    lib.check(lib.nvrtcGetCUBIN(prog.get(), out.payload.data()), "nvrtcGetCUBIN");
  } else {
    lib.check(lib.nvrtcGetPTXSize(prog.get(), &size), "nvrtcGetPTXSize");
    out.payload.resize(size);
    lib.check(lib.nvrtcGetPTX(prog.get(), out.payload.data()), "nvrtcGetPTX");
  }
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::string excerpt_errors(const std::string& log, const Template& t, const std::string& program_name,
                           int context) {
  std::ostringstream out;
  std::istringstream is(log);
  std::string line;
  std::vector<std::pair<std::string, int>> done;
  while (std::getline(is, line)) {
    std::string file;
    int at = 0;
    if (!parse_error_location(line, file, at)) continue;
    if (std::find(done.begin(), done.end(), std::make_pair(file, at)) != done.end()) continue;
    done.emplace_back(file, at);
    const std::string* text = text_of(file, t, program_name);
    if (!text) continue;
    std::istringstream src(*text);
    std::string s;
    int n = 0;
    out << file << ":" << at << ":\n";
    while (std::getline(src, s)) {
      ++n;
      if (n < at - context) continue;
      if (n > at + context) break;
      out << (n == at ? " >" : "  ") << std::string(5 - std::min<std::size_t>(5, std::to_string(n).size()), ' ')
          << n << " | " << s << "\n";
    }
  }
  return out.str();
}

}  // namespace kjit
