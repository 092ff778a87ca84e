// Engine: the in-memory table of loaded kernels in front of the cache's stores and the compiler.
//
//   get(spec, target)  memory table (by cache key) -> stores (the writable disk cache, then its
//                      read-only layers: stores()) -> NVRTC, once per key across
//                      processes and across the threads of this one (in every cache mode); loads the
//                      module. Strict mode raises CacheMissError on a miss.
//   prepare(spec, target)  the same without loading (compile-only; no GPU needed).
//   find(SpecKey)      the hot path: a fixed-size key in a hash table; no hashing of sources, no file
//                      access, no allocation.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kjit/background_jobs.hpp"
#include "kjit/cache/cache_key.hpp"
#include "kjit/cache/disk_cache.hpp"
#include "kjit/cache/redis_store.hpp"
#include "kjit/cache/store_chain.hpp"
#include "kjit/compiler.hpp"
#include "kjit/module.hpp"
#include "kjit/phase_time.hpp"
#include "kjit/settings.hpp"
#include "kjit/shape_policy.hpp"
#include "kjit/specialization.hpp"
#include "kjit/template.hpp"

namespace kjit {

class Recorder;

// Remote: from the remote tier (KJIT_REMOTE_CACHE), compiled by another process of the deployment.
enum class Origin { Memory, Disk, Compiled, Remote };
const char* to_string(Origin o) noexcept;

// A fixed-size identity of (kernel family, template arguments, device) for the hot-path table.
struct SpecKey {
  // Enough for kjit.elementwise's flat kernel of 32 inputs (38 arguments); only the first nargs words are
  // hashed and compared, so a call pays for the arguments it has (and the zeroing of this array).
  static constexpr int kMaxArgs = 40;
  std::uint64_t family = 0;  // Engine::family_id(template, kernel, options)
  std::int32_t device = 0;
  std::uint32_t nargs = 0;
  std::array<std::uint64_t, kMaxArgs> args{};

  bool operator==(const SpecKey& o) const noexcept {
    if (family != o.family || device != o.device || nargs != o.nargs) return false;
    for (std::uint32_t i = 0; i < nargs; ++i)
      if (args[i] != o.args[i]) return false;
    return true;
  }
};

struct SpecKeyHash {
  std::size_t operator()(const SpecKey& k) const noexcept {
    std::uint64_t h = k.family * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(k.device);
    for (std::uint32_t i = 0; i < k.nargs; ++i) {
      h ^= k.args[i] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    }
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};

struct LoadedKernel {
  std::shared_ptr<const Kernel> kernel;
  cache::CacheKey key;
  cache::EntryMetadata meta;
};

struct Resolved {
  std::shared_ptr<const LoadedKernel> loaded;
  Origin origin = Origin::Memory;
  const Kernel& kernel() const { return *loaded->kernel; }
};

struct Prepared {
  cache::CacheKey key;
  // Disk (already cached), Compiled, or Memory: another thread of this process was resolving the same
  // key at the same time, and this call shared its result.
  Origin origin = Origin::Disk;
  cache::EntryMetadata meta;
  std::string log;  // NVRTC warnings when compiled now
};

// What Engine::prefetch did, job by job (a job: one specialization for one target).
struct PrefetchReport {
  std::size_t jobs = 0;
  std::size_t on_disk = 0;   // already in the disk cache or a read-only layer: not asked for
  std::size_t fetched = 0;   // taken from the remote tier and written to the disk
  std::size_t not_kept = 0;  // taken from the remote tier, but the disk failed to keep them (warned)
  std::size_t missing = 0;   // not in the remote tier (or not looked up: the lookup failed)
  std::size_t refused = 0;   // in the remote tier but refused (said by a warning)
  bool answered = true;      // false: the remote tier did not answer (warned); nothing was fetched
  // The tier answered the lookup with an error reply (NOPERM, LOADING, OOM) or a reply that is not one
  // value per key: what it said and what to do (not warned); nothing was fetched.
  std::string lookup_error;
  bool looked_up() const noexcept { return answered && lookup_error.empty(); }
};

struct EngineStats {
  std::uint64_t memory_hits = 0;
  std::uint64_t disk_hits = 0;
  std::uint64_t compiles = 0;
  double compile_ms = 0;     // total NVRTC time of this process
  double disk_load_ms = 0;   // total time of disk hits (read + validate + module load)
  std::uint64_t strict_misses = 0;
  std::uint64_t remote_hits = 0;  // entries taken from the remote tier (not counted in disk_hits)
  std::array<double, kPhaseCount> phase_ms{};  // by Phase (phase_time.hpp): where cold starts went
  HeaderLoadCounts headers;  // header files of template loads: read, or known from the header index
};

// Compiles and disk loads of one kernel (by name expression) in this process.
struct KernelStats {
  std::uint64_t compiles = 0;
  double compile_ms = 0;  // NVRTC time
  std::uint64_t disk_loads = 0;
  double load_ms = 0;     // disk hits: read + validate (+ module load for get())
};

class Engine {
 public:
  // With settings.record_path (KJIT_RECORD), every specialization resolved past the memory table
  // (get() misses, prepare()) is added to that manifest.
  explicit Engine(Settings settings);
  ~Engine();
  // The process-wide engine (settings from the environment).
  static Engine& global();
  // The process-wide engine if global() has made it, else null (never makes it).
  static Engine* global_if_made() noexcept;

