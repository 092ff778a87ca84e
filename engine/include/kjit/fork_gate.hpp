// The fork gate: no fork() of this process catches one of its threads inside NVRTC.
//
// NVRTC holds a lock of its own while it compiles. A fork() that another thread makes meanwhile hands the
// child that lock, held by a thread the child does not have: the child's first compile then waits forever
// (a DataLoader worker, a multiprocessing pool with the fork start method, os.fork()). So:
//  - every in-process NVRTC call holds the gate shared (hold_off_forks), and so does its caller from before
//    the thread that compiles starts until it is joined: a thread that compiled runs NVRTC's thread-exit
//    clean-up when it ends, which locks NVRTC's mutexes too;
//  - kjit's own compile children are forked under the gate held exclusively (ForkGateExclusive);
//  - every other fork(), by any thread or library, waits in a pthread_atfork handler (installed with the
//    first hold) until the compiles in flight have ended, at most KJIT_COMPILE_TIMEOUT, and no compile
//    starts until the fork is made (so that compiles that follow or overlap one another cannot keep it
//    waiting until that limit).
// A fork that could not wait for them (it outlasted that limit, or the forking thread holds the gate
// itself) makes a child whose NVRTC may be stopped mid-call: that child refuses to compile, with an
// Error that says why and what to do, instead of hanging. Loading kernels (memory, disk, remote) works.
//
// Holds that the holds in flight wait for are let in while a fork waits: a thread's nested holds (the
// compiler preload holds the gate across several steps, compiles among them) and the hold that a compile
// lends the worker thread it joins (hold_off_forks_beside).
#pragma once

namespace kjit {

// A shared hold of the gate (move-only; empty once released or moved from). A thread may hold it more than
// once (nested holds): only its first waits for a fork.
class ForkHold {
 public:
  ForkHold() = default;
  ForkHold(ForkHold&& o) noexcept : held_(o.held_) { o.held_ = false; }
  ForkHold& operator=(ForkHold&& o) noexcept;
  ~ForkHold() { release(); }
  ForkHold(const ForkHold&) = delete;
  ForkHold& operator=(const ForkHold&) = delete;
  void release() noexcept;

 private:
  friend ForkHold hold_off_forks();
  friend ForkHold hold_off_forks_beside(const ForkHold& caller);
  bool held_ = false;
};

// Held (shared) around every in-process NVRTC call, so that no fork happens while one runs. Throws Error
// in a child forked while another thread was inside NVRTC (see above).
ForkHold hold_off_forks();
// A shared hold for a thread that the holder of `caller` waits for (a compile's worker, joined while
// `caller` is held): taken on that thread at once, never waiting for a fork, which waits for `caller` and
// so for this thread. hold_off_forks() when `caller` holds nothing.
ForkHold hold_off_forks_beside(const ForkHold& caller);
// The gate held shared by this thread across several steps, taken only if that needs no wait (false: a
// compile child is being forked, or a fork waits): the compiler preload's. Meanwhile this thread's
// hold_off_forks() returns at once, as a nested hold.
bool try_hold_off_forks_on_this_thread() noexcept;
void stop_holding_off_forks_on_this_thread() noexcept;

// The gate held exclusively by this thread for the scope of the object: kjit forks its compile children
// under it. Throws Error, as hold_off_forks() does, in a child whose NVRTC may be stopped mid-call (a
// compile child forked from it would inherit that).
class ForkGateExclusive {
 public:
  ForkGateExclusive();
  ~ForkGateExclusive();
  ForkGateExclusive(const ForkGateExclusive&) = delete;
  ForkGateExclusive& operator=(const ForkGateExclusive&) = delete;
};

// Whether this process was forked while another thread was inside NVRTC (then it compiles nothing).
bool forked_during_a_compile() noexcept;

}  // namespace kjit
