#include "cache_keys.hpp"

#include "kjit/cuda_toolkit.hpp"
#include "kjit/driver_library.hpp"
#include "kjit/phase_time.hpp"

#ifndef KJIT_VERSION
#define KJIT_VERSION "0.0.0"
#endif

namespace kjit {
namespace {

std::string driver_version_text() {
  std::string why;
  if (!DriverLibrary::available(&why)) return "none";
  return std::to_string(DriverLibrary::get().driver_version());
}

// The key inputs that depend on the specialization only (digest, name expression, options, the type
// macros), made once for every plan a lookup tries; key_of completes them for one plan.
cache::KeyInputs key_inputs(const Specialization& spec) {
  cache::KeyInputs in;
  in.kjit_version = KJIT_VERSION;
  // Covers the source and every header's bytes, those a compile learned included (Template::current).
  in.content_digest = spec.tmpl().current()->digest();
  in.name_expression = spec.name_expression();
  in.options = spec.options().canonical();
  for (auto& flag : Compiler::type_macros(spec)) in.options.push_back(std::move(flag));
  return in;
}

cache::CacheKey key_of(cache::KeyInputs in, const CompilePlan& plan) {
  in.target = plan.requested.str();
  in.nvrtc_version = cuda_toolkit().nvrtc_identity();
  in.output = plan.output;
  if (plan.output == cache::OutputKind::Ptx) in.driver_version = driver_version_text();
  return cache::CacheKey::compute(in);
}

}  // namespace

cache::CacheKey key_for(const Specialization& spec, const CompilePlan& plan) { return key_of(key_inputs(spec), plan); }

KeyCandidates key_candidates(const Specialization& spec, const Target& target) {
  PhaseTimer timer(Phase::Key);
  // Without loading NVRTC (strict mode never does, and a warm process should not pay for it) nobody
  // knows whether this NVRTC makes a cubin or PTX for `target`: look for both.
  KeyCandidates out;
  const cache::KeyInputs in = key_inputs(spec);
  CompilePlan p;
  p.requested = p.actual = target;
  if (!target.is_ptx()) {
    p.output = cache::OutputKind::Cubin;
    out.emplace_back(p, key_of(in, p));
  }
  p.output = cache::OutputKind::Ptx;
  out.emplace_back(p, key_of(in, p));
  return out;
}

std::vector<cache::CacheKey> keys_of(const KeyCandidates& cands) {
  std::vector<cache::CacheKey> out;
  out.reserve(cands.size());
  for (const auto& [plan, key] : cands) out.push_back(key);
  return out;
}

}  // namespace kjit
