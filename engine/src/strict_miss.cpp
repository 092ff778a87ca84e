#include "strict_miss.hpp"

#include "kjit/compile_command.hpp"
#include "kjit/error.hpp"
#include "kjit/log.hpp"

namespace kjit {

void raise_strict_miss(const Specialization& spec, const Target& target, const cache::CacheKey& cache_key,
                       const std::string& cache_described) {
  const std::string dir = target.str();
  const std::string key = cache_key.hex();
  log::Event miss;
  miss.level = log::Level::Warning;
  miss.kind = "strict_miss";
  miss.message = "strict cache mode: " + spec.describe() + " for " + dir + " is not cached (key " + key + ")";
  miss.key = key;
  miss.template_name = spec.tmpl().name();
  miss.kernel = spec.name_expression();
  miss.target = dir;
  log::emit(std::move(miss));
  throw CacheMissError("strict cache mode (KJIT_CACHE_MODE=strict) never compiles, and " + spec.describe() + " for " +
                           dir + " is not cached (key " + key + "; cache " + cache_described +
                           "). Produce it on any machine with `kjit warm MANIFEST --arch " + dir +
                           "` (record the manifest with KJIT_RECORD=manifest.json) or `" +
                           compile_command(spec, target) +
                           "`, then ship the cache directory (KJIT_CACHE_DIR or a KJIT_CACHE_PATH layer).",
                       key, spec.describe());
}

}  // namespace kjit
