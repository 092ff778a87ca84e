#include "kjit/engine.hpp"

#include <chrono>
#include <condition_variable>
#include <ctime>
#include <optional>
#include <thread>

#include "kjit/cache/cluster_flight.hpp"
#include "kjit/cache_config.hpp"
#include "kjit/compile_command.hpp"
#include "kjit/cuda_toolkit.hpp"
#include "kjit/driver_library.hpp"
#include "kjit/error.hpp"
#include "kjit/log.hpp"
#include "kjit/trace.hpp"
#include "kjit/usable_cpus.hpp"
#include "recorder.hpp"

#ifndef KJIT_VERSION
#define KJIT_VERSION "0.0.0"
#endif

namespace kjit {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t micros_since(Clock::time_point t0) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
}

// A log event about `spec`'s cache entry (key and metadata).
log::Event entry_event(log::Level level, const char* kind, const Specialization& spec, const cache::CacheKey& key,
                       const cache::EntryMetadata& meta, Origin origin, double ms) {
  log::Event e;
  e.level = level;
  e.kind = kind;
  e.key = key.hex();
  e.template_name = spec.tmpl().name();
  e.kernel = spec.name_expression();
  e.target = meta.target;
  e.origin = to_string(origin);
  e.ms = ms;
  return e;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string driver_version_text() {
  std::string why;
  if (!DriverLibrary::available(&why)) return "none";
  return std::to_string(DriverLibrary::get().driver_version());
}

}  // namespace

const char* to_string(Origin o) noexcept {
  switch (o) {
    case Origin::Memory: return "memory";
    case Origin::Disk: return "disk";
    case Origin::Compiled: return "compiled";
    case Origin::Remote: return "remote";
  }
  return "?";
}

namespace {
// Threads for prepare_ahead(): two (an op's backward may want two kernels), none where this process may
// use one CPU only (there the work would only slow the thread that waits for its own compile).
unsigned ahead_threads() { return usable_cpus() >= 2 ? 2 : 0; }
}  // namespace

Engine::Engine(Settings settings)
    : settings_(std::move(settings)), shape_policy_(settings_.max_specializations), ahead_(ahead_threads()) {
  if (settings_.record_path) recorder_ = std::make_unique<Recorder>(*settings_.record_path, settings_.lock_timeout_s);
}

Engine::~Engine() = default;

namespace {
std::atomic<Engine*> made_global{nullptr};
}  // namespace

Engine& Engine::global() {
  static Engine* engine = [] {  // never destroyed: used until exit
    auto* e = new Engine(kjit::settings());
    made_global.store(e);
    return e;
  }();
  return *engine;
}

Engine* Engine::global_if_made() noexcept { return made_global.load(); }

void Engine::open_stores() {
  std::call_once(stores_once_, [&] {
    disk_ = std::make_shared<cache::DiskCache>(disk_cache_config(settings_));
    std::vector<cache::StoreChain::Level> levels{{disk_, false}};
    for (const auto& layer : disk_->layers()) levels.push_back({layer, false});
    // Mode off means no cache at all; in every other mode the remote tier is read (strict included: it
    // fetches, never compiles), and a hit is copied to the disk when the disk is writable. Modes
    // readonly and strict write nothing anywhere: the remote tier is read-only for them too.
    if (settings_.remote_cache && settings_.cache_mode != CacheMode::Off) {
      cache::RemoteConfig remote = *settings_.remote_cache;
      if (settings_.cache_mode != CacheMode::ReadWrite) remote.mode = cache::RemoteMode::Read;
      // A waiter gives up on another process's compile after what one compile may take, plus a lease
      // (the disk's lock waiters allow for this wait: disk_cache_config).
      remote.wait_limit_s = remote_wait_limit_s(settings_);
      remote_ = std::make_shared<cache::RedisStore>(std::move(remote));
      levels.push_back({remote_, true});
    }
    stores_ = cache::StoreChain(std::move(levels));
  });
}

cache::DiskCache& Engine::disk() {
  open_stores();
  return *disk_;
}

