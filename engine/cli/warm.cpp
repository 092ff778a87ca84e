#include "warm.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <sys/stat.h>

#include "format.hpp"
#include "kjit/cache/choice_store.hpp"
#include "kjit/cache/header_index.hpp"
#include "kjit/cache_config.hpp"
#include "kjit/compile_sandbox.hpp"
#include "kjit/error.hpp"
#include "kjit/spec_record.hpp"
#include "kjit/template.hpp"

namespace kjit::cli {
namespace {

// The job's entry as the disk cache now holds it: its path in the writable root, or empty when only a
// read-only layer holds it. Throws Error when no layer holds it: the store failed (the cache says why).
std::filesystem::path stored_entry(cache::DiskCache& disk, const SpecializedKernel& p) {
  const std::string& target = cache::filed_target(p.meta);
  // load() validates the file as a lookup would, and reads the writable root first.
  if (!disk.load(p.key, target))
    throw Error("compiled, but the entry was not stored in the cache, so nothing was warmed: " + disk.describe() +
                "; fix what it names (free space, permissions) and run the command again");
  const std::filesystem::path path = disk.entry_path(p.key, target);
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? path : std::filesystem::path();
}

// Stores the job's entry in the remote tier when it lacks a valid one (a job compiled here was stored
// already, unless that store failed; a value there that is refused, e.g. sealed with an old secret, is
// replaced). Throws Error when it cannot.
void push_to_remote(Engine& engine, const SpecializedKernel& p) {
  cache::Store& remote = *engine.remote();
  const std::string& target = cache::filed_target(p.meta);
  if (remote.get(p.key, target)) return;
  const auto entry = engine.disk().load(p.key, target);
  if (!entry)
    throw Error("its entry is not on the disk cache (" + engine.disk().describe() +
                "), so there is nothing to push; fix the disk cache and run the command again");
  if (!remote.put(*entry))
    throw Error("not stored in the " + remote.describe() +
                " (it does not answer, or refused it: see the warning above); fix that and run the command again");
}

// The include directives the manifest's templates learned (their records carry them; a compile here may
// have learned more: Template::current) go into the header index of the cache warmed, in each template's
// learning scope: a strict run that loads a template from its files keys it with the same headers as the
// recording run did only if it finds them (on this machine, or in the shipped folder). An export's lock
// vouches for the index it wrote.
void ship_learned_includes(Engine& engine, const std::vector<std::optional<Specialization>>& specs,
                           WarmReport& report) {
  const std::shared_ptr<cache::HeaderIndex> index = header_index_for(engine.settings());
  bool any = false;
  for (const auto& spec : specs) {
    if (!spec) continue;
    const std::shared_ptr<const Template> t = spec->tmpl().current();
    for (const auto& [sha, directives] : t->learned_includes())
      for (const auto& d : directives) {
        index->learn(t->learning_scope(), sha, d);
        any = true;
      }
  }
  if (!any) return;
  index->save();
  const std::filesystem::path file = index->file();
  struct stat st{};
  if (engine.disk().writable() && !file.empty() && ::lstat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode))
    report.entries.push_back(file);
}

}  // namespace

std::vector<std::optional<Specialization>> rebuild_records(const cache::Manifest& manifest,
                                                           std::vector<std::string>& errors,
                                                           std::vector<std::string>& stale) {
  std::map<std::string, std::shared_ptr<const Template>> templates;  // by name + recorded digest
  std::vector<std::optional<Specialization>> out;
  errors.assign(manifest.records().size(), std::string());
  for (const auto& r : manifest.records()) {
    std::optional<Specialization> spec;
    try {
      const std::string id = (r.builtin ? "builtin:" : "file:") + r.template_name + ":" + r.template_digest;
      auto it = templates.find(id);
      if (it == templates.end()) {
        std::string note;
        it = templates.emplace(id, template_of(r, &note)).first;
        if (!note.empty()) stale.push_back("template " + r.template_name + ": " + note);
      }
      spec.emplace(specialization_of(r, it->second));
    } catch (const std::exception& e) {
      errors[out.size()] = std::string("cannot rebuild the recorded specialization: ") + e.what();
    }
    out.push_back(std::move(spec));
  }
  return out;
}

