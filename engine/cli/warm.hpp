// Warming a cache from a manifest: every record rebuilt (template, specialization) and prepared for
// every target on N threads (Engine::prepare is thread-safe; NVRTC compiles in parallel; the per-key
// lock makes concurrent warms compile each key once). Shared by `kjit warm` and `kjit export`.
// A job succeeds only when its entry is on disk afterwards: a compile whose store failed (disk full, so
// the cache went memory-only) warmed nothing and is a failure.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kjit/cache/manifest.hpp"
#include "kjit/engine.hpp"
#include "kjit/target.hpp"
#include "progress.hpp"

namespace kjit::cli {

struct WarmFailure {
  std::string what;    // "add_constant(T=float32, VEC=4) from template add_constant for sm_90"
  std::string reason;  // the error message
};

struct WarmReport {
  std::size_t jobs = 0;  // records x targets
  std::size_t compiled = 0;
  std::size_t cached = 0;           // already in the cache (the remote tier's included)
  std::size_t fetched = 0;          // of those, taken from the remote tier
  std::size_t pushed = 0;           // entries this warm stored in the remote tier
  std::size_t choices = 0;          // tuned choices of the manifest installed into the cache (choice_store.hpp)
  std::vector<WarmFailure> failed;  // jobs, and tuned choices that could not be installed
  // Jobs with no target to compile for (warm_target: an arch-specific record asked for another architecture
  // or for compute_XY), with why; neither compiled nor failed.
  std::vector<WarmFailure> skipped;
  std::vector<std::string> stale;  // one note per record whose template changed since recording
  // The entry file of every job that succeeded from the writable cache root (sorted, unique: jobs may
  // share an entry); jobs satisfied by a read-only layer are not listed. Then the tuned choices installed.
  std::vector<std::filesystem::path> entries;

  // "8 jobs (4 specializations x 2 targets): 6 compiled, 2 already cached, 0 failed" (then ", 1 skipped"
  // when some were) and the notes.
  void print(std::ostream& out, std::size_t records, std::size_t targets) const;
};

// Installs every tuned choice of `manifest` into `engine`'s writable cache (a failure goes to report.failed).
void install_choices(Engine& engine, const cache::Manifest& manifest, WarmReport& report);

// Counts jobs for the progress display before warming.
inline std::size_t warm_jobs(const cache::Manifest& m, const std::vector<Target>& targets) {
  return m.records().size() * targets.size();
}

// Rebuilds each record of `manifest` as a Specialization; the records that cannot be rebuilt get their
// reason in `errors` (same index, empty when rebuilt) and notes on changed templates go to `stale`.
std::vector<std::optional<Specialization>> rebuild_records(const cache::Manifest& manifest,
                                                           std::vector<std::string>& errors,
                                                           std::vector<std::string>& stale);

// `push_remote`: also store in the remote tier every job's entry that it lacks (engine.remote() must be
// writable), e.g. entries that were on the disk already.
WarmReport warm(Engine& engine, const cache::Manifest& manifest, const std::vector<Target>& targets, unsigned threads,
                Progress& progress, bool push_remote = false);

}  // namespace kjit::cli
