// `kjit warm MANIFEST --arch sm_80,sm_90 [-j N] [--remote]`: compiles every recorded specialization into
// the cache for each architecture (no GPU needed; --remote: and into the remote tier, KJIT_REMOTE_CACHE).
// `kjit export MANIFEST --out DIR --arch ...`: the same into DIR as a fresh cache root, then DIR/kjit.lock (checked by
// `kjit verify --dir DIR --lock DIR/kjit.lock`). A record of an arch-specific kernel ("arch_specific", e.g. the sm_90
// GEMM's wgmma) is compiled for the sm_XYa it was recorded for when sm_XY or sm_XYa is asked, and skipped (not
// failed), with the reason, for any other architecture and for compute_XY: kjit::warm_target (target.hpp). Every job
// must have stored its entry (else exit status 1); the learned include directives of the manifest's templates go into
// the cache's header index (a strict run keys those templates with them); an export starts from an empty DIR, locks
// exactly the entries (and the header index) it wrote, and is left readable by every user (export_dir.hpp).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <thread>

#include "cli.hpp"
#include "commands.hpp"
#include "context.hpp"
#include "format.hpp"
#include "kjit/cache/export_dir.hpp"
#include "kjit/cache/export_lock.hpp"
#include "kjit/cache/manifest.hpp"
#include "kjit/cache/remote_config.hpp"
#include "kjit/error.hpp"
#include "kjit/usable_cpus.hpp"
#include "param_text.hpp"
#include "warm.hpp"