void WarmReport::print(std::ostream& out, std::size_t records, std::size_t targets) const {
  out << count_of(jobs, "job", "jobs") << " (" << count_of(records, "specialization", "specializations") << " x "
      << count_of(targets, "target", "targets") << "): " << compiled << " compiled, " << cached << " already cached, "
      << failed.size() << " failed"
      << (skipped.empty() ? std::string() : ", " + std::to_string(skipped.size()) + " skipped") << '\n';
  if (choices) out << count_of(choices, "tuned choice", "tuned choices") << " installed\n";
  // Names come from the manifest and reasons quote compile logs: through printable(), logs keep their lines.
  for (const auto& s : stale) out << "  " << printable(s) << '\n';
  for (const auto& f : skipped) out << "  skipped: " << printable(f.what) << ": " << printable(f.reason) << '\n';
  for (const auto& f : failed)
    out << "  failed: " << printable(f.what) << ": " << printable(f.reason, Newlines::Keep) << '\n';
}

void install_choices(Engine& engine, const cache::Manifest& manifest, WarmReport& report) {
  if (manifest.choices().empty()) return;
  // Every choice, whatever --arch says: a choice's key names its architecture already.
  const cache::ChoiceStore store(choice_store_config(engine.settings()));
  for (const auto& [key, value] : manifest.choices()) {
    std::string failure;
    try {
      failure = store.save(key, value);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    if (failure.empty()) {
      ++report.choices;
      if (store.writable()) report.entries.push_back(store.path_of(store.config().root, key));  // locked by export
    } else
      report.failed.push_back({"tuned choice " + key + " = " + value, failure});
  }
}

WarmReport warm(Engine& engine, const cache::Manifest& manifest, const std::vector<Target>& targets, unsigned threads,
                Progress& progress, bool push_remote) {
  WarmReport report;
  report.jobs = warm_jobs(manifest, targets);
  std::vector<std::string> errors;
  const std::vector<std::optional<Specialization>> specs = rebuild_records(manifest, errors, report.stale);
  const std::uint64_t stored_before = engine.remote() ? engine.remote()->stored() : 0;
  const auto& records = manifest.records();

  // Jobs run grouped by template, so that a thread's next job is most often of the template its kept
  // compile child (CompileChildren) serves.
  std::vector<std::size_t> order(records.size());
  for (std::size_t r = 0; r < order.size(); ++r) order[r] = r;
  auto lineage = [&](std::size_t r) { return specs[r] ? specs[r]->tmpl().digest() : std::string(); };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return lineage(a) < lineage(b); });

  std::mutex mu;  // guards report
  std::atomic<std::size_t> next{0};
  auto worker = [&]() {
    CompileChildren keep;  // this thread's compile child, reused for its next job of the same template
    for (std::size_t i; (i = next.fetch_add(1)) < report.jobs;) {
      const std::size_t r = order[i / targets.size()];
      const Target& asked = targets[i % targets.size()];
      // An arch-specific record is compiled for its sm_XYa (what its family looks up), nowhere else.
      const WarmTarget w = warm_target(asked, records[r].arch_specific, records[r].arch);
      const std::optional<Target>& target = w.target;
      const std::string what = records[r].describe() + " for " + (target ? *target : asked).str();
      if (!target) {
        {
          std::lock_guard<std::mutex> lock(mu);
          report.skipped.push_back({what, w.skipped_because});
        }
        progress.step("skipped " + what);
        continue;
      }
      std::string line;
      try {
        if (!specs[r]) throw Error(errors[r]);
        Origin origin;
        const auto k = engine.prepare(*specs[r], *target, &origin);
        const SpecializedKernel& p = *k;
        const std::filesystem::path entry = stored_entry(engine.disk(), p);
        if (push_remote) push_to_remote(engine, p);
        std::lock_guard<std::mutex> lock(mu);
        if (!entry.empty()) report.entries.push_back(entry);
        if (origin == Origin::Compiled) {
          ++report.compiled;
          line = "compiled " + what + " (" + human_ms(p.meta.compile_ms) + ")";
        } else if (origin == Origin::Remote) {
          ++report.cached;
          ++report.fetched;
          line = "fetched " + what + " from the remote cache";
        } else {
          ++report.cached;
          line = "already cached " + what;
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        report.failed.push_back({what, e.what()});
        line = "FAILED " + what;
      }
      progress.step(line);
    }
  };
  const unsigned n =
      static_cast<unsigned>(std::min<std::size_t>(std::max(threads, 1u), std::max<std::size_t>(report.jobs, 1)));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  progress.finish();
  if (engine.remote()) report.pushed = static_cast<std::size_t>(engine.remote()->stored() - stored_before);
  ship_learned_includes(engine, specs, report);
  std::sort(report.entries.begin(), report.entries.end());
  report.entries.erase(std::unique(report.entries.begin(), report.entries.end()), report.entries.end());
  install_choices(engine, manifest, report);
  std::sort(report.entries.begin(), report.entries.end());
  return report;
}

}  // namespace kjit::cli
