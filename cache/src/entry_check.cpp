#include "kjit/cache/entry_check.hpp"

namespace kjit::cache {

DecodeResult check_entry_bytes(std::string_view bytes, const CacheKey& key, const std::string& target_dir) {
  DecodeResult r = decode_entry(bytes, &key);
  if (r.entry && filed_target(r.entry->meta) != target_dir) {
    r.error = "target mismatch: the entry was requested for '" + filed_target(r.entry->meta).substr(0, 64) +
              "' but lies in the '" + target_dir + "' directory";
    r.entry.reset();
  }
  return r;
}

}  // namespace kjit::cache
