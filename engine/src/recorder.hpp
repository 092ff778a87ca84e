// Recorder: KJIT_RECORD. Adds every specialization the Engine resolves (memory-table misses, never the
// hot path) to a manifest file, once per specialization per process, by appending to it (O(records)). A failure to
// record is a warning (once per manifest), never an error: recording must not break the workload it watches.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "kjit/cache/manifest.hpp"
#include "kjit/specialization.hpp"
#include "kjit/target.hpp"

namespace kjit {

class Recorder {
 public:
  Recorder(std::filesystem::path manifest, double lock_timeout_s);

  // `target`: what the Engine resolved `spec` for; an arch-specific one (sm_90a) makes an arch_specific
  // record (another record than the same specialization's for sm_90: another binary), warmed for sm_XYa.
  void record(const Specialization& spec, const Target& target) noexcept;
  // Adds a tuned choice (Choices: one found or stored) as a "choice" line, once per key and value per
  // Recorder; a failure is a warning, as for specializations.
  void record_choice(const std::string& key, const std::string& value) noexcept;
  const std::filesystem::path& manifest() const noexcept { return writer_.file(); }

 private:
  std::mutex mu_;  // one writer per process; processes take the file's flock
  cache::ManifestWriter writer_;
  std::set<std::string> recorded_;              // record ids this process has written
  std::map<std::string, std::string> choices_;  // tuned choices this process has written, key -> value
  // Sources of the templates recorded, by Template::digest() (which covers the source and every
  // header's name and bytes): shared by their records.
  std::map<std::string, std::shared_ptr<const cache::ManifestSources>> sources_;
};

}  // namespace kjit