const cache::StoreChain& Engine::stores() {
  open_stores();
  return stores_;
}

cache::RedisStore* Engine::remote() {
  open_stores();
  return remote_.get();
}

cache::KeyInputs Engine::key_inputs(const Specialization& spec) {
  cache::KeyInputs in;
  in.kjit_version = KJIT_VERSION;
  // Covers the source and every header's bytes, those a compile learned included (Template::current).
  in.content_digest = spec.tmpl().current()->digest();
  in.name_expression = spec.name_expression();
  in.options = spec.options().canonical();
  for (auto& flag : Compiler::type_macros(spec)) in.options.push_back(std::move(flag));
  return in;
}

cache::CacheKey Engine::key_for(const Specialization& spec, const CompilePlan& plan) const {
  return key_of(key_inputs(spec), plan);
}

cache::CacheKey Engine::key_of(cache::KeyInputs in, const CompilePlan& plan) {
  in.target = plan.requested.str();
  in.nvrtc_version = cuda_toolkit().nvrtc_identity();
  in.output = plan.output;
  if (plan.output == cache::OutputKind::Ptx) in.driver_version = driver_version_text();
  return cache::CacheKey::compute(in);
}

Engine::Candidates Engine::candidates(const Specialization& spec, const Target& target) const {
  PhaseTimer timer(Phase::Key);
  // Without loading NVRTC (strict mode never does, and a warm process should not pay for it) nobody
  // knows whether this NVRTC makes a cubin or PTX for `target`: look for both.
  Candidates out;
  const cache::KeyInputs in = key_inputs(spec);
  CompilePlan p;
  p.requested = p.actual = target;
  if (!target.is_ptx()) {
    p.output = cache::OutputKind::Cubin;
    out.emplace_back(p, key_of(in, p));
  }
  p.output = cache::OutputKind::Ptx;
  out.emplace_back(p, key_of(in, p));
  return out;
}

