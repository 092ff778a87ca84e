#include "kjit/background_jobs.hpp"

#include <unistd.h>

#include <system_error>
#include <thread>
#include <utility>

namespace kjit {

BackgroundJobs::BackgroundJobs(unsigned threads) : max_threads_(threads), pid_(::getpid()) {}

BackgroundJobs::~BackgroundJobs() { drain(); }

void BackgroundJobs::forget_after_fork() {
  if (pid_ == ::getpid()) return;
  pid_ = ::getpid();
  queue_.clear();
  running_ = 0;
  busy_ = 0;
}

bool BackgroundJobs::submit(std::function<void()> job) {
  if (max_threads_ == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  forget_after_fork();
  if (stopped_) return false;
  queue_.push_back(std::move(job));
  const std::size_t free_threads = running_ - busy_;  // alive and about to take a queued job
  if (running_ < max_threads_ && queue_.size() > free_threads) {
    try {
      std::thread(&BackgroundJobs::work, this).detach();
      ++running_;
    } catch (const std::system_error&) {
      if (running_ == 0) {  // no thread to run it: it will not run
        queue_.pop_back();
        return false;
      }
    }
  }
  return true;
}

void BackgroundJobs::work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!queue_.empty()) {
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    ++busy_;
    lock.unlock();
    try {
      job();
    } catch (...) {
      // Dropped: the caller that needs this result meets the error itself.
    }
    job = nullptr;  // its captures go now, not under the lock
    lock.lock();
    --busy_;
  }
  --running_;
  idle_.notify_all();  // under the lock: once it is released, this thread touches nothing of ours
}

void BackgroundJobs::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  forget_after_fork();
  idle_.wait(lock, [&] { return running_ == 0; });
}

void BackgroundJobs::stop() {
  std::unique_lock<std::mutex> lock(mu_);
  forget_after_fork();
  stopped_ = true;
  queue_.clear();
  idle_.wait(lock, [&] { return running_ == 0; });
}

std::size_t BackgroundJobs::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pid_ == ::getpid() ? queue_.size() + busy_ : 0;
}

}  // namespace kjit