namespace kjit::cli {
namespace {

namespace fs = std::filesystem;

struct WarmRequest {
  std::string manifest;
  std::vector<std::string> archs;
  unsigned jobs = usable_cpus();
  std::string out_dir;  // export only
  bool remote = false;  // warm only: also push every entry the remote tier lacks
};

// Warms `settings`' cache (a fresh Engine that records nothing) and prints the summary.
// Returns the report.
WarmReport warm_into(Context& ctx, Settings settings, const WarmRequest& r) {
  const cache::Manifest manifest = cache::read_manifest(r.manifest);
  const std::vector<Target> targets = parse_targets(r.archs);
  settings.record_path.reset();  // warming must not append to a manifest (perhaps the one it reads)
  // NVRTC serializes the compiles of one process's threads: on the 16-CPU GPU machine, 16 threads
  // compiled 2.7x as fast as one, 16 processes 12.7x (scratch measurement of 2026-11-24, the bench of
  // bench/bench_warm.py). So with more than one job every compile runs in a child process, as
  // KJIT_COMPILE_ISOLATION=always has it (in-process where children are unsafe: sanitizer builds).
  // Each compile is bounded by KJIT_COMPILE_TIMEOUT and KJIT_COMPILE_MEMORY, and N children run at once:
  // each thread keeps its child for its next kernel of the same template (warm.cpp, CompileChildren).
  if (std::min<std::size_t>(r.jobs, warm_jobs(manifest, targets)) > 1)
    settings.compile_isolation = CompileIsolation::Always;
  Engine engine(std::move(settings));
  if (r.remote && !engine.remote())
    throw Error(
        engine.settings().remote_cache
            ? std::string("--remote: KJIT_CACHE_MODE=off turns every cache off, the remote tier included")
            : std::string("--remote: there is no remote cache tier to push to; set "
                          "KJIT_REMOTE_CACHE=redis://host:port and KJIT_REMOTE_CACHE_SECRET (see `kjit info`)"));
  if (r.remote && !engine.remote()->writable())
    throw Error("--remote: the " + engine.remote()->describe() +
                " is read-only (KJIT_REMOTE_CACHE_MODE=read, or "
                "KJIT_CACHE_MODE readonly / strict, which write nothing anywhere); a writer (CI) runs with both unset "
                "or readwrite");
  if (!engine.disk().writable())
    throw Error("the cache is not writable, so nothing warmed would be kept: " + engine.disk().describe() +
                "; choose a writable directory with --cache-dir or KJIT_CACHE_DIR");
  ctx.out << "warming " << printable(engine.disk().config().root.string()) << " from " << printable(r.manifest) << " ("
          << count_of(manifest.records().size(), "specialization", "specializations") << ") for";
  for (const auto& t : targets) ctx.out << ' ' << t.str();
  ctx.out << " on " << count_of(r.jobs, "thread", "threads") << '\n';
  ctx.out.flush();
  WarmReport report;
  {
    Progress progress(ctx.err, warm_jobs(manifest, targets), Progress::stderr_is_terminal());
    report = warm(engine, manifest, targets, r.jobs, progress, r.remote);
  }
  report.print(ctx.out, manifest.records().size(), targets.size());
  if (cache::Store* remote = engine.remote())
    ctx.out << "remote cache: " << cache::display_url(engine.settings().remote_cache->url) << " ("
            << cache::to_string(remote->writable() ? cache::RemoteMode::ReadWrite : cache::RemoteMode::Read)
            << "): " << report.fetched << " fetched, " << report.pushed << " pushed\n";
  return report;
}

int run_warm(Context& ctx, const WarmRequest& r) {
  ctx.require_readwrite("warm");
  return warm_into(ctx, ctx.settings(), r).failed.empty() ? kExitOk : kExitFailure;
}

int run_export(Context& ctx, const WarmRequest& r) {
  if (r.out_dir.empty())
    throw ValueError("--out: an empty path is not allowed (an unset variable?); give the directory to export into");
  std::error_code ec;
  const fs::path dir = fs::absolute(r.out_dir, ec);
  cache::prepare_export_dir(dir);  // new or empty: the lock will vouch for everything in it
  Settings s = ctx.settings();
  s.cache_dir = dir;
  s.cache_dir_source = "--out";
  s.cache_mode = CacheMode::ReadWrite;  // the export is written whatever KJIT_CACHE_MODE says
  s.cache_layers.clear();               // every entry lands in DIR, none is satisfied from elsewhere
  s.cache_max_bytes.reset();            // and none is evicted
  const WarmReport report = warm_into(ctx, std::move(s), r);
  if (!report.failed.empty()) {
    ctx.err << "kjit: error: export incomplete: " << count_of(report.failed.size(), "job", "jobs") << " failed, so no "
            << cache::kLockFileName << " was written\n";
    return kExitFailure;
  }
  const fs::path lock = dir / cache::kLockFileName;
  const std::vector<cache::LockedFile> locked = cache::lock_entries(dir, report.entries);
  cache::write_lock(lock, locked);
  // The cache writes owner-only directories and files; the runtime user is often another one.
  cache::make_export_readable(dir);
  ctx.out << "exported " << count_of(locked.size(), "entry", "entries") << " to " << printable(dir.string())
          << "; lock " << printable(lock.string()) << '\n';
  return kExitOk;
}

void add_shared_options(CLI::App* sub, WarmRequest& r) {
  sub->add_option("MANIFEST", r.manifest, "Manifest recorded with KJIT_RECORD=MANIFEST")->required()->type_name("");
  sub->add_option("--arch", r.archs, "Targets: sm_XY, sm_XYa, compute_XY or X.Y, comma-separated or repeated")
      ->required()
      ->type_name("ARCH[,ARCH...]")
      ->delimiter(',')
      ->allow_extra_args(false);
  sub->add_option("-j,--jobs", r.jobs,
                  "Compile N at once (default: the CPUs this process may use); above 1, compiles run in N child "
                  "processes (each kept for its thread's next kernels of the same template and options), every compile "
                  "bounded by KJIT_COMPILE_TIMEOUT and KJIT_COMPILE_MEMORY")
      ->type_name("N")
      ->check(CLI::Range(1u, 1024u));
}

}  // namespace

std::vector<Command> add_warm_commands(CLI::App& app, Context& ctx) {
  auto w = std::make_shared<WarmRequest>();
  CLI::App* warm = app.add_subcommand(
      "warm", "Compile every specialization of a manifest into the cache for each --arch (no GPU needed)");
  add_shared_options(warm, *w);
  warm->add_flag("--remote", w->remote,
                 "Also store in the remote cache tier (KJIT_REMOTE_CACHE) every entry it lacks, those already on "
                 "the disk included: how CI fills the tier for a deployment");

  auto e = std::make_shared<WarmRequest>();
  CLI::App* exp = app.add_subcommand(
      "export", "Warm a manifest into a fresh directory and write DIR/kjit.lock (ship DIR as a cache)");
  add_shared_options(exp, *e);
  exp->add_option("--out", e->out_dir, "The directory to export into (a cache root)")->required()->type_name("DIR");
  return {{warm, [&ctx, w]() { return run_warm(ctx, *w); }}, {exp, [&ctx, e]() { return run_export(ctx, *e); }}};
}

}  // namespace kjit::cli