cache::Entry Engine::obtain_entry(const Specialization& spec, const Target& target, const Candidates& cands,
                                  Origin* origin, std::string* log, const char* forbidden) {
  const std::string dir = target.str();
  {
    trace::Range range("load", spec.name_expression());
    PhaseTimer timer(Phase::Store);
    for (const auto& [plan, key] : cands) {
      if (auto hit = stores().get(key, dir)) {
        *origin = stores_.levels()[hit->level].store == remote_ ? Origin::Remote : Origin::Disk;
        return std::move(hit->entry);
      }
    }
  }
  if (settings_.cache_mode == CacheMode::Strict) {
    strict_misses_.fetch_add(1);
    const std::string key = cands.front().second.hex();
    log::Event miss;
    miss.level = log::Level::Warning;
    miss.kind = "strict_miss";
    miss.message = "strict cache mode: " + spec.describe() + " for " + dir + " is not cached (key " + key + ")";
    miss.key = key;
    miss.template_name = spec.tmpl().name();
    miss.kernel = spec.name_expression();
    miss.target = dir;
    log::emit(std::move(miss));
    throw CacheMissError(
        "strict cache mode (KJIT_CACHE_MODE=strict) never compiles, and " + spec.describe() + " for " + dir +
            " is not cached (key " + key + "; cache " + disk().describe() +
            "). Produce it on any machine with `kjit warm MANIFEST --arch " + dir +
            "` (record the manifest with KJIT_RECORD=manifest.json) or `" + compile_command(spec, target) +
            "`, then ship the cache directory (KJIT_CACHE_DIR or a KJIT_CACHE_PATH layer).",
        key, spec.describe());
  }
  const CompilePlan plan = [&] {
    PhaseTimer timer(Phase::Compile);  // loads NVRTC, the first time
    return Compiler::plan(target);
  }();
  // A compile that learned a header (a macro-computed include: Compiler::compile) compiled a template that
  // keys otherwise: its binary goes under the key of that template, looked up first (another process
  // may have it), and the template is the current one from then on, so the next specialization keys and
  // compiles it at once.
  struct Grown {
    CompiledBinary bin;
  };
  std::optional<CompiledBinary> carried;
  Specialization s = spec.on_current_template();
  cache::CacheKey key;
  bool produced = false;
  auto produce = [&]() {
    if (forbidden && *forbidden)
      throw LaunchError(s.describe() + " for " + dir + " is not compiled yet and cannot be now: " + forbidden);
    CompiledBinary bin = [&] {
      if (carried) {
        CompiledBinary b = std::move(*carried);
        carried.reset();
        return b;
      }
      trace::Range range("compile", s.name_expression());
      return Compiler::compile(s, plan, settings_);
    }();
    if (bin.compiled_template && bin.compiled_template->digest() != s.tmpl().digest()) throw Grown{std::move(bin)};
    if (log) *log = bin.log;
    cache::Entry e;
    e.key = key;
    e.payload = std::move(bin.payload);
    cache::EntryMetadata& m = e.meta;
    m.template_name = s.tmpl().name();
    m.template_digest = s.tmpl().digest();
    m.kernel = s.kernel().name;
    m.name_expression = s.name_expression();
    m.lowered_name = bin.lowered_name;
    m.options = s.options().canonical();
    m.target = plan.actual.str();
    m.requested_target = plan.requested.str();
    m.nvrtc_version = cuda_toolkit().nvrtc_identity();
    m.output = plan.output;
    m.note = plan.note;
    m.compile_ms = bin.compile_ms;
    m.created = utc_now();
    m.kjit_version = KJIT_VERSION;
    // Reported here, under the cache's per-key lock: DiskCache defers the event until it lets go.
    count_compile(s, e.key, m, bin.compile_ms);
    return e;
  };
  // With a writable remote tier, the compile is shared by the deployment: one process compiles the key,
  // stores it there, and the others take it (cluster_flight.hpp); the disk's per-key lock around this
  // lets one process of each machine through.
  bool fetched = false;
  auto produce_shared = [&]() -> cache::Entry {
    // A caller that may not compile (graph capture) fails at once rather than wait for another process.
    if (!remote_ || !remote_->writable() || (forbidden && *forbidden)) return produce();
    cache::FlightResult r = cache::produce_once(*remote_, key, dir, produce);
    fetched = r.fetched;
    return std::move(r.entry);
  };
  for (int round = 0;; ++round) {
    {
      PhaseTimer timer(Phase::Key);
      key = key_for(s, plan);
    }
    if (round > 0) {  // the grown template's key: kept already (by another process, or a layer)?
      trace::Range range("load", s.name_expression());
      PhaseTimer timer(Phase::Store);
      if (auto hit = stores().get(key, dir)) {
        *origin = stores_.levels()[hit->level].store == remote_ ? Origin::Remote : Origin::Disk;
        return std::move(hit->entry);
      }
    }
    try {
      cache::Entry e = disk().load_or_produce(key, dir, produce_shared, &produced);
      *origin = fetched ? Origin::Remote : produced ? Origin::Compiled : Origin::Disk;
      return e;
    } catch (Grown& g) {
      if (round >= 8) throw Error("internal: the headers of " + s.describe() + " kept growing while it compiled");
      s = s.with_template(g.bin.compiled_template);
      carried = std::move(g.bin);
    }
  }
}

// One resolution in progress. The leader fills `entry` (key and metadata at least; the payload too when
// the leader is a prepare()) and, when it is a get(), `loaded`; then it lands. A leader that fails shares
// nothing: its waiters resolve on their own, each getting its own exception (one exception object
// rethrown in many threads would be destroyed by whichever lets go last).
struct Engine::InFlight {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool have_entry = false;
  cache::Entry entry;
  std::shared_ptr<const LoadedKernel> loaded;

  // Waits for the leader to land.
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};

Engine::Claim Engine::claim(const cache::CacheKey& id, const Candidates* table, bool may_lead) {
  Claim c;
  std::lock_guard<std::mutex> lock(in_flight_mu_);
  // A get() leader publishes its kernel in by_key_ before it lands: looking again here, under the lock,
  // closes the gap between the caller's first look and its claim.
  if (table && (c.hit = loaded_for(*table))) return c;
  auto it = in_flight_.find(id);
  if (it != in_flight_.end()) {
    c.wait = it->second;
  } else if (may_lead) {
    c.lead = std::make_shared<InFlight>();
    in_flight_.emplace(id, c.lead);
  }
  return c;
}

