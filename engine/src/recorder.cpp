#include "recorder.hpp"

#include <exception>

#include "kjit/cache/manifest.hpp"
#include "kjit/log.hpp"
#include "kjit/spec_record.hpp"

namespace kjit {

Recorder::Recorder(std::filesystem::path manifest, double lock_timeout_s)
    : writer_(std::move(manifest), lock_timeout_s) {}

void Recorder::record(const Specialization& spec, const Target& target) noexcept {
  try {
    // The template as compiled: with the headers its compiles learned (Template::current()).
    const Specialization current = spec.on_current_template();
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<const cache::ManifestSources> sources;
    if (!current.tmpl().is_builtin()) {  // each template's sources copied and hashed once, not per record
      auto& known = sources_[current.tmpl().digest()];
      if (!known) known = sources_of(current.tmpl());
      sources = known;
    }
    cache::ManifestRecord r = to_record(current, std::move(sources));
    r.arch_specific = target.kind == Target::Kind::SmArchSpecific;
    if (r.arch_specific) r.arch = target.arch;
    const std::string id = r.id();
    if (recorded_.count(id)) return;
    writer_.append({std::move(r)});
    recorded_.insert(id);
  } catch (const std::exception& e) {
    log::warn_once("record:" + manifest().string(),
                   "KJIT_RECORD: cannot record " + spec.describe() + " into " + manifest().string() + ": " + e.what() +
                       " (recording goes on for other specializations; the workload is unaffected)");
  } catch (...) {
    log::warn_once("record:" + manifest().string(), "KJIT_RECORD: cannot record into " + manifest().string());
  }
}

void Recorder::record_choice(const std::string& key, const std::string& value) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = choices_.find(key);
    if (it != choices_.end() && it->second == value) return;
    writer_.append_choices({{key, value}});
    choices_[key] = value;
  } catch (const std::exception& e) {
    log::warn_once("record:" + manifest().string(), "KJIT_RECORD: cannot record the tuned choice " + key + " into " +
                                                        manifest().string() + ": " + e.what() +
                                                        " (recording goes on; the workload is unaffected)");
  } catch (...) {
    log::warn_once("record:" + manifest().string(), "KJIT_RECORD: cannot record into " + manifest().string());
  }
}

}  // namespace kjit
