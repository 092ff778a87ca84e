// What the Engine did in this process: hits by level, compiles and their time, per kernel too, and the
// log events that say each compile and load as it happens (StatsBook keeps and reports them).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kjit/cache/cache_key.hpp"
#include "kjit/cache/entry.hpp"
#include "kjit/phase_time.hpp"
#include "kjit/specialization.hpp"
#include "kjit/specialized_kernel.hpp"
#include "kjit/template.hpp"

namespace kjit {

struct EngineStats {
  std::uint64_t memory_hits = 0;
  std::uint64_t disk_hits = 0;
  std::uint64_t compiles = 0;
  double compile_ms = 0;    // total NVRTC time of this process
  double disk_load_ms = 0;  // total time of disk hits (read + validate + module load)
  std::uint64_t strict_misses = 0;
  std::uint64_t remote_hits = 0;               // entries taken from the remote tier (not counted in disk_hits)
  std::array<double, kPhaseCount> phase_ms{};  // by Phase (phase_time.hpp): where cold starts went
  HeaderLoadCounts headers;                    // header files of template loads: read, or known from the header index
};

// Compiles and disk loads of one kernel (by name expression) in this process.
struct KernelStats {
  std::uint64_t compiles = 0;
  double compile_ms = 0;  // NVRTC time
  std::uint64_t disk_loads = 0;
  double load_ms = 0;  // disk hits: read + validate (+ module load for get())
};

class StatsBook {
 public:
  // Per kernel, by name expression: at most kernel_stats_limit() entries, the last of them
  // kOtherKernels, the sum of the kernels seen once the others were taken (a process that specializes
  // without bound must not grow without bound).
  static constexpr std::size_t kMaxKernelStats = 1024;
  static constexpr const char* kOtherKernels = "(other kernels)";

  void memory_hit() noexcept { memory_hits_.fetch_add(1, std::memory_order_relaxed); }
  void strict_miss() noexcept { strict_misses_.fetch_add(1); }
  // A compile of `spec` (and its log event, after it happened).
  void compiled(const Specialization& spec, const cache::CacheKey& key, const cache::EntryMetadata& meta, double ms);
  // A load of origin Disk or Remote (others are not counted) from the store `from` describes.
  void loaded(const Specialization& spec, const cache::CacheKey& key, const cache::EntryMetadata& meta, Origin origin,
              double ms, const std::string& from);

  EngineStats totals() const;
  std::unordered_map<std::string, KernelStats> kernels() const;
  std::size_t kernel_limit() const noexcept { return kernel_limit_; }
  // At least 1 (the kOtherKernels entry: kjit::ValueError otherwise); applies to kernels seen from now on.
  void set_kernel_limit(std::size_t limit);
  void reset();
  // The engine's fork handlers: held across a fork (Engine::lock_for_fork).
  void lock_for_fork() noexcept { kernels_mu_.lock(); }
  void unlock_after_fork() noexcept { kernels_mu_.unlock(); }

 private:
  KernelStats& kernel_for(const std::string& name_expression);  // under kernels_mu_
  // One more `count` of the kernel's, and `ms` more of its `ms_total`.
  void count_for_kernel(const std::string& name_expression, std::uint64_t KernelStats::* count,
                        double KernelStats::* ms_total, double ms);

  mutable std::mutex kernels_mu_;
  std::unordered_map<std::string, KernelStats> kernels_;
  std::size_t kernel_limit_ = kMaxKernelStats;
  std::atomic<std::uint64_t> memory_hits_{0}, disk_hits_{0}, compiles_{0}, strict_misses_{0}, remote_hits_{0};
  std::atomic<std::uint64_t> compile_us_{0}, disk_load_us_{0};
};

}  // namespace kjit
