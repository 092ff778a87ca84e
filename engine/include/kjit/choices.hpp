// Choices: tuned choices, the kernel configuration an op picked for a key ("gemm|sm_90a|bf16|N=4096|K=4096|
// epi=gelu|m<=2048" -> "wgmma:128x256x64:s4"), kept beside the kernels so that later processes make the
// same pick without timing, KJIT_RECORD records it, `kjit warm MANIFEST` installs it, and a strict
// deployment replays it without timing or compiling anything it did not warm.
//
// Lookup: memory (this object), then the cache's disk (cache::ChoiceStore: the writable KJIT_CACHE_DIR,
// then each KJIT_CACHE_PATH layer; none with KJIT_CACHE_MODE=off). Stores go to memory and, in readwrite
// mode, to KJIT_CACHE_DIR/v1/choices (atomically; a failure is a warning, never an error). Both the hits
// and the stores are recorded to the KJIT_RECORD manifest as "choice" lines, once per key and value.
// The store itself scopes every key by the kjit version (a kjit upgrade reads none of an older kjit's
// choices); everything else a choice depends on (architecture, dtypes, shapes, a cuBLAS version) belongs
// in the caller's key. Keys: 1..512 printable ASCII characters; values: 1..256 (a bad one is a ValueError).
//
// An op's pattern:
//   auto& c = kjit::Choices::global();
//   std::string pick;
//   if (auto v = c.find(key)) pick = *v;                              // a stored (or warmed) choice
//   else if (c.tuning_allowed()) { pick = time_candidates(); c.store(key, pick); }
//   else { pick = default_heuristic(); c.record(key, pick); }       // strict, or KJIT_TUNE=0
// A value read back may come from an older op or a hand-edited file: the op checks that it names one of
// its candidates and falls back to its default otherwise.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "kjit/settings.hpp"

namespace kjit {

namespace cache {
class ChoiceStore;
}
class Recorder;

class Choices {
 public:
  // A store over `settings`' cache (KJIT_CACHE_DIR, KJIT_CACHE_PATH, KJIT_CACHE_MODE), tuning per
  // KJIT_TUNE, recording to settings.record_path (KJIT_RECORD) when set.
  explicit Choices(Settings settings);
  ~Choices();
  Choices(const Choices&) = delete;
  Choices& operator=(const Choices&) = delete;

  // The process-wide store, over Engine::global()'s settings (its cache and its KJIT_RECORD manifest).
  static Choices& global();

  // The choice stored for `key` (in memory, else the writable cache dir, else read-only layers like
  // KJIT_CACHE_PATH), or nullopt. A file that cannot be used (damaged, untrusted) is a miss and a warning.
  // A hit is recorded to the KJIT_RECORD manifest (once per key per process). A miss is remembered too:
  // the disk is asked once per key per process, until store(). ValueError for a bad key.
  std::optional<std::string> find(const std::string& key);
  // Keeps `value` for `key`: in memory, and on disk in the writable cache dir (atomic write; in readwrite
  // mode only; a failure to write is a warning, never an error). Also recorded to the KJIT_RECORD
  // manifest. ValueError for a bad key or value.
  void store(const std::string& key, const std::string& value);
  // Records `value`, which the op picked for `key` by its own rule (no stored choice, no tuning), to the
  // KJIT_RECORD manifest only (once per key and value): a rule may read the device (its multiprocessor
  // count), and a deployment on another model of the same architecture (an H100 PCIe after an H100 SXM, a
  // MIG slice) must replay the recorded pick, whose kernels were warmed, not make its own. Not stored on
  // disk: a later process on this GPU makes the same pick by the same rule. ValueError for a bad key or value.
  void record(const std::string& key, const std::string& value);
  // Whether the caller may time candidates now: KJIT_TUNE=1 and not KJIT_CACHE_MODE=strict.
  bool tuning_allowed() const;

  const Settings& settings() const noexcept { return settings_; }

 private:
  Settings settings_;
  std::unique_ptr<cache::ChoiceStore> store_;
  // KJIT_RECORD: a writer of its own on the Engine's manifest (writers share a file through its flock).
  std::unique_ptr<Recorder> recorder_;
  std::mutex mu_;
  std::unordered_map<std::string, std::optional<std::string>> known_;  // key -> value, or a known miss
};

}  // namespace kjit
