#include "compiled_entry.hpp"

#include <ctime>

#include "kjit/cuda_toolkit.hpp"

#ifndef KJIT_VERSION
#define KJIT_VERSION "0.0.0"
#endif

namespace kjit {
namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

cache::Entry compiled_entry(const Specialization& s, const CompilePlan& plan, CompiledBinary& bin,
                            const cache::CacheKey& key) {
  cache::Entry e;
  e.key = key;
  e.payload = std::move(bin.payload);
  cache::EntryMetadata& m = e.meta;
  m.template_name = s.tmpl().name();
  m.template_digest = s.tmpl().digest();
  m.kernel = s.kernel().name;
  m.name_expression = s.name_expression();
  m.lowered_name = bin.lowered_name;
  m.options = s.options().canonical();
  m.target = plan.actual.str();
  m.requested_target = plan.requested.str();
  m.nvrtc_version = cuda_toolkit().nvrtc_identity();
  m.output = plan.output;
  m.note = plan.note;
  m.compile_ms = bin.compile_ms;
  m.created = utc_now();
  m.kjit_version = KJIT_VERSION;
  return e;
}

}  // namespace kjit
