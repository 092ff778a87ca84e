// Compiler: one NVRTC compilation of a Specialization to a cubin (sm_XY / sm_XYa) or, when the
// target is newer than this NVRTC supports, to PTX for the highest supported compute_XY.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kjit/cache/cache_key.hpp"
#include "kjit/settings.hpp"
#include "kjit/specialization.hpp"
#include "kjit/target.hpp"

namespace kjit {

// What a compilation for a requested target produces.
struct CompilePlan {
  Target requested;
  Target actual;  // == requested, or compute_XY for the PTX fallback
  cache::OutputKind output = cache::OutputKind::Cubin;
  std::string note;  // why PTX, when it is PTX
};

struct CompiledBinary {
  std::string payload;       // cubin or PTX bytes
  std::string lowered_name;  // mangled name of the kernel in the payload
  std::string log;           // NVRTC log (warnings)
  double compile_ms = 0;
  CompilePlan plan;
  std::vector<std::string> flags;  // every flag given to NVRTC
  // The template whose headers NVRTC was handed: the specialization's current one, or one grown from it
  // by includes this compile learned (Template::grown_by). Its digest is the one the binary's key takes.
  std::shared_ptr<const Template> compiled_template;
  int learning_passes = 0;  // NVRTC passes that failed on a header kjit then learned
};

class Compiler {
 public:
  // Decides cubin vs PTX for `requested` (loads NVRTC). Throws ValueError for targets this NVRTC
  // cannot produce, listing what it supports.
  static CompilePlan plan(const Target& requested);
  // Compiles (loads NVRTC), with the specialization's current template (Template::current()). A pass
  // that NVRTC fails only on headers it could not open and kjit can resolve (a macro-computed include)
  // is run again with them: compiled_template says which template was compiled. Throws CompileError with the log, the
  // name expression, the options and the source lines around each error (or the limit a bounded compile exceeded). A
  // template rebuilt from a manifest, or any template under KJIT_COMPILE_ISOLATION=always, compiles in a bounded child
  // process (compile_sandbox.hpp) with the limits of `settings`. ValueError when the name expression uses
  // __half / __nv_bfloat16 and the template does not include the CUDA header that declares it.
  static CompiledBinary compile(const Specialization& spec, const CompilePlan& plan,
                                const Settings& settings = kjit::settings());
  // The program name NVRTC sees for a template (its file name, with .cuh for built-ins).
  static std::string program_name(const Template& t);
  // "-DKJIT_USES_HALF=0|1" and "-DKJIT_USES_BFLOAT16=0|1": 1 when the name expression, or the source of a
  // template that is not a built-in one (a kjit.elementwise expression, a template of the user's), has
  // "half" / "bfloat16" in it. A macro the user defines is left to the user's value. cuda_fp16.h and
  // cuda_bf16.h (1.6 MB with what they include) are about half the compile of a small kernel: a template
  // can include them only when a specialization needs them (kernel_templates/detail/numeric.cuh). Part
  // of the cache key (Engine::key_for), so that a change of this rule never serves an entry compiled
  // under the old one.
  static std::vector<std::string> type_macros(const Specialization& spec);
};

// Source lines around each "file(line): error" of an NVRTC log, from the template and its headers.
std::string excerpt_errors(const std::string& log, const Template& t, const std::string& program_name,
                           int context_lines = 2);

}  // namespace kjit
