// StartLine: lets N threads start together (C++17 has no std::latch), so that their requests really race.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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

// Runs `body(i)` on `n` threads (i = 0..n-1) that start together, and joins them.
inline void run_together(int n, const std::function<void(int)>& body) {
  StartLine start(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      body(i);
    });
  for (auto& t : threads) t.join();
}

}  // namespace kjit::testing
