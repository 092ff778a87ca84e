#include "kjit/compiler.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <sstream>

#include "kjit/cache/file_read.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/compile_sandbox.hpp"
#include "kjit/error.hpp"
#include "kjit/log.hpp"
#include "kjit/nvrtc_job.hpp"
#include "kjit/nvrtc_library.hpp"
#include "kjit/pch_folders.hpp"
#include "kjit/phase_time.hpp"
#include "text_scan.hpp"

namespace kjit {
namespace {

std::string join_archs(const std::vector<int>& archs, const char* prefix = "sm_") {
  std::string out;
  for (int a : archs) out += (out.empty() ? "" : ", ") + (prefix + std::to_string(a));
  return out;
}

const std::string* text_of(const std::string& file, const Template& t, const std::string& program_name) {
  if (file == program_name) return &t.source();
  for (const auto& h : t.headers())
    if (h.loaded && (h.include_name == file || h.path.string() == file)) return &h.bytes;
  return nullptr;
}

}  // namespace

// "file(12): error ..." or "file(12): catastrophic error ...": the first "(digits): " of the line.
static bool parse_error_location(std::string_view line, std::string& file, int& at) {
  for (std::size_t open = line.find('('); open != std::string_view::npos && open > 0; open = line.find('(', open + 1)) {
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

std::vector<std::string> Compiler::type_macros(const Specialization& spec) {
  const std::string& expr = spec.name_expression();
  const Template& t = spec.tmpl();
  std::vector<std::string> out;
  for (const auto& [macro, word] : {std::pair<const char*, const char*>{"KJIT_USES_HALF", "half"},
                                    std::pair<const char*, const char*>{"KJIT_USES_BFLOAT16", "bfloat16"}}) {
    if (spec.options().defines.count(macro)) continue;  // the user's own value
    const bool uses =
        expr.find(word) != std::string::npos || (!t.is_builtin() && t.source().find(word) != std::string::npos);
    out.push_back(std::string("-D") + macro + (uses ? "=1" : "=0"));
  }
  return out;
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
  const NvrtcLibrary& lib = NvrtcLibrary::get();
  const std::vector<int>& archs = lib.supported_archs();
  const bool supported = std::find(archs.begin(), archs.end(), requested.arch) != archs.end();
  if (requested.is_ptx()) {
    // NVRTC makes PTX for the virtual architectures of the real ones it supports, and no other: an
    // unknown compute_XY (compute_91) is refused here, not by NVRTC's bare NVRTC_ERROR_INVALID_OPTION.
    if (!supported)
      throw ValueError("NVRTC " + lib.version() + " cannot compile for " + requested.str() + ": it supports " +
                       join_archs(archs, "compute_") + " for PTX (or sm_XY for a cubin)");
    p.output = cache::OutputKind::Ptx;
    return p;
  }
  if (supported) return p;
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

namespace {

// The type a name expression may use that only a CUDA header declares: kjit rendered it, so kjit says
// which include the template lacks instead of passing on NVRTC's bare "identifier is undefined".
void check_types_are_declared(const Specialization& spec) {
  const std::string& expr = spec.name_expression();
  static const std::pair<const char*, const char*> needs[] = {{"__half", "cuda_fp16.h"},
                                                              {"__nv_bfloat16", "cuda_bf16.h"}};
  for (const auto& [type, header] : needs) {
    if (expr.find(type) == std::string::npos) continue;
    bool included = false;
    for (const auto& h : spec.tmpl().headers()) included = included || h.path.filename() == header;
    if (!included)
      throw ValueError("kernel '" + spec.kernel().qualified_name() + "' of template '" + spec.tmpl().name() +
                       "' is specialized as " + expr + ", which uses " + type + ": that type is declared in " + header +
                       ", and the template does not include it. Add `#include <" + header +
                       ">` to the template (or call it with tensors of another dtype).");
  }
}

// The names in NVRTC's "could not open source file "X"" lines.
std::vector<std::string> unopened_includes(const std::string& log) {
  std::vector<std::string> out;
  for (const char* marker : {"could not open source file \"", "cannot open source file \""}) {
    for (std::size_t at = log.find(marker); at != std::string::npos; at = log.find(marker, at + 1)) {
      const std::size_t from = at + std::strlen(marker);
      const std::size_t to = log.find('"', from);
      if (to == std::string::npos) break;
      std::string name = log.substr(from, to - from);
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(std::move(name));
    }
  }
  return out;
}

// Whether kjit's <iosfwd> stand-in (kernel_templates/std/iosfwd) is one of the template's headers: some header
// names a stream header (<sstream>, <ostream>, <iosfwd>), so the library declares host stream operators. NVRTC
// then gets it pre-included, ahead of the source: a library may include its stream header only outside NVRTC and
// still declare those operators (CCCL 3.2's thrust/complex.h skips <sstream> under NVRTC, yet
// thrust/detail/complex/stream.h declares operator<< on std::basic_ostream), and the declarations must parse.
// The stand-in is a header of the template already, so its bytes are in the key; it only declares, never defines.
// Known by its digest: a template rebuilt from a manifest holds the stand-in in memory, as recorded.
bool pre_includes_stream_declarations(const Template& t) {
  static const std::string stand_in = [] {
    const cache::FileRead r = cache::read_regular_file(builtin_templates_dir() / "std" / "iosfwd", 1 << 20);
    return r.ok() ? cache::to_hex(cache::Sha256::of(r.bytes)) : std::string();
  }();
  if (stand_in.empty()) return false;
  for (const Header& h : t.headers())
    if (h.include_name == "iosfwd" && h.sha256 == stand_in) return true;
  return false;
}

// A name such as 'vector' (no folder, no extension): a C++ standard library header, of which NVRTC ships
// none; kjit stands in for a few (kernel_templates/std/), listed from that folder.
std::string standard_header_hint(const std::vector<std::string>& names) {
  std::string standard;
  for (const auto& n : names)
    if (n.find_first_of("./") == std::string::npos) standard += (standard.empty() ? "'" : ", '") + n + "'";
  if (standard.empty()) return "";
  std::vector<std::string> stand_ins;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(builtin_templates_dir() / "std", ec))
    stand_ins.push_back("<" + e.path().filename().string() + ">");
  std::sort(stand_ins.begin(), stand_ins.end());
  std::string list;
  for (const auto& n : stand_ins) list += (list.empty() ? "" : ", ") + n;
  return "\n" + standard +
         " looks like a C++ standard library header, and NVRTC ships none: kjit stands in only for those device code "
         "commonly reaches (" +
         (list.empty() ? std::string("none found in its templates folder") : list) +
         "; docs/header-libraries.md). In device code use libcu++'s <cuda/std/...> headers instead "
         "(<cuda/std/array>, <cuda/std/type_traits>, ...); never the host compiler's, which NVRTC cannot compile.";
}

std::string unresolved_hint(const std::string& log, const Template& t) {
  const auto names = unopened_includes(log);
  if (names.empty()) return "";
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
  if (t.confined())
    return "\nkjit did not find " + list +
           " among the headers recorded with this template (rebuilt from a "
           "manifest), and NVRTC reads no other file for it. Record the template again from sources that "
           "include it plainly.";
  return "\nkjit did not find " + list +
         " where it resolves includes (the including file's folder, the "
         "template's folder, include_dirs, KJIT_INCLUDE_PATH, kjit's templates, the CUDA headers), and NVRTC "
         "reads only the headers kjit found and hashed: pass the folder that holds it as an include directory "
         "(include_dirs= in Python, --include in the CLI, or KJIT_INCLUDE_PATH), or include it by a path "
         "relative to the including file." +
         standard_header_hint(names);
}

// NVRTC's automatic precompiled header (KJIT_PCH): the header set parsed once per process and reused by
// the next compile of the same headers (a CUB block reduce: 1.5 s -> 0.35 s on a loaded 2-CPU machine).
// NVRTC keeps it in a file (178 MB for CUB's headers), in a folder of this process's own per header
// domain (pch_folders.hpp), the one folder where the compile thread's filter lets NVRTC open files
// (run_nvrtc_without_files). One such compile at a time: NVRTC's PCH heap is process-wide.
constexpr std::size_t kPchHeaderBytes = 4u << 20;

std::mutex& pch_mu() {
  static std::mutex m;
  return m;
}

// What a PCH made by this compile may be reused for: the same header bytes under the same names, and
// the same options (pch_folders.hpp says why NVRTC cannot tell by itself).
std::string pch_domain(const Template& t, const std::vector<std::string>& flags) {
  cache::Sha256 sha;
  auto field = [&](const std::string& s) {
    const std::uint64_t n = s.size();
    sha.update(&n, sizeof n).update(s);
  };
  field("kjit pch domain 1");
  field(std::to_string(flags.size()));
  for (const auto& f : flags) field(f);
  for (const auto* list : {&t.headers(), &t.compile_only_headers()}) {
    field(std::to_string(list->size()));
    for (const auto& h : *list) {
      field(h.include_name);
      field(h.sha256.empty() ? cache::to_hex(cache::Sha256::of(h.bytes)) : h.sha256);
    }
  }
  return cache::to_hex(sha.finish());
}

// Whether a failed compile's log says the precompiled header could not be made or read, so that the
// same compile without it may work: a full TMPDIR ("error while writing precompiled header file"), a file
// size limit ("unable to obtain mapped memory": NVRTC maps the PCH file), its folder gone ("invalid PCH
// directory"), a kernel whose filter cannot hand NVRTC its scratch file ("could not open temporary file").
bool pch_failure(const std::string& log) {
  for (const char* sign : {"precompiled header", "PCH", "temporary file", "mapped memory"})
    if (log.find(sign) != std::string::npos) return true;
  return false;
}

// The first line of a log that names the PCH's failure, for the warning.
std::string pch_failure_line(const std::string& log) {
  std::istringstream is(log);
  std::string line;
  while (std::getline(is, line))
    if (pch_failure(line)) return line;
  return log.substr(0, 200);
}

// Set when a compile with the PCH failed where the same compile without it may work (pch_failure): the
// PCH is off for the rest of the process, with one warning.
std::atomic<bool> g_pch_broken{false};

bool wants_pch(const Template& t, const Settings& settings) {
  if (settings.pch == PchMode::Off || t.confined() || g_pch_broken.load() || !NvrtcLibrary::get().has_pch())
    return false;
  if (settings.pch == PchMode::On) return true;
  std::size_t bytes = 0;
  for (const auto& h : t.headers()) bytes += h.bytes.size();
  return bytes >= kPchHeaderBytes;
}

// The includes NVRTC could not open, with the file that asked: "F(12): catastrophic error: cannot open
// source file "X"" (or "could not open"). Every such X is one kjit's reading of the text did not find
// (a macro-computed include), or one that is nowhere.
std::vector<Template::MissingInclude> missing_includes(const std::string& log) {
  std::vector<Template::MissingInclude> out;
  std::istringstream is(log);
  std::string line;
  while (std::getline(is, line)) {
    std::size_t at = std::string::npos, len = 0;
    for (const char* marker :
         {"): catastrophic error: cannot open source file \"", "): catastrophic error: could not open source file \""})
      if ((at = line.find(marker)) != std::string::npos) {
        len = std::strlen(marker);
        break;
      }
    if (at == std::string::npos) continue;
    const std::size_t open = line.rfind('(', at);
    const std::size_t from = at + len, to = line.find('"', from);
    if (open == std::string::npos || open == 0 || to == std::string::npos || to == from) continue;
    out.push_back({line.substr(0, open), line.substr(from, to - from)});
  }
  return out;
}

}  // namespace

CompiledBinary Compiler::compile(const Specialization& given, const CompilePlan& plan, const Settings& settings) {
  CompiledBinary out;
  out.plan = plan;
  Specialization spec = given.on_current_template();
  auto start = std::chrono::steady_clock::now();
  // Each pass hands NVRTC what kjit resolved; a pass that fails only because NVRTC could not open a
  // header that kjit can resolve (a macro-computed include) learns it and runs again with it. Each pass
  // hands at least one more header, so the passes end; the bound is a guard.
  constexpr int kMaxPasses = 64;
  NvrtcJob job;
  NvrtcOutcome r;
  std::shared_ptr<const Template> with_bytes;
  for (int pass = 1;; ++pass) {
    // Headers known from the header index are read now, and checked against the digests of the key.
    with_bytes = spec.tmpl().with_bytes();
    const Template& t = *with_bytes;
    check_types_are_declared(spec);
    // NVRTC reads only what kjit resolved and hashed: every header, the CUDA ones included, is handed to
    // it in memory, with no include path and no search of the program's folder or the current directory
    // (--no-source-include); and it runs where a seccomp filter answers every file syscall ENOENT, so
    // an include kjit's scanner did not see (a macro, an odd spelling) cannot reach a file either.
    std::vector<std::string> flags = spec.options().nvrtc_flags(plan.actual);
    flags.push_back("--no-source-include");
    if (pre_includes_stream_declarations(t)) flags.push_back("--pre-include=iosfwd");
    for (const auto& flag : type_macros(spec)) flags.push_back(flag);
    job = NvrtcJob{};
    job.source = t.source();
    job.program_name = program_name(t);
    for (const auto* list : {&t.headers(), &t.compile_only_headers()})
      for (const auto& h : *list) job.headers.emplace_back(h.include_name, h.bytes);
    // NVRTC 12.9+ keeps a compile cache of its own (in the driver's JIT cache): kjit caches binaries
    // itself, and a compile it counts and times must be a real one with a full log (--no-cache).
    job.flags = NvrtcLibrary::get().flags_for_this_version(std::move(flags));
    job.name_expression = spec.name_expression();
    job.want_cubin = plan.output == cache::OutputKind::Cubin;

    PhaseTimer timer(Phase::Compile);
    if ((t.confined() || settings.compile_isolation == CompileIsolation::Always) && compile_children_are_safe()) {
      // A template rebuilt from a manifest may come from anyone: a child process, bounded in time and
      // memory, never run without the filter.
      CompileBounds bounds{settings.compile_timeout_s, settings.compile_memory_bytes, t.confined()};
      // A kept child (CompileChildren) serves one lineage: the template and its options, which carry the
      // record's own macro text (defines); only typed template arguments vary within one.
      std::string lineage = t.digest();
      for (const auto& option : spec.options().canonical()) lineage += '\n' + option;
      r = run_nvrtc_in_child(job, bounds, spec.describe(), lineage);
    } else {
      std::unique_lock<std::mutex> pch_lock(pch_mu(), std::defer_lock);
      std::string domain;
      if (wants_pch(t, settings) && pch_lock.try_lock()) {
        domain = pch_domain(t, job.flags);
        job = job.with_pch(PchFolders::process().folder_for(domain));  // not in the key: the same binary
      }
      r = run_nvrtc_without_files(job, t.confined(), spec.describe());
      if (!job.pch_dir.empty() && !r.ok() && r.failed_call.empty() && pch_failure(r.log)) {
        g_pch_broken = true;
        PchFolders::process().drop(domain);
        log::warn_once("pch-failed", "NVRTC could not use a precompiled header in " + job.pch_dir + " (" +
                                         pch_failure_line(r.log) +
                                         "): compiled without it, and no precompiled headers for the rest of this "
                                         "process. Free space in TMPDIR (or point TMPDIR at a folder with about 200 "
                                         "MB free), or set KJIT_PCH=off.");
        job = job.without_pch();
        r = run_nvrtc_without_files(job, t.confined(), spec.describe());
      }
    }
    out.flags = job.nvrtc_flags();  // what NVRTC was handed, for messages and the caller
    if (r.ok() || !r.failed_call.empty() || pass >= kMaxPasses) break;
    const std::vector<Template::MissingInclude> missing = missing_includes(r.log);
    if (missing.empty()) break;
    std::shared_ptr<const Template> grown = spec.tmpl().grown_by(missing);
    if (!grown) break;
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m.name + " (from " + m.file + ")";
    log::Event e;
    e.level = log::Level::Debug;
    e.kind = "info";
    e.message = "compiling " + spec.describe() + ": NVRTC asked for " + names +
                ", which no #include of the text names (a macro-computed include): learned, compiling again";
    e.template_name = t.name();
    e.kernel = spec.name_expression();
    e.target = plan.actual.str();
    log::emit(std::move(e));
    spec = spec.with_template(std::move(grown));
    ++out.learning_passes;
  }
  out.compiled_template = spec.template_ptr();
  const Template& t = *with_bytes;
  if (!r.sandbox_note.empty()) {
    // A degradation: a WARNING record for logging (still a KJIT_VERBOSE line, not a warnings.warn).
    log::Event e;
    e.level = log::Level::Warning;
    e.kind = "degraded";
    e.message = "compiled " + spec.describe() + " without the file filter (" + r.sandbox_note +
                "): an include kjit did not resolve could reach a file";
    e.template_name = t.name();
    e.kernel = spec.name_expression();
    e.target = plan.actual.str();
    log::emit(std::move(e));
  }
  out.log = r.log;
  if (!r.failed_call.empty()) throw Error(r.failed_call + " failed: " + r.status_text);
  if (!r.ok()) {
    const std::string& name = job.program_name;
    std::string excerpt = excerpt_errors(out.log, t, name);
    std::ostringstream msg;
    msg << "NVRTC could not compile " << spec.describe() << " for " << plan.actual.str() << " (" << r.status_text
        << ")\n  name expression: " << job.name_expression << "\n  options:";
    for (const auto& f : out.flags) msg << ' ' << f;
    msg << unresolved_hint(out.log, t);
    if (spec.options().minimal)
      msg << "\ncompiled with minimal=True (NVRTC's --minimal), which leaves out texture and surface functions and "
             "types, the device-side CUDA runtime (cudaMalloc, ... in device code), launches from device code and "
             "the runtime API's types and macros (cudaError_t, ...): if the template uses any of them, compile it "
             "with minimal=False (--minimal off in `kjit compile`); a kjit.elementwise expression cannot use them.";
    msg << "\n--- log ---\n" << out.log;
    if (!excerpt.empty()) msg << "\n--- source ---\n" << excerpt;
    throw CompileError(msg.str(), out.log, job.name_expression, out.flags, excerpt);
  }
  out.lowered_name = std::move(r.lowered_name);
  out.payload = std::move(r.payload);
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::string excerpt_errors(const std::string& log, const Template& t, const std::string& program_name, int context) {
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
      out << (n == at ? " >" : "  ") << std::string(5 - std::min<std::size_t>(5, std::to_string(n).size()), ' ') << n
          << " | " << s << "\n";
    }
  }
  return out.str();
}

}  // namespace kjit
