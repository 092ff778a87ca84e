#include "recorder.hpp"

#include <exception>

#include "kjit/cache/manifest.hpp"
#include "kjit/log.hpp"
#include "kjit/spec_record.hpp"

namespace kjit {

Recorder::Recorder(std::filesystem::path manifest, double lock_timeout_s)
    : manifest_(std::move(manifest)), lock_timeout_s_(lock_timeout_s) {}

void Recorder::record(const Specialization& spec) noexcept {
  try {
    cache::ManifestRecord r = to_record(spec);
    const std::string id = r.id();
    std::lock_guard<std::mutex> lock(mu_);  // one writer per process; processes take the file's flock
    if (recorded_.count(id)) return;
    cache::append_to_manifest(manifest_, {std::move(r)}, lock_timeout_s_);
    recorded_.insert(id);
  } catch (const std::exception& e) {
    log::warn_once("record:" + manifest_.string(),
                   "KJIT_RECORD: cannot record " + spec.describe() + " into " + manifest_.string() + ": " +
                       e.what() + " (recording goes on for other specializations; the workload is unaffected)");
  } catch (...) {
    log::warn_once("record:" + manifest_.string(), "KJIT_RECORD: cannot record into " + manifest_.string());
  }
}

}  // namespace kjit