  const Settings& settings() const noexcept { return settings_; }
  // The writable disk cache (KJIT_CACHE_DIR; its maintenance: list, prune, clear) and its read-only
  // layers (KJIT_CACHE_PATH).
  cache::DiskCache& disk();
  // The stores a miss in memory consults, in order: disk(), then each read-only layer (never
  // backfilled: they are read in place). Made with disk(), on first use.
  const cache::StoreChain& stores();
  // The remote tier (KJIT_REMOTE_CACHE), the last level of stores(); nullptr when none is configured.
  cache::RedisStore* remote();

  // The cache key of a specialization for a plan (no NVRTC load).
  cache::CacheKey key_for(const Specialization& spec, const CompilePlan& plan) const;

  // `compile_forbidden_reason`, when not empty, makes a miss that would compile an error saying it
  // (e.g. during CUDA graph capture); disk hits are still fine.
  Resolved get(const Specialization& spec, const Target& target, const char* compile_forbidden_reason = nullptr);
  Prepared prepare(const Specialization& spec, const Target& target);
  // Start-up: fetches from the remote tier, in one round trip, the entries of `jobs` that no disk level
  // has, into the disk cache. Throws kjit::Error when no remote tier is configured or the disk cache is
  // not writable (nothing fetched could be kept).
  PrefetchReport prefetch(const std::vector<std::pair<Specialization, Target>>& jobs);

  // Compiles `spec` for `target` into the disk cache on a background thread, for a kernel that a later
  // get() will want: an op's backward, asked for while its forward runs. Returns at once. That get()
  // then loads it from the disk, or waits for the compile in flight (the per-key single flight), so
  // the two compiles overlap instead of following each other. Once per `key` in a process (later
  // calls do nothing), and only where the result can be kept: readwrite mode with a writable disk
  // cache, and a process that may use more than one CPU. No CUDA call is made on that thread (a
  // module load there could break another thread's CUDA graph capture). A failure is dropped: the
  // later get() meets it and raises it.
  void prepare_ahead(const SpecKey& key, const Specialization& spec, const Target& target);
  // Waits for every prepare_ahead() so far; the number of those still queued or running is
  // background_jobs().pending(). stop_background_jobs() drops the queued ones, waits for the running
  // ones and ends prepare_ahead() (the Python module calls it at exit, before the interpreter finalizes).
  const BackgroundJobs& background_jobs() const noexcept { return ahead_; }
  void drain_background_jobs() { ahead_.drain(); }
  void stop_background_jobs() { ahead_.stop(); }

  // Hot path.
  std::shared_ptr<const LoadedKernel> find(const SpecKey& key) const noexcept;
  void remember(const SpecKey& key, std::shared_ptr<const LoadedKernel> kernel);
  // A stable id for (template, kernel name, options), interned once per family.
  std::uint64_t family_id(const Template& t, const std::string& kernel, const CompileOptions& options,
                          bool arch_specific = false);
  // Counts a hot-path hit (find() does not, so that callers decide what a hit is).
  void count_memory_hit() noexcept { memory_hits_.fetch_add(1, std::memory_order_relaxed); }

  // How many distinct values of a shape parameter each kernel specializes on
  // (settings.max_specializations, KJIT_MAX_SPECIALIZATIONS). State, not a counter: reset_stats()
  // leaves it alone.
  ShapePolicy& shape_policy() noexcept { return shape_policy_; }
  const ShapePolicy& shape_policy() const noexcept { return shape_policy_; }

  EngineStats stats() const;
  // Per kernel, by name expression: at most kernel_stats_limit() entries, the last of them
  // kOtherKernels, the sum of the kernels seen once the others were taken (a process that specializes
  // without bound must not grow without bound). reset_stats() empties it.
  static constexpr std::size_t kMaxKernelStats = 1024;
  static constexpr const char* kOtherKernels = "(other kernels)";
  std::unordered_map<std::string, KernelStats> kernel_stats() const;
  std::size_t kernel_stats_limit() const noexcept { return kernel_stats_limit_; }
  // At least 1 (the kOtherKernels entry); applies to kernels seen from now on.
  void set_kernel_stats_limit(std::size_t limit);
  void reset_stats();
  // Drops every loaded kernel of this process (the disk cache is untouched).
  void clear_memory();

