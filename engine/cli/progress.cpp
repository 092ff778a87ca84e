#include "progress.hpp"

#include <unistd.h>

#include "format.hpp"

namespace kjit::cli {

namespace {
constexpr std::size_t kMaxInPlaceWidth = 120;  // keeps the line on one terminal row
}

Progress::Progress(std::ostream& out, std::size_t total, bool in_place)
    : out_(out), total_(total), in_place_(in_place) {}

Progress::~Progress() { finish(); }

bool Progress::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

void Progress::step(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  ++done_;
  // `what` names a manifest's records: one line, and nothing a terminal would act on.
  std::string line = "[" + std::to_string(done_) + "/" + std::to_string(total_) + "] " + printable(what);
  if (!in_place_) {
    out_ << line << '\n';
    out_.flush();
    return;
  }
  if (line.size() > kMaxInPlaceWidth) line = line.substr(0, kMaxInPlaceWidth - 3) + "...";
  const std::size_t width = line.size();
  if (width < last_width_) line += std::string(last_width_ - width, ' ');  // erase the longer previous line
  last_width_ = width;
  out_ << '\r' << line;
  out_.flush();
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (in_place_ && done_ > 0) {
    out_ << '\n';
    out_.flush();
  }
}

}  // namespace kjit::cli
