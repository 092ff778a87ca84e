// StartLine: lets N threads start together (C++17 has no std::latch), so that their requests really race.
#pragma once

#include <condition_variable>
#include <mutex>

namespace kjit::testing {

// Releases every waiting thread at once when the last of `n` has arrived.
class StartLine {
 public:
  explicit StartLine(int n) : left_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (--left_ == 0) {
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return left_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int left_;
};

}  // namespace kjit::testing
