// BackgroundJobs: work that nobody waits for when it is handed over, such as an op's backward kernel made
// ready (loaded or compiled) while its forward runs, so that the backward finds it or waits only for the
// rest of its compile. Jobs run in order on at most `threads` threads of its own, started when work
// comes and ended when it runs out (an idle process keeps none). A job's exception is dropped: whoever
// needs its result later meets the error again, on its own thread, and raises it there.
//
// After a fork() the child has none of the parent's threads: a BackgroundJobs used in the child forgets
// the jobs it had (they ran, or will run, in the parent) and starts threads of its own. (A fork taken in
// the instant a worker holds the queue's lock leaves that lock held in the child, as for any lock.)
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

namespace kjit {

class BackgroundJobs {
 public:
  // With 0 threads, submit() runs nothing (a machine of one CPU: the work would only slow the caller).
  explicit BackgroundJobs(unsigned threads);
  ~BackgroundJobs();  // drains
  BackgroundJobs(const BackgroundJobs&) = delete;
  BackgroundJobs& operator=(const BackgroundJobs&) = delete;

  // Queues `job`; false when it will not run (no threads).
  bool submit(std::function<void()> job);
  // Waits until every job submitted before has run.
  void drain();
  // Drops the jobs not started yet, waits for the running ones and refuses later submits (at exit:
  // nobody will use what the queued ones would make, and a long queue must not hold the process).
  void stop();
  // Jobs queued or running.
  std::size_t pending() const;
  unsigned threads() const noexcept { return max_threads_; }

 private:
  void work();
  void forget_after_fork();  // under mu_

  const unsigned max_threads_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> queue_;
  unsigned running_ = 0;  // threads alive
  std::size_t busy_ = 0;  // jobs being run
  bool stopped_ = false;
  pid_t pid_;  // the process whose threads running_ counts
};

}  // namespace kjit
