#include "kjit/engine_stats.hpp"

#include "kjit/error.hpp"
#include "kjit/log.hpp"

namespace kjit {
namespace {

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

KernelStats& StatsBook::kernel_for(const std::string& name_expression) {
  auto it = kernels_.find(name_expression);
  if (it != kernels_.end()) return it->second;
  // One slot is kept for the sum of the kernels past the bound.
  if (kernels_.size() + 1 >= kernel_limit_) return kernels_[kOtherKernels];
  return kernels_[name_expression];
}

void StatsBook::set_kernel_limit(std::size_t limit) {
  if (limit < 1)
    throw ValueError("the per-kernel stats limit must be at least 1 (the entry '" + std::string(kOtherKernels) +
                     "' that sums the kernels past it), got 0");
  std::lock_guard<std::mutex> lock(kernels_mu_);
  kernel_limit_ = limit;
}

void StatsBook::count_for_kernel(const std::string& name_expression, std::uint64_t KernelStats::* count,
                                 double KernelStats::* ms_total, double ms) {
  std::lock_guard<std::mutex> lock(kernels_mu_);
  KernelStats& k = kernel_for(name_expression);
  ++(k.*count);
  k.*ms_total += ms;
}

void StatsBook::compiled(const Specialization& spec, const cache::CacheKey& key, const cache::EntryMetadata& meta,
                         double ms) {
  compiles_.fetch_add(1);
  compile_us_.fetch_add(static_cast<std::uint64_t>(ms * 1000));
  count_for_kernel(spec.name_expression(), &KernelStats::compiles, &KernelStats::compile_ms, ms);
  log::Event e = entry_event(log::Level::Info, "compile", spec, key, meta, Origin::Compiled, ms);
  e.message = "compiled " + spec.describe() + " for " + meta.target + " in " + std::to_string(ms) + " ms (key " +
              e.key.substr(0, 16) + ")";
  log::emit(std::move(e));
}

void StatsBook::loaded(const Specialization& spec, const cache::CacheKey& key, const cache::EntryMetadata& meta,
                       Origin origin, double ms, const std::string& from) {
  if (origin != Origin::Disk && origin != Origin::Remote) return;
  const bool remote = origin == Origin::Remote;
  if (remote) {
    remote_hits_.fetch_add(1);
  } else {
    disk_hits_.fetch_add(1);
    disk_load_us_.fetch_add(static_cast<std::uint64_t>(ms * 1000));
  }
  count_for_kernel(spec.name_expression(), &KernelStats::disk_loads, &KernelStats::load_ms, ms);
  // A remote hit is news (a compile saved by the deployment): Info; a disk hit is routine: Debug.
  log::Event e = entry_event(remote ? log::Level::Info : log::Level::Debug, remote ? "remote_load" : "disk_load", spec,
                             key, meta, origin, ms);
  e.message = "loaded " + spec.describe() + " for " + meta.target + " from the " +
              (remote ? from : std::string("disk cache")) + " in " + std::to_string(ms) + " ms (key " +
              e.key.substr(0, 16) + ")";
  log::emit(std::move(e));
}

std::unordered_map<std::string, KernelStats> StatsBook::kernels() const {
  std::lock_guard<std::mutex> lock(kernels_mu_);
  return kernels_;
}

EngineStats StatsBook::totals() const {
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

void StatsBook::reset() {
  reset_phase_times();
  reset_header_load_counts();
  memory_hits_ = 0;
  disk_hits_ = 0;
  compiles_ = 0;
  compile_us_ = 0;
  disk_load_us_ = 0;
  strict_misses_ = 0;
  remote_hits_ = 0;
  std::lock_guard<std::mutex> lock(kernels_mu_);
  kernels_.clear();
}

}  // namespace kjit
