// run(): builds the command-line application, parses, dispatches to one command, and turns every
// error into a message and an exit status.
#include "cli.hpp"

#include <CLI/CLI.hpp>

#include <exception>

#include "commands.hpp"
#include "context.hpp"
#include "format.hpp"
#include "kjit/error.hpp"
#include "kjit/log.hpp"

#ifndef KJIT_VERSION
#define KJIT_VERSION "0.0.0"
#endif

namespace kjit::cli {
namespace {

// Routes kjit warnings (damaged entries, unusable cache directory) to the run's error stream, and
// restores the previous sink afterwards. Warnings name paths and entries: printed through printable().
class WarningsTo {
 public:
  explicit WarningsTo(std::ostream& err)
      : previous_(log::set_warning_sink(
            [&err](const std::string& m) { err << "kjit: warning: " << printable(m, Newlines::Keep) << '\n'; })) {}
  ~WarningsTo() { log::set_warning_sink(std::move(previous_)); }
  WarningsTo(const WarningsTo&) = delete;
  WarningsTo& operator=(const WarningsTo&) = delete;

 private:
  log::Sink previous_;
};

void configure(CLI::App& app, Context& ctx) {
  app.description("kjit " KJIT_VERSION
                  ": JIT CUDA kernels from C++ templates, compiled with NVRTC and cached on disk.");
  app.set_version_flag("--version", std::string("kjit ") + KJIT_VERSION);
  app.add_option("--cache-dir", ctx.cache_dir, "Cache directory for this command (overrides KJIT_CACHE_DIR)")
      ->type_name("DIR");
  app.require_subcommand(1);
  app.fallthrough();  // global options are accepted after the subcommand too
}

// The first word that is neither an option nor an option's value: what was meant as the command.
std::string first_word(const std::vector<std::string>& args) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--cache-dir")
      ++i;  // its value
    else if (args[i].empty() || args[i][0] != '-')
      return args[i];
  }
  return {};
}

int parse_error(const CLI::App& app, const CLI::ParseError& e, const std::vector<std::string>& args, std::ostream& out,
                std::ostream& err) {
  // --help, --help-all and --version are "errors" that succeed.
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e, out, err);
  std::string message = e.what();
  const std::string word = first_word(args);
  if (app.get_subcommands().empty() && !word.empty()) {
    std::string commands;
    const std::function<bool(const CLI::App*)> all;
    for (const CLI::App* sub : app.get_subcommands(all)) commands += (commands.empty() ? "" : ", ") + sub->get_name();
    message = "unknown command '" + word + "' (commands: " + commands + ")";
  }
  // The message quotes the command line's words; help() of the subcommand being parsed is our own text.
  err << "kjit: error: " << printable(message, Newlines::Keep) << "\n\n" << app.help();
  return kExitUsage;
}

}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    WarningsTo warnings(err);
    Context ctx(out, err);
    CLI::App app{"", "kjit"};
    configure(app, ctx);
    std::vector<Command> commands;
    commands.push_back(add_info_command(app, ctx));
    commands.push_back(add_compile_command(app, ctx));
    for (auto& c : add_warm_commands(app, ctx)) commands.push_back(std::move(c));
    commands.push_back(add_prefetch_command(app, ctx));
    for (auto& c : add_cache_commands(app, ctx)) commands.push_back(std::move(c));

    try {
      app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 wants them reversed
    } catch (const CLI::ParseError& e) {
      return parse_error(app, e, args, out, err);
    }
    for (const Command& c : commands)
      if (c.app->parsed()) {
        int status = c.run();
        out.flush();
        return status;
      }
    err << "kjit: error: no command given\n\n" << app.help();
    return kExitUsage;
  } catch (const std::exception& e) {
    // kjit::Error and the rest alike: messages quote manifests, compile logs and paths.
    err << "kjit: error: " << printable(e.what(), Newlines::Keep) << '\n';
    return kExitFailure;
  } catch (...) {
    err << "kjit: error: unknown exception\n";
    return kExitFailure;
  }
}

}  // namespace kjit::cli
