// `kjit prefetch MANIFEST --arch sm_90[,...]`: at start-up, fetches every entry of a manifest that the
// disk lacks from the remote tier (KJIT_REMOTE_CACHE) in one round trip, onto the disk cache; the first
// calls of the process then load from the disk. Nothing is compiled. Exit status 1 when the remote tier
// does not answer, answers the lookup with an error (NOPERM, LOADING, OOM) or a reply of another shape,
// refuses every value it holds while none was fetched (another secret), or a record cannot be rebuilt;
// entries the tier lacks are counted, not an error (the process compiles them on first use, or takes
// them from a peer).
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
  std::vector<std::string> skipped;
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (specs[i])
      for (const auto& t : targets) {
        // As `kjit warm` compiles it (warm_target).
        const cache::ManifestRecord& record = manifest.records()[i];
        const WarmTarget w = warm_target(t, record.arch_specific, record.arch);
        if (w.target)
          jobs.emplace_back(*specs[i], *w.target);
        else
          skipped.push_back(record.describe() + " for " + t.str() + ": " + w.skipped_because);
      }
  const auto r = engine.prefetch(jobs);
  const std::string remote = engine.remote()->describe();
  ctx.out << "prefetched " << r.fetched << " of " << count_of(r.jobs, "entry", "entries") << " from " << remote << ": "
          << r.on_disk << " already on disk, ";
  if (r.looked_up())
    ctx.out << r.missing << " not in the remote cache, " << r.refused << " refused"
            << (r.not_kept ? ", " + std::to_string(r.not_kept) + " not kept by the disk" : std::string()) << "\n";
  else
    ctx.out << r.missing << " not looked up\n";
  for (const auto& s : skipped) ctx.out << "  skipped: " << printable(s) << '\n';
  for (const auto& s : stale) ctx.out << "  " << printable(s) << '\n';
  int status = kExitOk;
  for (std::size_t i = 0; i < errors.size(); ++i)
    if (!errors[i].empty()) {
      ctx.err << "kjit: error: " << printable(manifest.records()[i].describe()) << ": " << printable(errors[i]) << '\n';
      status = kExitFailure;
    }
  if (r.not_kept) status = kExitFailure;
  if (!r.answered) {
    ctx.err << "kjit: error: the " << remote << " did not answer; nothing was fetched\n";
    status = kExitFailure;
  } else if (!r.lookup_error.empty()) {
    ctx.err << "kjit: error: the " << remote << " refused the lookup: " << printable(r.lookup_error)
            << "; nothing was fetched\n";
    status = kExitFailure;
  } else if (r.fetched == 0 && r.refused > 0) {
    ctx.err << "kjit: error: the " << remote << " holds " << count_of(r.refused, "entry", "entries")
            << " of the manifest, and every one was refused (the warnings above say why); nothing was fetched. "
               "When none is accepted, the usual cause is another deployment secret: this process and the "
               "writer (kjit warm --remote) must use the same KJIT_REMOTE_CACHE_SECRET or "
               "KJIT_REMOTE_CACHE_SECRET_FILE\n";
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
