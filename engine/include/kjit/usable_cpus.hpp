// The CPUs this process may run on: its affinity mask (a container's or taskset's limit), else the
// machine's. `kjit warm`'s default -j, and whether background work (compiles ahead, the compiler
// preload) may start a thread at all: with one CPU it would only slow the thread that waits.
#pragma once

namespace kjit {

unsigned usable_cpus() noexcept;

}  // namespace kjit
