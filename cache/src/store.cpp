#include "kjit/cache/store.hpp"

namespace kjit::cache {

FetchedMany Store::get_many(const std::vector<std::pair<CacheKey, std::string>>& requests) {
  FetchedMany out;
  out.results.resize(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) out.results[i].entry = get(requests[i].first, requests[i].second);
  return out;
}

}  // namespace kjit::cache
