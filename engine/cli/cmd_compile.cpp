// `kjit compile TEMPLATE --kernel NAME [--param NAME=VALUE]... --arch sm_90[,sm_80...] [OPTIONS]`: puts one
// specialization into the cache for each architecture (no GPU needed) and says where each came from.
// OPTIONS: a flag for each compile option, from the field table (compile_option_fields.hpp).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <deque>
#include <filesystem>

#include "commands.hpp"
#include "context.hpp"
#include "format.hpp"
#include "kjit/compile_option_fields.hpp"
#include "kjit/engine.hpp"
#include "kjit/error.hpp"
#include "param_text.hpp"

namespace kjit::cli {
namespace {

namespace fs = std::filesystem;

struct CompileRequest {
  std::string template_ref;  // built-in name or file path
  std::string kernel;
  std::vector<std::string> params;
  std::vector<std::string> archs;
  std::vector<std::string> include_dirs;
  // One per compile option field (compile_option_fields.hpp), in table order: what CLI11 parses into.
  struct OptionFlag {
    const CompileOptionField* field = nullptr;
    CLI::Option* option = nullptr;
    bool on = false;                  // Bool
    std::string text;                 // Int, Enum, String
    std::vector<std::string> values;  // Defines
  };
  std::deque<OptionFlag> options;  // a deque: CLI11 holds references to its elements
  bool json = false;
};

// A file when the reference looks like a path or names an existing file, else a built-in name.
std::shared_ptr<const Template> load_template(const CompileRequest& r) {
  std::error_code ec;
  const bool is_file =
      r.template_ref.find_first_of("/.") != std::string::npos || fs::is_regular_file(r.template_ref, ec);
  if (is_file) return Template::from_file(r.template_ref, {r.include_dirs.begin(), r.include_dirs.end()});
  if (!r.include_dirs.empty())
    throw ValueError("--include applies to template files; '" + r.template_ref +
                     "' is a built-in template, which includes only kjit's own headers. Pass a file path "
                     "(e.g. ./" +
                     r.template_ref + ".cu) to compile a template of your own.");
  return Template::builtin(r.template_ref);
}

// The options given on the command line; a field not given keeps its default.
CompileOptions options_of(const CompileRequest& r) {
  CompileOptions o;
  for (const auto& flag : r.options) {
    const CompileOptionField& f = *flag.field;
    if (flag.option->count() == 0) continue;
    switch (f.kind) {
      case CompileOptionField::Kind::Bool: f.set(o, OptionValue(flag.on)); break;
      case CompileOptionField::Kind::Int: {
        char* end = nullptr;
        errno = 0;
        const long n = std::strtol(flag.text.c_str(), &end, 10);
        if (flag.text.empty() || *end != '\0' || errno == ERANGE || n < INT_MIN || n > INT_MAX)
          throw ValueError(f.cli + " '" + flag.text + "' is not an integer; give " + std::to_string(f.min) + ".." +
                           std::to_string(f.max) + " (or leave it out)");
        f.set(o, OptionValue(std::optional<int>(static_cast<int>(n))));
        break;
      }
      case CompileOptionField::Kind::Enum:
      case CompileOptionField::Kind::String: f.set(o, OptionValue(flag.text)); break;
      case CompileOptionField::Kind::Defines: f.set(o, OptionValue(parse_defines(flag.values))); break;
    }
  }
  return o;
}

// A flag for each compile option field, spelled and explained as its row says.
void add_option_flags(CLI::App* sub, CompileRequest& r) {
  for (const CompileOptionField& f : compile_option_fields()) {
    auto& flag = r.options.emplace_back();
    flag.field = &f;
    switch (f.kind) {
      case CompileOptionField::Kind::Bool: flag.option = sub->add_flag(f.cli, flag.on, f.help); break;
      case CompileOptionField::Kind::Int:
      case CompileOptionField::Kind::String:
        flag.option = sub->add_option(f.cli, flag.text, f.help)->type_name(f.cli_value);
        break;
      case CompileOptionField::Kind::Enum:
        flag.option =
            sub->add_option(f.cli, flag.text, f.help)->type_name(f.cli_value)->check(CLI::IsMember(f.choices));
        break;
      case CompileOptionField::Kind::Defines:
        flag.option = sub->add_option(f.cli, flag.values, f.help)->type_name(f.cli_value)->allow_extra_args(false);
        break;
    }
  }
}

std::string padded(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

// One line per architecture, printed as each finishes (all columns but the last have fixed widths).
void print_row(std::ostream& out, const std::string& key, const std::string& target, const std::string& origin,
               const std::string& ms) {
  out << padded(printable(key), 64) << "  " << padded(printable(target), 11) << "  " << padded(origin, 8) << "  " << ms
      << '\n';
}

// Engine::prepare; a compile error of a template with #include files that were not found says so.
std::shared_ptr<const SpecializedKernel> prepare(Engine& engine, const Specialization& spec, const Target& target,
                                                 Origin* origin) {
  try {
    return engine.prepare(spec, target, origin);
  } catch (const CompileError& e) {
    const auto& missing = spec.tmpl().unresolved_includes();
    if (missing.empty()) throw;
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
    throw CompileError(std::string(e.what()) + "\nhint: these #include files were not found: " + names +
                           "; pass the directories that hold them with --include DIR",
                       e.log(), e.name_expression(), e.options(), e.source_excerpt());
  }
}

int run_compile(Context& ctx, const CompileRequest& r) {
  std::shared_ptr<const Template> tmpl = load_template(r);
  const KernelDecl& decl = tmpl->kernel(r.kernel);
  const Specialization spec(tmpl, r.kernel, parse_params(decl, r.params), options_of(r));
  const std::vector<Target> targets = parse_targets(r.archs);
  Engine& engine = ctx.engine();

  Json results = Json::array();
  bool compiled_any = false;
  if (!r.json) {
    ctx.out << printable(spec.describe()) << ": " << printable(spec.name_expression()) << '\n';
    print_row(ctx.out, "key", "target", "origin", "compile");
  }
  for (const Target& target : targets) {
    Origin origin;
    const auto prepared = prepare(engine, spec, target, &origin);  // held: p refers into it
    const SpecializedKernel& p = *prepared;
    const bool compiled = origin == Origin::Compiled;
    compiled_any = compiled_any || compiled;
    if (compiled && !p.log.empty())
      ctx.err << "kjit: NVRTC warnings for " << printable(spec.name_expression()) << " (" << target.str() << "):\n"
              << printable(p.log, Newlines::Keep) << (p.log.back() == '\n' ? "" : "\n");
    if (r.json) {
      results.push_back({{"arch", target.str()},
                         {"key", p.key.hex()},
                         {"target", p.meta.target},
                         {"output", cache::to_string(p.meta.output)},
                         {"origin", to_string(origin)},
                         {"compile_ms", compiled ? Json(p.meta.compile_ms) : Json(nullptr)},
                         {"note", p.meta.note.empty() ? Json(nullptr) : Json(p.meta.note)},
                         {"lowered_name", p.meta.lowered_name}});
    } else {
      print_row(ctx.out, p.key.hex(), p.meta.target, to_string(origin), compiled ? human_ms(p.meta.compile_ms) : "-");
      if (!p.meta.note.empty()) ctx.out << "  note: " << printable(p.meta.note) << '\n';
      ctx.out.flush();
    }
  }
  if (compiled_any && !engine.disk().writable())
    ctx.err << "kjit: warning: the cache is not writable, so nothing compiled now was stored: "
            << printable(engine.disk().describe()) << '\n';
  if (r.json) {
    Json j;
    j["template"] = tmpl->name();
    j["kernel"] = decl.name;
    j["name_expression"] = spec.name_expression();
    j["specialization"] = spec.describe();
    j["options"] = spec.options().canonical();
    j["results"] = std::move(results);
    print_json(ctx.out, j);
  }
  return 0;
}

}  // namespace

Command add_compile_command(CLI::App& app, Context& ctx) {
  auto r = std::make_shared<CompileRequest>();
  CLI::App* sub =
      app.add_subcommand("compile", "Compile a specialization into the cache for each --arch (no GPU needed)");
  sub->add_option("TEMPLATE", r->template_ref, "Built-in template name (e.g. add_constant) or a template file path")
      ->required()
      ->type_name("");
  sub->add_option("--kernel", r->kernel, "__global__ kernel of the template")->required()->type_name("NAME");
  sub->add_option("--param", r->params, "Template argument, by parameter name (repeatable), e.g. T=float32")
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false);
  sub->add_option("--arch", r->archs, "Targets: sm_XY, sm_XYa, compute_XY or X.Y, comma-separated or repeated")
      ->required()
      ->type_name("ARCH[,ARCH...]")
      ->delimiter(',')
      ->allow_extra_args(false);
  sub->add_option("--include", r->include_dirs, "Directory searched for the template file's #include (repeatable)")
      ->type_name("DIR")
      ->allow_extra_args(false);
  add_option_flags(sub, *r);
  sub->add_flag("--json", r->json, "Print JSON");
  return {sub, [&ctx, r]() { return run_compile(ctx, *r); }};
}

}  // namespace kjit::cli
