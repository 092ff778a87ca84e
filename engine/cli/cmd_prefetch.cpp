// `kjit prefetch MANIFEST --arch sm_90[,...]`: at start-up, fetches every entry of a manifest that the
// disk lacks from the remote tier (KJIT_REMOTE_CACHE) in one round trip, onto the disk cache; the first
// calls of the process then load from the disk. Nothing is compiled. Exit status 1 when the remote tier
// does not answer or a record cannot be rebuilt; entries the tier lacks are counted, not an error (the
// process compiles them on first use, or takes them from a peer).
#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "commands.hpp"
#include "context.hpp"
#include "format.hpp"
#include "kjit/cache/manifest.hpp"
#include "kjit/error.hpp"
#include "param_text.hpp"
#include "warm.hpp"

namespace kjit::cli {
namespace {

struct PrefetchRequest {
  std::string manifest;
  std::vector<std::string> archs;
};

int run_prefetch(Context& ctx, const PrefetchRequest& req) {
  const cache::Manifest manifest = cache::read_manifest(req.manifest);
  const std::vector<Target> targets = parse_targets(req.archs);
  Engine& engine = ctx.engine();
  std::vector<std::string> errors, stale;
  const auto specs = rebuild_records(manifest, errors, stale);
  std::vector<std::pair<Specialization, Target>> jobs;
  for (const auto& spec : specs)
    if (spec)
      for (const auto& t : targets) jobs.emplace_back(*spec, t);
  const PrefetchReport r = engine.prefetch(jobs);
  ctx.out << "prefetched " << r.fetched << " of " << count_of(r.jobs, "entry", "entries") << " from "
          << engine.remote()->describe() << ": " << r.on_disk << " already on disk, " << r.missing
          << " not in the remote cache, " << r.refused << " refused"
          << (r.not_kept ? ", " + std::to_string(r.not_kept) + " not kept by the disk" : std::string()) << "\n";
  for (const auto& s : stale) ctx.out << "  " << printable(s) << '\n';
  int status = kExitOk;
  for (std::size_t i = 0; i < errors.size(); ++i)
    if (!errors[i].empty()) {
      ctx.err << "kjit: error: " << printable(manifest.records()[i].describe()) << ": " << printable(errors[i]) << '\n';
      status = kExitFailure;
    }
  if (r.not_kept) status = kExitFailure;
  if (!r.answered) {
    ctx.err << "kjit: error: the " << engine.remote()->describe() << " did not answer; nothing was fetched\n";
    status = kExitFailure;
  }
  return status;
}

}  // namespace

Command add_prefetch_command(CLI::App& app, Context& ctx) {
  auto r = std::make_shared<PrefetchRequest>();
  CLI::App* sub = app.add_subcommand(
      "prefetch", "Fetch a manifest's entries from the remote cache tier onto the disk cache in one round trip");
  sub->add_option("MANIFEST", r->manifest, "Manifest recorded with KJIT_RECORD=MANIFEST")->required()->type_name("");
  sub->add_option("--arch", r->archs, "Targets: sm_XY, sm_XYa, compute_XY or X.Y, comma-separated or repeated")
      ->required()
      ->type_name("ARCH[,ARCH...]")
      ->delimiter(',')
      ->allow_extra_args(false);
  return {sub, [&ctx, r]() { return run_prefetch(ctx, *r); }};
}

}  // namespace kjit::cli
