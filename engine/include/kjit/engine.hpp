// Engine: the in-memory table of specialized kernels in front of the cache's stores and the compiler.
//
//   get(spec, target)      memory table (by cache key) -> the store chain (disk, read-only layers, remote
//                          tier: cache_config.hpp) -> NVRTC, once per key across processes (the chain's
//                          lock and lease) and across the threads of this one (single_flight.hpp); loads
//                          the module. Strict mode raises CacheMissError on a miss.
//   prepare(spec, target)  the same without loading (compile-only; no GPU needed): into the stores.
//   compile_only(spec, target)  prepare() remembered in memory: what front ends ask (Python's arch=).
//   find(SpecKey)          the hot path: a fixed-size key in a hash table; no hashing of sources, no
//                          file access, no allocation.
// What it did is counted in a StatsBook (engine_stats.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kjit/background_jobs.hpp"
#include "kjit/cache/cache_key.hpp"
#include "kjit/cache/disk_cache.hpp"
#include "kjit/cache/store_chain.hpp"
#include "kjit/compiler.hpp"
#include "kjit/engine_stats.hpp"
#include "kjit/settings.hpp"
#include "kjit/shape_policy.hpp"
#include "kjit/spec_key.hpp"
#include "kjit/specialization.hpp"
#include "kjit/specialized_kernel.hpp"
#include "kjit/template.hpp"

namespace kjit {

class Recorder;
class SingleFlight;

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
  // The writable disk cache (KJIT_CACHE_DIR; its maintenance: list, prune, clear) with its read-only
  // layers (KJIT_CACHE_PATH); made with stores(), on first use.
  cache::DiskCache& disk();
  // The stores a miss in memory consults and a compile writes to, in order (open_cache_stores).
  const cache::StoreChain& stores();
  // The remote level of stores() (KJIT_REMOTE_CACHE); nullptr when none is configured.
  cache::Store* remote();

  // The cache key of a specialization for a plan (no NVRTC load).
  cache::CacheKey key_for(const Specialization& spec, const CompilePlan& plan) const;

  // `compile_forbidden_reason`, when not empty, makes a miss that would compile an error saying it
  // (e.g. during CUDA graph capture); disk hits are still fine. `origin` (optional): where this call
  // found it. The kernel is the table's: the same object for every call that finds it.
  std::shared_ptr<const SpecializedKernel> get(const Specialization& spec, const Target& target,
                                               const char* compile_forbidden_reason = nullptr,
                                               Origin* origin = nullptr);
  // Into the stores without loading (kernel null): found in a store or compiled into it, on every call
  // (`kjit warm` and `kjit compile` rely on the entry being there when it returns).
  std::shared_ptr<const SpecializedKernel> prepare(const Specialization& spec, const Target& target,
                                                   Origin* origin = nullptr);
  // prepare() once per key in this process: later calls (and a kernel get() loaded) are memory hits. What it
  // returns is compile-only (no loaded kernel), whatever get() loaded before.
  std::shared_ptr<const SpecializedKernel> compile_only(const Specialization& spec, const Target& target,
                                                        Origin* origin = nullptr);
  // Start-up: fetches from the remote tier, in one round trip, the entries of `jobs` that no disk level
  // has, into the disk cache. Throws kjit::Error when no remote tier is configured or the disk cache is
  // not writable (nothing fetched could be kept).
  cache::StoreChain::PrefetchReport prefetch(const std::vector<std::pair<Specialization, Target>>& jobs);

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
  std::shared_ptr<const SpecializedKernel> find(const SpecKey& key) const noexcept;
  void remember(const SpecKey& key, std::shared_ptr<const SpecializedKernel> kernel);
  // A stable id for (template, kernel name, options), interned once per family.
  std::uint64_t family_id(const Template& t, const std::string& kernel, const CompileOptions& options,
                          bool arch_specific = false);
  // Counts a hot-path hit (find() does not, so that callers decide what a hit is).
  void count_memory_hit() noexcept { stats_.memory_hit(); }

  // How many distinct values of a shape parameter each kernel specializes on
  // (settings.max_specializations, KJIT_MAX_SPECIALIZATIONS). State, not a counter: reset_stats()
  // leaves it alone.
  ShapePolicy& shape_policy() noexcept { return shape_policy_; }
  const ShapePolicy& shape_policy() const noexcept { return shape_policy_; }

  // What this process did (engine_stats.hpp); reset_stats() starts them over.
  EngineStats stats() const { return stats_.totals(); }
  std::unordered_map<std::string, KernelStats> kernel_stats() const { return stats_.kernels(); }
  std::size_t kernel_stats_limit() const noexcept { return stats_.kernel_limit(); }
  void set_kernel_stats_limit(std::size_t limit) { stats_.set_kernel_limit(limit); }
  void reset_stats() { stats_.reset(); }
  // Drops every kernel this process loaded or prepared (the stores are untouched).
  void clear_memory();

 private:
  // pthread_atfork handlers of the global engine: a fork waits for the threads inside the engine's locks (the
  // flights', the table's, the families', the ahead-of-use keys', the per-kernel stats'), which its forking
  // thread holds across it, so that no child inherits one held by a thread the child does not have (its
  // next use would wait forever: a child forked while another thread loaded kernels hung so).
  static void lock_for_fork() noexcept;
  static void unlock_after_fork_in_parent() noexcept;
  static void unlock_after_fork_in_child() noexcept;

  using Table = std::unordered_map<cache::CacheKey, std::shared_ptr<const SpecializedKernel>, cache::CacheKeyHash>;
  // The entry for one of `keys` from the stores, else compiled into them (strict mode: CacheMissError).
  cache::Entry obtain_entry(const Specialization& spec, const Target& target,
                            const std::vector<std::pair<CompilePlan, cache::CacheKey>>& cands, Origin* origin,
                            std::string* log, const char* compile_forbidden_reason);
  // prepare() without recording or counting a load (prepare_ahead's jobs), shared with any other thread
  // that wants the key at the same time.
  std::shared_ptr<const SpecializedKernel> resolve_entry(const Specialization& spec, const Target& target,
                                                         Origin* origin);
  // The kernel of any of `keys` in `table` (under table_mu_).
  std::shared_ptr<const SpecializedKernel> look_up(const Table& table, const std::vector<cache::CacheKey>& keys) const;
  // Loads `e`'s module and publishes it in loaded_; returns the kernel the table holds for its key.
  std::shared_ptr<const SpecializedKernel> load_and_publish(const Specialization& spec, cache::Entry e,
                                                            std::string log);

  Settings settings_;
  std::once_flag stores_once_;
  std::shared_ptr<cache::DiskCache> disk_;
  cache::StoreChain stores_;
  std::unique_ptr<Recorder> recorder_;  // KJIT_RECORD
  ShapePolicy shape_policy_;
  StatsBook stats_;
  std::unique_ptr<SingleFlight> flights_;

  mutable std::shared_mutex table_mu_;
  std::unordered_map<SpecKey, std::shared_ptr<const SpecializedKernel>, SpecKeyHash> fast_;
  Table loaded_;    // by cache key: kernels loaded by get()
  Table prepared_;  // by cache key: what compile_only() prepared

  std::mutex family_mu_;
  std::unordered_map<std::string, std::uint64_t> families_;

  std::mutex ahead_mu_;
  std::unordered_set<SpecKey, SpecKeyHash> ahead_asked_;  // every key prepare_ahead() took, once
  BackgroundJobs ahead_;  // last: destroyed (drained) first, while the members its jobs use still exist
};

}  // namespace kjit