void Engine::land(const cache::CacheKey& id, InFlight& flight) {
  {
    std::lock_guard<std::mutex> lock(in_flight_mu_);
    in_flight_.erase(id);
  }
  {
    std::lock_guard<std::mutex> lock(flight.mu);
    flight.done = true;
  }
  flight.cv.notify_all();
}

Prepared Engine::prepare(const Specialization& spec, const Target& target) {
  const auto t0 = Clock::now();
  Prepared p = resolve_entry(spec, target);
  if (recorder_) recorder_->record(spec, target);  // a shared result may come from another Template object
  if (p.origin == Origin::Memory)
    memory_hits_.fetch_add(1);
  else
    count_load(spec, p.key, p.meta, p.origin, micros_since(t0) / 1000.0);
  return p;
}

Prepared Engine::resolve_entry(const Specialization& spec, const Target& target) {
  const Candidates cands = candidates(spec, target);
  const cache::CacheKey& id = cands.front().second;
  Claim c = claim(id, nullptr, true);
  Prepared p;
  if (c.wait) {
    c.wait->wait();
    if (c.wait->have_entry) {
      p.origin = Origin::Memory;
      p.key = c.wait->entry.key;
      p.meta = c.wait->entry.meta;
      return p;
    }
    // The leader failed: resolve on our own below.
  }
  try {
    cache::Entry e = obtain_entry(spec, target, cands, &p.origin, &p.log, nullptr);
    p.key = e.key;
    p.meta = e.meta;
    if (c.lead) {
      c.lead->entry = std::move(e);
      c.lead->have_entry = true;
      land(id, *c.lead);
    }
  } catch (...) {
    if (c.lead) land(id, *c.lead);
    throw;
  }
  return p;
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
  ahead_.submit([this, spec, target] { (void)resolve_entry(spec, target); });
}

PrefetchReport Engine::prefetch(const std::vector<std::pair<Specialization, Target>>& jobs) {
  if (!remote())
    throw Error(settings_.remote_cache
                    ? "there is no remote cache tier to prefetch from: KJIT_CACHE_MODE=off turns every cache off"
                    : "there is no remote cache tier to prefetch from: set KJIT_REMOTE_CACHE=redis://host:port (and "
                      "KJIT_REMOTE_CACHE_SECRET) as the processes that fill it do");
  if (!disk().writable())
    throw Error("prefetch keeps entries on the disk cache, and it is not writable: " + disk().describe() +
                "; run it with KJIT_CACHE_MODE=readwrite and a writable KJIT_CACHE_DIR (a strict or readonly "
                "process then reads what it kept)");
  PrefetchReport r;
  r.jobs = jobs.size();
  // The disk levels first (no round trip for what is here), then every candidate key of the others at once.
  std::vector<std::pair<cache::CacheKey, std::string>> asks;
  std::vector<std::pair<std::size_t, std::size_t>> ask_range;  // per job not on disk: [first, last) in asks
  for (const auto& [spec, target] : jobs) {
    const Candidates cands = candidates(spec, target);
    const std::string dir = target.str();
    bool local = false;
    for (const auto& [plan, key] : cands) local = local || disk().load(key, dir).has_value();
    if (local) {
      ++r.on_disk;
      continue;
    }
    const std::size_t first = asks.size();
    for (const auto& [plan, key] : cands) asks.emplace_back(key, dir);
    ask_range.emplace_back(first, asks.size());
  }
  if (asks.empty()) return r;
  const cache::RedisStore::FetchedMany got = remote_->get_many(asks);
  if (!got.ok()) {
    r.answered = got.answered;
    r.lookup_error = got.error;
    r.missing = ask_range.size();
    return r;
  }
  for (const auto& [first, last] : ask_range) {
    const cache::Entry* found = nullptr;
    bool refused = false;
    for (std::size_t i = first; i < last && !found; ++i) {
      if (got.results[i].entry) found = &*got.results[i].entry;
      refused = refused || got.results[i].refused;
    }
    if (found && disk().put(*found)) {
      ++r.fetched;
    } else if (found) {
      ++r.not_kept;  // the disk said why (a warning)
    } else if (refused) {
      ++r.refused;
    } else {
      ++r.missing;
    }
  }
  return r;
}

