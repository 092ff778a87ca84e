// Text of an errno value, thread-safe (std::strerror is not).
#pragma once

#include <string>
#include <system_error>

namespace kjit::cache {

inline std::string errno_text(int err) { return std::generic_category().message(err); }

}  // namespace kjit::cache
