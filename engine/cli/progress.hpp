// Progress of a batch of jobs on the error stream: on a terminal one line rewritten in place
// ("\r[k/n] ..."), otherwise one plain line per finished job (logs, CI, pipes). Thread-safe.
// (CLI11 has no progress display, and none is packaged here; this is the whole of it.)
#pragma once

#include <cstddef>
#include <mutex>
#include <ostream>
#include <string>

namespace kjit::cli {

class Progress {
 public:
  Progress(std::ostream& out, std::size_t total, bool in_place);
  ~Progress();  // ends an in-place line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // One job finished; `what` says which and how ("compiled add_constant(...) for sm_90").
  void step(const std::string& what);
  // Ends an in-place line so that what follows starts on its own line.
  void finish();

  // Whether the process's stderr is a terminal (where an in-place line makes sense).
  static bool stderr_is_terminal();

 private:
  std::ostream& out_;
  std::size_t total_;
  bool in_place_;
  std::size_t done_ = 0;
  std::size_t last_width_ = 0;
  bool finished_ = false;
  std::mutex mu_;
};

}  // namespace kjit::cli
