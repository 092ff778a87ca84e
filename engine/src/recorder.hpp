// Recorder: KJIT_RECORD. Adds every specialization the Engine resolves (memory-table misses, never the
// hot path) to a manifest file, once per specialization per process. A failure to record is a warning
// (once per manifest), never an error: recording must not break the workload it watches.
#pragma once

#include <filesystem>
#include <mutex>
#include <set>
#include <string>

#include "kjit/specialization.hpp"

namespace kjit {

class Recorder {
 public:
  Recorder(std::filesystem::path manifest, double lock_timeout_s);

  void record(const Specialization& spec) noexcept;
  const std::filesystem::path& manifest() const noexcept { return manifest_; }

 private:
  std::filesystem::path manifest_;
  double lock_timeout_s_;
  std::mutex mu_;
  std::set<std::string> recorded_;  // record ids this process has written
};

}  // namespace kjit
