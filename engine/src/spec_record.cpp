#include "kjit/spec_record.hpp"

#include "kjit/compile_option_fields.hpp"
#include "kjit/dtype.hpp"
#include "kjit/error.hpp"

namespace kjit {

using cache::ManifestArg;
using cache::ManifestRecord;

std::shared_ptr<const cache::ManifestSources> sources_of(const Template& t) {
  if (t.is_builtin()) return nullptr;
  std::map<std::string, std::string> headers;
  for (const Header& h : t.with_bytes()->headers())
    if (!h.from_cuda) headers[h.include_name] = h.bytes;
  return std::make_shared<const cache::ManifestSources>(t.source(), std::move(headers), t.learned_includes());
}

cache::ManifestRecord to_record(const Specialization& spec, std::shared_ptr<const cache::ManifestSources> sources) {
  const Template& t = spec.tmpl();
  ManifestRecord r;
  r.template_name = t.name();
  r.builtin = t.is_builtin();
  r.template_digest = t.digest();
  if (!r.builtin) r.sources = sources ? std::move(sources) : sources_of(t);
  r.kernel = spec.kernel().name;
  for (const auto& [name, value] : spec.args()) {
    ManifestArg a;
    a.name = name;
    switch (value.kind()) {
      case TemplateArg::Kind::Type:
        a.kind = ManifestArg::Kind::Type;
        a.dtype = dtype_name(value.dtype());
        break;
      case TemplateArg::Kind::Integer:
        a.kind = ManifestArg::Kind::Integer;
        a.integer = value.int_value();
        a.above_int64 = value.above_int64();
        break;
      case TemplateArg::Kind::Float:
        a.kind = ManifestArg::Kind::Float;
        a.floating = value.float_value();
        break;
      case TemplateArg::Kind::Bool:
        a.kind = ManifestArg::Kind::Bool;
        a.boolean = value.bool_value();
        break;
      case TemplateArg::Kind::Default: continue;  // never in Specialization::args()
    }
    r.args.push_back(std::move(a));
  }
  r.options = options_to_json(spec.options());
  return r;
}

std::shared_ptr<const Template> template_of(const ManifestRecord& record, std::string* stale) {
  std::shared_ptr<const Template> t = record.builtin ? Template::builtin(record.template_name)
                                      : record.sources
                                          ? Template::from_memory(record.sources->source(), record.template_name,
                                                                  record.sources->headers(), record.sources->learned())
                                          : throw ValueError("the manifest record " + record.describe() +
                                                             " has no sources for its template, which is not built in");
  if (stale) {
    stale->clear();
    if (t->digest() != record.template_digest)
      *stale = record.builtin ? "stale: the built-in template changed since recording (recorded digest " +
                                    record.template_digest.substr(0, 16) + ", now " + t->digest().substr(0, 16) +
                                    "); compiling the current one"
                              : "the template's digest differs from the recorded one (recorded " +
                                    record.template_digest.substr(0, 16) + ", now " + t->digest().substr(0, 16) +
                                    "): its CUDA headers differ from the recording machine's";
  }
  return t;
}

Specialization specialization_of(const ManifestRecord& record, std::shared_ptr<const Template> tmpl) {
  std::vector<std::pair<std::string, TemplateArg>> args;
  for (const ManifestArg& a : record.args) {
    switch (a.kind) {
      case ManifestArg::Kind::Type: {
        auto dt = dtype_from_name(a.dtype);
        if (!dt)
          throw ValueError("recorded argument " + a.name + "='" + a.dtype + "' of " + record.describe() +
                           " is not a dtype this kjit knows (allowed: " + dtype_names() + ")");
        args.emplace_back(a.name, TemplateArg::type(*dt));
        break;
      }
      case ManifestArg::Kind::Integer:
        args.emplace_back(a.name, a.above_int64 ? TemplateArg::unsigned_integer(static_cast<std::uint64_t>(a.integer))
                                                : TemplateArg::integer(a.integer));
        break;
      case ManifestArg::Kind::Float: args.emplace_back(a.name, TemplateArg::floating(a.floating)); break;
      case ManifestArg::Kind::Bool: args.emplace_back(a.name, TemplateArg::boolean(a.boolean)); break;
    }
  }
  CompileOptions o = options_from_json(record.options, "the options of the manifest record " + record.describe());
  return Specialization(std::move(tmpl), record.kernel, args, std::move(o));
}

}  // namespace kjit
