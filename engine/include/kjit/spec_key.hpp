// SpecKey: the fixed-size identity of (kernel family, template arguments, device) that the hot path
// looks up (Engine::find): no hashing of sources, no allocation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace kjit {

struct SpecKey {
  // Enough for kjit.elementwise's flat kernel of 32 inputs (38 arguments); only the first nargs words are
  // hashed and compared, so a call pays for the arguments it has (and the zeroing of this array).
  static constexpr int kMaxArgs = 40;
  std::uint64_t family = 0;  // Engine::family_id(template, kernel, options)
  std::int32_t device = 0;
  std::uint32_t nargs = 0;
  std::array<std::uint64_t, kMaxArgs> args{};

  bool operator==(const SpecKey& o) const noexcept {
    if (family != o.family || device != o.device || nargs != o.nargs) return false;
    for (std::uint32_t i = 0; i < nargs; ++i)
      if (args[i] != o.args[i]) return false;
    return true;
  }
};

struct SpecKeyHash {
  std::size_t operator()(const SpecKey& k) const noexcept {
    std::uint64_t h = k.family * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(k.device);
    for (std::uint32_t i = 0; i < k.nargs; ++i) {
      h ^= k.args[i] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    }
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};

}  // namespace kjit