std::shared_ptr<const LoadedKernel> Engine::loaded_for(const Candidates& cands) const {
  std::shared_lock<std::shared_mutex> lock(table_mu_);
  for (const auto& [plan, key] : cands) {
    auto it = by_key_.find(key);
    if (it != by_key_.end()) return it->second;
  }
  return nullptr;
}

std::shared_ptr<const LoadedKernel> Engine::load_and_publish(const Specialization& spec, cache::Entry e) {
  auto loaded = std::make_shared<LoadedKernel>();
  {
    trace::Range range("load", spec.name_expression());
    PhaseTimer timer(Phase::ModuleLoad);
    loaded->kernel = std::make_shared<Kernel>(Module::load(e.payload), e.meta.lowered_name, spec.name_expression());
  }
  loaded->key = e.key;
  loaded->meta = std::move(e.meta);
  std::unique_lock<std::shared_mutex> lock(table_mu_);
  return by_key_.emplace(loaded->key, loaded).first->second;
}

Resolved Engine::get(const Specialization& spec, const Target& target, const char* forbidden) {
  auto t0 = Clock::now();
  const Candidates cands = candidates(spec, target);
  // Memory hits by key: any candidate key already loaded.
  if (auto hit = loaded_for(cands)) {
    memory_hits_.fetch_add(1);
    return {std::move(hit), Origin::Memory};
  }
  const cache::CacheKey& id = cands.front().second;
  // A caller that may not compile never leads (its waiters would fail with it), but may wait.
  Claim c = claim(id, &cands, !(forbidden && *forbidden));
  if (c.hit) {
    memory_hits_.fetch_add(1);
    return {std::move(c.hit), Origin::Memory};
  }
  if (c.wait) {
    c.wait->wait();
    if (recorder_ && c.wait->have_entry) recorder_->record(spec, target);
    if (c.wait->loaded) {
      memory_hits_.fetch_add(1);
      return {c.wait->loaded, Origin::Memory};
    }
    if (c.wait->have_entry && !c.wait->entry.payload.empty()) {
      // The leader was a prepare(): its entry is here, only the module is not loaded yet.
      auto loaded = load_and_publish(spec, c.wait->entry);
      memory_hits_.fetch_add(1);
      return {std::move(loaded), Origin::Memory};
    }
    // The leader failed: resolve on our own below.
  }
  try {
    Origin origin;
    std::string log;
    cache::Entry e = obtain_entry(spec, target, cands, &origin, &log, forbidden);
    if (recorder_) recorder_->record(spec, target);
    if (c.lead) {  // what a waiting prepare() needs, even if the module load below fails
      c.lead->entry.key = e.key;
      c.lead->entry.meta = e.meta;
      c.lead->have_entry = true;
    }
    auto loaded = load_and_publish(spec, std::move(e));
    count_load(spec, loaded->key, loaded->meta, origin, micros_since(t0) / 1000.0);
    if (c.lead) {
      c.lead->loaded = loaded;
      land(id, *c.lead);
    }
    return {std::move(loaded), origin};
  } catch (...) {
    if (c.lead) land(id, *c.lead);
    throw;
  }
}

std::shared_ptr<const LoadedKernel> Engine::find(const SpecKey& key) const noexcept {
  std::shared_lock<std::shared_mutex> lock(table_mu_);
  auto it = fast_.find(key);
  return it == fast_.end() ? nullptr : it->second;
}

