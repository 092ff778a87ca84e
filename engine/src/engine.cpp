#include "kjit/engine.hpp"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <new>
#include <optional>

#include "cache_keys.hpp"
#include "compiled_entry.hpp"
#include "kjit/cache_config.hpp"
#include "kjit/error.hpp"
#include "kjit/phase_time.hpp"
#include "kjit/trace.hpp"
#include "kjit/usable_cpus.hpp"
#include "recorder.hpp"
#include "single_flight.hpp"
#include "strict_miss.hpp"

namespace kjit {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Threads for prepare_ahead(): two (an op's backward may want two kernels), none where this process may
// use one CPU only (there the work would only slow the thread that waits for its own compile).
unsigned ahead_threads() { return usable_cpus() >= 2 ? 2 : 0; }

std::atomic<Engine*> made_global{nullptr};

}  // namespace

Engine::Engine(Settings settings)
    : settings_(std::move(settings)),
      shape_policy_(settings_.max_specializations),
      flights_(std::make_unique<SingleFlight>()),
      ahead_(ahead_threads()) {
  if (settings_.record_path) recorder_ = std::make_unique<Recorder>(*settings_.record_path, settings_.lock_timeout_s);
}

Engine::~Engine() = default;

Engine& Engine::global() {
  static Engine* engine = [] {  // never destroyed: used until exit
    auto* e = new Engine(kjit::settings());
    made_global.store(e);
    ::pthread_atfork(&Engine::lock_for_fork, &Engine::unlock_after_fork_in_parent, &Engine::unlock_after_fork_in_child);
    return e;
  }();
  return *engine;
}

// In the order the engine nests them (the flights' lock before the table's); the others are taken alone,
// and none is held while a thread waits for anything else (Python's GIL included: the forking thread may
// hold it). A child drops the flights its parent's threads led as it meets them (SingleFlight::claim).
void Engine::lock_for_fork() noexcept {
  Engine* e = made_global.load();
  e->flights_->lock_for_fork();
  e->table_mu_.lock();
  e->family_mu_.lock();
  e->ahead_mu_.lock();
  e->stats_.lock_for_fork();
}

void Engine::unlock_after_fork_in_parent() noexcept {
  Engine* e = made_global.load();
  e->stats_.unlock_after_fork();
  e->ahead_mu_.unlock();
  e->family_mu_.unlock();
  e->table_mu_.unlock();
  e->flights_->unlock_after_fork();
}

// The child's one thread has a thread id of its own, which the table's read-write lock, held for writing by
// the parent's forking thread, would not take for its writer's (an unlock would count a reader off): that
// lock is made anew, held by nobody. The mutexes unlock as they are.
void Engine::unlock_after_fork_in_child() noexcept {
  Engine* e = made_global.load();
  e->stats_.unlock_after_fork();
  e->ahead_mu_.unlock();
  e->family_mu_.unlock();
  new (&e->table_mu_) std::shared_mutex;
  e->flights_->unlock_after_fork();
}

Engine* Engine::global_if_made() noexcept { return made_global.load(); }

const cache::StoreChain& Engine::stores() {
  std::call_once(stores_once_, [&] {
    CacheStores s = open_cache_stores(settings_);
    disk_ = std::move(s.disk);
    stores_ = std::move(s.chain);
  });
  return stores_;
}

cache::DiskCache& Engine::disk() {
  stores();
  return *disk_;
}

cache::Store* Engine::remote() { return stores().remote(); }

cache::CacheKey Engine::key_for(const Specialization& spec, const CompilePlan& plan) const {
  return kjit::key_for(spec, plan);
}

cache::Entry Engine::obtain_entry(const Specialization& spec, const Target& target, const KeyCandidates& cands,
                                  Origin* origin, std::string* log, const char* forbidden) {
  const std::string dir = target.str();
  auto found = [&](cache::StoreChain::Hit& hit) {
    *origin = hit.remote ? Origin::Remote : hit.produced ? Origin::Compiled : Origin::Disk;
    return std::move(hit.entry);
  };
  {
    trace::Range range("load", spec.name_expression());
    PhaseTimer timer(Phase::Store);
    if (auto hit = stores().get_any(keys_of(cands), dir)) return found(*hit);
  }
  if (settings_.cache_mode == CacheMode::Strict) {
    stats_.strict_miss();
    raise_strict_miss(spec, target, cands.front().second, disk().describe());
  }
  const bool may_compile = !(forbidden && *forbidden);
  const CompilePlan plan = [&] {
    PhaseTimer timer(Phase::Compile);  // loads NVRTC, the first time
    return Compiler::plan(target);
  }();
  // A compile that learned a header (a macro-computed include: Compiler::compile) compiled a template that
  // keys otherwise: its binary goes under the key of that template, looked up first (another process
  // may have it), and the template is the current one from then on, so the next specialization keys and
  // compiles it at once. The produce step keeps such a binary in `grown` and declines the key it was
  // asked for (the chain lets that key's lock and lease go); the loop re-keys and offers it again.
  std::optional<CompiledBinary> grown;
  Specialization s = spec.on_current_template();
  cache::CacheKey key;
  auto produce = [&]() -> std::optional<cache::Entry> {
    if (!may_compile)
      throw LaunchError(s.describe() + " for " + dir + " is not compiled yet and cannot be now: " + forbidden);
    CompiledBinary bin = [&] {
      if (grown) {
        CompiledBinary b = std::move(*grown);
        grown.reset();
        return b;
      }
      trace::Range range("compile", s.name_expression());
      return Compiler::compile(s, plan, settings_);
    }();
    if (bin.compiled_template && bin.compiled_template->digest() != s.tmpl().digest()) {
      grown = std::move(bin);
      return std::nullopt;
    }
    if (log) *log = bin.log;
    cache::Entry e = compiled_entry(s, plan, bin, key);
    // Reported here, under the store's per-key lock: the chain defers the event until it lets go.
    stats_.compiled(s, e.key, e.meta, bin.compile_ms);
    return e;
  };
  for (int round = 0;; ++round) {
    {
      PhaseTimer timer(Phase::Key);
      key = kjit::key_for(s, plan);
    }
    if (round > 0) {  // the grown template's key: kept already (by another process, or a layer)?
      trace::Range range("load", s.name_expression());
      PhaseTimer timer(Phase::Store);
      if (auto hit = stores().get(key, dir)) return found(*hit);
    }
    // A caller that may not compile (graph capture) fails at once rather than wait for another process.
    if (auto hit = stores().get_or_try_produce(key, dir, produce, may_compile)) return found(*hit);
    if (round >= 8) throw Error("internal: the headers of " + s.describe() + " kept growing while it compiled");
    s = s.with_template(grown->compiled_template);
  }
}

std::shared_ptr<const SpecializedKernel> Engine::look_up(const Table& table,
                                                         const std::vector<cache::CacheKey>& keys) const {
  std::shared_lock<std::shared_mutex> lock(table_mu_);
  for (const auto& key : keys) {
    auto it = table.find(key);
    if (it != table.end()) return it->second;
  }
  return nullptr;
}

std::shared_ptr<const SpecializedKernel> Engine::prepare(const Specialization& spec, const Target& target,
                                                         Origin* origin) {
  const auto t0 = Clock::now();
  Origin o = Origin::Memory;
  auto p = resolve_entry(spec, target, &o);
  if (recorder_) recorder_->record(spec, target);  // a shared result may come from another Template object
  if (o == Origin::Memory)
    stats_.memory_hit();
  else
    stats_.loaded(spec, p->key, p->meta, o, ms_since(t0), remote() ? remote()->describe() : "");
  if (origin) *origin = o;
  return p;
}

std::shared_ptr<const SpecializedKernel> Engine::compile_only(const Specialization& spec, const Target& target,
                                                              Origin* origin) {
  const std::vector<cache::CacheKey> keys = keys_of(key_candidates(spec, target));
  std::shared_ptr<const SpecializedKernel> known = look_up(prepared_, keys);
  if (!known) {
    // A kernel get() loaded has the entry: its compile-only view (never the loaded kernel itself, so
    // what a compile-only request returns does not depend on what this process launched before).
    if (std::shared_ptr<const SpecializedKernel> l = look_up(loaded_, keys)) {
      auto view = std::make_shared<SpecializedKernel>(*l);
      view->kernel = nullptr;
      std::unique_lock<std::shared_mutex> lock(table_mu_);
      known = prepared_.emplace(view->key, std::move(view)).first->second;
    }
  }
  if (known) {
    stats_.memory_hit();
    if (origin) *origin = Origin::Memory;
    return known;
  }
  auto p = prepare(spec, target, origin);
  std::unique_lock<std::shared_mutex> lock(table_mu_);
  return prepared_.emplace(p->key, std::move(p)).first->second;
}

std::shared_ptr<const SpecializedKernel> Engine::resolve_entry(const Specialization& spec, const Target& target,
                                                               Origin* origin) {
  const KeyCandidates cands = key_candidates(spec, target);
  const cache::CacheKey& id = cands.front().second;
  SingleFlight::Claim c = flights_->claim(id, true, [] { return false; });
  auto p = std::make_shared<SpecializedKernel>();
  *origin = Origin::Memory;
  if (c.wait) {
    c.wait->wait();
    if (c.wait->have_entry) {
      p->key = c.wait->entry.key;
      p->meta = c.wait->entry.meta;
      return p;
    }
    // The leader failed: resolve on our own below.
  }
  try {
    cache::Entry e = obtain_entry(spec, target, cands, origin, &p->log, nullptr);
    p->key = e.key;
    p->meta = e.meta;
    if (c.lead) {
      c.lead->entry = std::move(e);
      c.lead->have_entry = true;
      flights_->land(id, *c.lead);
    }
    return p;
  } catch (...) {
    if (c.lead) flights_->land(id, *c.lead);
    throw;
  }
}

void Engine::prepare_ahead(const SpecKey& key, const Specialization& spec, const Target& target) {
  if (settings_.cache_mode != CacheMode::ReadWrite || ahead_.threads() == 0) return;
  {
    std::lock_guard<std::mutex> lock(ahead_mu_);
    if (!ahead_asked_.insert(key).second) return;
  }
  if (!disk().writable()) return;  // a compile nobody could load later
  // Ahead of use nothing is recorded (KJIT_RECORD) and no load is counted (a compile is, by
  // obtain_entry: it is work done): the call that uses the kernel does both.
  ahead_.submit([this, spec, target] {
    Origin o;
    (void)resolve_entry(spec, target, &o);
  });
}

cache::StoreChain::PrefetchReport Engine::prefetch(const std::vector<std::pair<Specialization, Target>>& jobs) {
  if (!remote())
    throw Error(settings_.remote_cache
                    ? "there is no remote cache tier to prefetch from: KJIT_CACHE_MODE=off turns every cache off"
                    : "there is no remote cache tier to prefetch from: set KJIT_REMOTE_CACHE=redis://host:port (and "
                      "KJIT_REMOTE_CACHE_SECRET) as the processes that fill it do");
  if (!disk().writable())
    throw Error("prefetch keeps entries on the disk cache, and it is not writable: " + disk().describe() +
                "; run it with KJIT_CACHE_MODE=readwrite and a writable KJIT_CACHE_DIR (a strict or readonly "
                "process then reads what it kept)");
  std::vector<cache::StoreChain::PrefetchJob> asks;
  for (const auto& [spec, target] : jobs) asks.push_back({keys_of(key_candidates(spec, target)), target.str()});
  return stores().prefetch(asks);
}

std::shared_ptr<const SpecializedKernel> Engine::load_and_publish(const Specialization& spec, cache::Entry e,
                                                                  std::string log) {
  auto k = std::make_shared<SpecializedKernel>();
  {
    trace::Range range("load", spec.name_expression());
    PhaseTimer timer(Phase::ModuleLoad);
    k->kernel =
        std::make_shared<Kernel>(Module::load(e.payload), e.meta.lowered_name, spec.name_expression(), e.payload);
  }
  k->key = e.key;
  k->meta = std::move(e.meta);
  k->log = std::move(log);
  std::unique_lock<std::shared_mutex> lock(table_mu_);
  return loaded_.emplace(k->key, std::move(k)).first->second;
}

std::shared_ptr<const SpecializedKernel> Engine::get(const Specialization& spec, const Target& target,
                                                     const char* forbidden, Origin* origin) {
  const auto t0 = Clock::now();
  Origin ignored;
  Origin& o = origin ? *origin : ignored;
  o = Origin::Memory;
  const KeyCandidates cands = key_candidates(spec, target);
  const std::vector<cache::CacheKey> keys = keys_of(cands);
  std::shared_ptr<const SpecializedKernel> hit;
  auto look = [&] { return static_cast<bool>(hit = look_up(loaded_, keys)); };
  if (look()) {  // memory hits by key: any candidate key already loaded
    stats_.memory_hit();
    return hit;
  }
  const cache::CacheKey& id = keys.front();
  // A caller that may not compile never leads (its waiters would fail with it), but may wait.
  SingleFlight::Claim c = flights_->claim(id, !(forbidden && *forbidden), look);
  if (c.wait) {
    c.wait->wait();
    if (recorder_ && c.wait->have_entry) recorder_->record(spec, target);
    if (c.wait->loaded) hit = c.wait->loaded;
    // The leader was a prepare(): its entry is here, only the module is not loaded yet.
    else if (c.wait->have_entry && !c.wait->entry.payload.empty())
      hit = load_and_publish(spec, c.wait->entry, "");
    // Else the leader failed: resolve on our own below.
  }
  if (hit) {
    stats_.memory_hit();
    return hit;
  }
  try {
    std::string log;
    cache::Entry e = obtain_entry(spec, target, cands, &o, &log, forbidden);
    if (recorder_) recorder_->record(spec, target);
    if (c.lead) {  // what a waiting prepare() needs, even if the module load below fails
      c.lead->entry.key = e.key;
      c.lead->entry.meta = e.meta;
      c.lead->have_entry = true;
    }
    auto loaded = load_and_publish(spec, std::move(e), std::move(log));
    stats_.loaded(spec, loaded->key, loaded->meta, o, ms_since(t0), remote() ? remote()->describe() : "");
    if (c.lead) {
      c.lead->loaded = loaded;
      flights_->land(id, *c.lead);
    }
    return loaded;
  } catch (...) {
    if (c.lead) flights_->land(id, *c.lead);
    throw;
  }
}

std::shared_ptr<const SpecializedKernel> Engine::find(const SpecKey& key) const noexcept {
  std::shared_lock<std::shared_mutex> lock(table_mu_);
  auto it = fast_.find(key);
  return it == fast_.end() ? nullptr : it->second;
}

void Engine::remember(const SpecKey& key, std::shared_ptr<const SpecializedKernel> kernel) {
  std::unique_lock<std::shared_mutex> lock(table_mu_);
  fast_[key] = std::move(kernel);
}

std::uint64_t Engine::family_id(const Template& t, const std::string& kernel, const CompileOptions& options,
                                bool arch_specific) {
  std::string id = std::to_string(t.uid()) + '\n' + kernel + (arch_specific ? "\nsm_XYa" : "");
  for (const auto& o : options.canonical()) id += '\n' + o;
  std::lock_guard<std::mutex> lock(family_mu_);
  auto [it, inserted] = families_.emplace(std::move(id), families_.size() + 1);
  return it->second;
}

void Engine::clear_memory() {
  std::unique_lock<std::shared_mutex> lock(table_mu_);
  fast_.clear();
  loaded_.clear();
  prepared_.clear();
}

}  // namespace kjit
