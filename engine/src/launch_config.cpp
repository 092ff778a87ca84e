#include "kjit/launch_config.hpp"

#include <string>

#include "kjit/error.hpp"

namespace kjit {
namespace {
std::string show(const Dim3& d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}
}  // namespace

void LaunchConfig::validate() const {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0)
    throw LaunchError("grid " + show(grid) +
                      " is empty: every grid dimension must be >= 1 (skip the launch "
                      "when there is no work)");
  if (block.x == 0 || block.y == 0 || block.z == 0)
    throw LaunchError("block " + show(block) + " is empty: every block dimension must be >= 1");
  if (block.count() > 1024 || block.z > 64)
    throw LaunchError("block " + show(block) + " has " + std::to_string(block.count()) +
                      " threads: allowed at most 1024 threads per block (and z <= 64)");
  if (grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u)
    throw LaunchError("grid " + show(grid) + " exceeds the CUDA limits: x <= 2^31-1, y and z <= 65535");
}

}  // namespace kjit
