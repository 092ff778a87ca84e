// The subcommands. Each add_*_command() adds its subcommand and options to the application and
// returns the action that runs it once the command line has been parsed (cli.cpp dispatches).
#pragma once

#include <functional>
#include <vector>

namespace CLI {
class App;
}

namespace kjit::cli {

class Context;

struct Command {
  CLI::App* app = nullptr;   // the subcommand
  std::function<int()> run;  // returns the exit status; may throw kjit::Error
};

Command add_info_command(CLI::App& app, Context& ctx);     // cmd_info.cpp
Command add_compile_command(CLI::App& app, Context& ctx);  // cmd_compile.cpp
// warm, export (cmd_warm.cpp).
std::vector<Command> add_warm_commands(CLI::App& app, Context& ctx);
Command add_prefetch_command(CLI::App& app, Context& ctx);  // cmd_prefetch.cpp
// ls, verify, prune, clear (cmd_cache.cpp).
std::vector<Command> add_cache_commands(CLI::App& app, Context& ctx);

}  // namespace kjit::cli