 private:
  // Makes disk_ and stores_ (once).
  void open_stores();
  // prepare() without recording or counting the result (prepare_ahead's jobs; a compile is counted by
  // obtain_entry): one flight per key, shared with any other caller that wants it at the same time.
  Prepared resolve_entry(const Specialization& spec, const Target& target);
  // Loads from disk or compiles: the cache entry for `spec` (no module load).
  using Candidates = std::vector<std::pair<CompilePlan, cache::CacheKey>>;
  // The (plan, key) pairs under which `spec` may be cached for `target`: cubin and PTX (found without
  // loading NVRTC, which decides between them only when something must be compiled).
  Candidates candidates(const Specialization& spec, const Target& target) const;
  // The key inputs that depend on the specialization only (digest, name expression, options, the type
  // macros), made once for every plan a lookup tries; key_of completes them for one plan.
  static cache::KeyInputs key_inputs(const Specialization& spec);
  static cache::CacheKey key_of(cache::KeyInputs in, const CompilePlan& plan);
  cache::Entry obtain_entry(const Specialization& spec, const Target& target, const Candidates& cands,
                            Origin* origin, std::string* log, const char* compile_forbidden_reason);
  // by_key_ lookup of any candidate key (takes table_mu_).
  std::shared_ptr<const LoadedKernel> loaded_for(const Candidates& cands) const;
  // Loads `e`'s module and publishes it in by_key_; returns the kernel the table holds for its key.
  std::shared_ptr<const LoadedKernel> load_and_publish(const Specialization& spec, cache::Entry e);

  // Resolutions in progress in this process, by the first candidate key: a get() or prepare() that
  // misses a key another thread is already loading or compiling waits for that result instead of
  // compiling it again (between processes the per-key flock does this, but only for a writable cache).
  struct InFlight;
  struct Claim {
    std::shared_ptr<const LoadedKernel> hit;  // found in by_key_ (only when asked to look there)
    std::shared_ptr<InFlight> wait;           // another thread's resolution to wait for
    std::shared_ptr<InFlight> lead;           // ours: resolve, then land()
  };
  // All under in_flight_mu_: by_key_ (when `table` is given), else the resolution in flight for `id`,
  // else (when `may_lead`) a new one led by the caller. Nothing of the three: resolve without sharing.
  Claim claim(const cache::CacheKey& id, const Candidates* table, bool may_lead);
  // Ends a resolution led by this thread (after its result, if any, is published) and wakes its waiters.
  void land(const cache::CacheKey& id, InFlight& flight);

  Settings settings_;
  std::once_flag stores_once_;  // makes disk_ and stores_
  std::shared_ptr<cache::DiskCache> disk_;
  std::shared_ptr<cache::RedisStore> remote_;
  cache::StoreChain stores_;
  std::unique_ptr<Recorder> recorder_;  // KJIT_RECORD
  ShapePolicy shape_policy_;

  mutable std::shared_mutex table_mu_;
  std::unordered_map<SpecKey, std::shared_ptr<const LoadedKernel>, SpecKeyHash> fast_;
  std::unordered_map<cache::CacheKey, std::shared_ptr<const LoadedKernel>, cache::CacheKeyHash> by_key_;

  std::mutex in_flight_mu_;  // taken before table_mu_ where both are held
  std::unordered_map<cache::CacheKey, std::shared_ptr<InFlight>, cache::CacheKeyHash> in_flight_;

  std::mutex family_mu_;
  std::unordered_map<std::string, std::uint64_t> families_;

  // Counts a compile, or a load (origin Disk or Remote; others are not counted) of `spec`, and reports it
  // (log event) after it happened.
  void count_compile(const Specialization& spec, const cache::CacheKey& key, const cache::EntryMetadata& meta,
                     double ms);
  void count_load(const Specialization& spec, const cache::CacheKey& key, const cache::EntryMetadata& meta,
                  Origin origin, double ms);
  KernelStats& kernel_stats_for(const std::string& name_expression);  // under kernel_stats_mu_

  mutable std::mutex kernel_stats_mu_;
  std::unordered_map<std::string, KernelStats> kernel_stats_;
  std::size_t kernel_stats_limit_ = kMaxKernelStats;

  std::atomic<std::uint64_t> memory_hits_{0}, disk_hits_{0}, compiles_{0}, strict_misses_{0}, remote_hits_{0};
  std::atomic<std::uint64_t> compile_us_{0}, disk_load_us_{0};

  std::mutex ahead_mu_;
  std::unordered_set<SpecKey, SpecKeyHash> ahead_asked_;  // every key prepare_ahead() took, once
  BackgroundJobs ahead_;  // last: destroyed (drained) first, while the members its jobs use still exist
};

}  // namespace kjit