void Engine::remember(const SpecKey& key, std::shared_ptr<const LoadedKernel> kernel) {
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

KernelStats& Engine::kernel_stats_for(const std::string& name_expression) {
  auto it = kernel_stats_.find(name_expression);
  if (it != kernel_stats_.end()) return it->second;
  // One slot is kept for the sum of the kernels past the bound.
  if (kernel_stats_.size() + 1 >= kernel_stats_limit_) return kernel_stats_[kOtherKernels];
  return kernel_stats_[name_expression];
}

void Engine::set_kernel_stats_limit(std::size_t limit) {
  if (limit < 1)
    throw ValueError("the per-kernel stats limit must be at least 1 (the entry '" + std::string(kOtherKernels) +
                     "' that sums the kernels past it), got 0");
  std::lock_guard<std::mutex> lock(kernel_stats_mu_);
  kernel_stats_limit_ = limit;
}

void Engine::count_compile(const Specialization& spec, const cache::CacheKey& key, const cache::EntryMetadata& meta,
                           double ms) {
  compiles_.fetch_add(1);
  compile_us_.fetch_add(static_cast<std::uint64_t>(ms * 1000));
  {
    std::lock_guard<std::mutex> lock(kernel_stats_mu_);
    KernelStats& k = kernel_stats_for(spec.name_expression());
    ++k.compiles;
    k.compile_ms += ms;
  }
  log::Event e = entry_event(log::Level::Info, "compile", spec, key, meta, Origin::Compiled, ms);
  e.message = "compiled " + spec.describe() + " for " + meta.target + " in " + std::to_string(ms) + " ms (key " +
              e.key.substr(0, 16) + ")";
  log::emit(std::move(e));
}

void Engine::count_load(const Specialization& spec, const cache::CacheKey& key, const cache::EntryMetadata& meta,
                        Origin origin, double ms) {
  if (origin != Origin::Disk && origin != Origin::Remote) return;
  const bool remote = origin == Origin::Remote;
  if (remote) {
    remote_hits_.fetch_add(1);
  } else {
    disk_hits_.fetch_add(1);
    disk_load_us_.fetch_add(static_cast<std::uint64_t>(ms * 1000));
  }
  {
    std::lock_guard<std::mutex> lock(kernel_stats_mu_);
    KernelStats& k = kernel_stats_for(spec.name_expression());
    ++k.disk_loads;
    k.load_ms += ms;
  }
  // A remote hit is news (a compile saved by the deployment): Info; a disk hit is routine: Debug.
  log::Event e = entry_event(remote ? log::Level::Info : log::Level::Debug, remote ? "remote_load" : "disk_load", spec,
                             key, meta, origin, ms);
  e.message = "loaded " + spec.describe() + " for " + meta.target + " from the " +
              (remote ? remote_->describe() : std::string("disk cache")) + " in " + std::to_string(ms) + " ms (key " +
              e.key.substr(0, 16) + ")";
  log::emit(std::move(e));
}

std::unordered_map<std::string, KernelStats> Engine::kernel_stats() const {
  std::lock_guard<std::mutex> lock(kernel_stats_mu_);
  return kernel_stats_;
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.memory_hits = memory_hits_.load();
  s.disk_hits = disk_hits_.load();
  s.compiles = compiles_.load();
  s.remote_hits = remote_hits_.load();
  s.compile_ms = static_cast<double>(compile_us_.load()) / 1000.0;
  s.disk_load_ms = static_cast<double>(disk_load_us_.load()) / 1000.0;
  s.strict_misses = strict_misses_.load();
  s.phase_ms = phase_times_ms();
  s.headers = header_load_counts();
  return s;
}

void Engine::reset_stats() {
  reset_phase_times();
  reset_header_load_counts();
  memory_hits_ = 0;
  disk_hits_ = 0;
  compiles_ = 0;
  compile_us_ = 0;
  disk_load_us_ = 0;
  strict_misses_ = 0;
  remote_hits_ = 0;
  std::lock_guard<std::mutex> lock(kernel_stats_mu_);
  kernel_stats_.clear();
}

void Engine::clear_memory() {
  std::unique_lock<std::shared_mutex> lock(table_mu_);
  fast_.clear();
  by_key_.clear();
}

}  // namespace kjit
