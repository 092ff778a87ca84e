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
#include "kjit/error.hpp"
#include "kjit/spec_record.hpp"

namespace kjit::cli {
namespace {

// A record rebuilt as a Specialization (or why it could not be).
struct Rebuilt {
  std::optional<Specialization> spec;
  std::string error;
};

// Rebuilds every record; each distinct template once.
std::vector<Rebuilt> rebuild(const cache::Manifest& manifest, WarmReport& report) {
  std::map<std::string, std::shared_ptr<const Template>> templates;  // by name + recorded digest
  std::vector<Rebuilt> out;
  for (const auto& r : manifest.records()) {
    Rebuilt b;
    try {
      const std::string id = (r.builtin ? "builtin:" : "file:") + r.template_name + ":" + r.template_digest;
      auto it = templates.find(id);
      if (it == templates.end()) {
        std::string stale;
        it = templates.emplace(id, template_of(r, &stale)).first;
        if (!stale.empty()) report.stale.push_back("template " + r.template_name + ": " + stale);
      }
      b.spec.emplace(specialization_of(r, it->second));
    } catch (const std::exception& e) {
      b.error = std::string("cannot rebuild the recorded specialization: ") + e.what();
    }
    out.push_back(std::move(b));
  }
  return out;
}

// The job's entry as the disk cache now holds it: its path in the writable root, or empty when only a
// read-only layer holds it. Throws Error when no layer holds it: the store failed (the cache says why).
std::filesystem::path stored_entry(cache::DiskCache& disk, const Prepared& p) {
  const std::string& target = cache::filed_target(p.meta);
  // load() validates the file as a lookup would, and reads the writable root first.
  if (!disk.load(p.key, target))
    throw Error("compiled, but the entry was not stored in the cache, so nothing was warmed: " + disk.describe() +
                "; fix what it names (free space, permissions) and run the command again");
  const std::filesystem::path path = disk.entry_path(p.key, target);
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? path : std::filesystem::path();
}

}  // namespace

void WarmReport::print(std::ostream& out, std::size_t records, std::size_t targets) const {
  out << count_of(jobs, "job", "jobs") << " (" << count_of(records, "specialization", "specializations") << " x "
      << count_of(targets, "target", "targets") << "): " << compiled << " compiled, " << cached
      << " already cached, " << failed.size() << " failed\n";
  // Names come from the manifest and reasons quote compile logs: through printable(), logs keep their lines.
  for (const auto& s : stale) out << "  " << printable(s) << '\n';
  for (const auto& f : failed)
    out << "  failed: " << printable(f.what) << ": " << printable(f.reason, Newlines::Keep) << '\n';
}

WarmReport warm(Engine& engine, const cache::Manifest& manifest, const std::vector<Target>& targets,
                unsigned threads, Progress& progress) {
  WarmReport report;
  report.jobs = warm_jobs(manifest, targets);
  const std::vector<Rebuilt> specs = rebuild(manifest, report);
  const auto& records = manifest.records();

  std::mutex mu;  // guards report
  std::atomic<std::size_t> next{0};
  auto worker = [&]() {
    for (std::size_t i; (i = next.fetch_add(1)) < report.jobs;) {
      const std::size_t r = i / targets.size();
      const Target& target = targets[i % targets.size()];
      const std::string what = records[r].describe() + " for " + target.str();
      std::string line;
      try {
        if (!specs[r].spec) throw Error(specs[r].error);
        const Prepared p = engine.prepare(*specs[r].spec, target);
        const std::filesystem::path entry = stored_entry(engine.disk(), p);
        std::lock_guard<std::mutex> lock(mu);
        if (!entry.empty()) report.entries.push_back(entry);
        if (p.origin == Origin::Compiled) {
          ++report.compiled;
          line = "compiled " + what + " (" + human_ms(p.meta.compile_ms) + ")";
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
  const unsigned n = static_cast<unsigned>(std::min<std::size_t>(std::max(threads, 1u), std::max<std::size_t>(report.jobs, 1)));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  progress.finish();
  std::sort(report.entries.begin(), report.entries.end());
  report.entries.erase(std::unique(report.entries.begin(), report.entries.end()), report.entries.end());
  return report;
}

}  // namespace kjit::cli
