#include "kjit/fork_gate.hpp"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <new>
#include <string>

#include "kjit/error.hpp"
#include "kjit/settings.hpp"

namespace kjit {
namespace {

// Readers: in-process NVRTC calls. Writer: a fork (kjit's own compile child, or any fork() while the
// atfork handlers run). A fork waits for the readers in flight, and no new reader starts while one waits
// (only holds that the readers in flight wait for: a thread's nested hold, a compile's worker), so that
// compiles that follow or overlap one another cannot keep a fork waiting until its limit.
struct Gate {
  std::mutex mu;
  std::condition_variable changed;  // made anew in a forked child
  int readers = 0;
  int forks_waiting = 0;  // forks waiting for the readers to end (at most KJIT_COMPILE_TIMEOUT)
  bool writer = false;
  double fork_wait_s = 300;  // KJIT_COMPILE_TIMEOUT, read when the handlers were installed
};

Gate& gate() {
  static Gate* g = new Gate;  // never destroyed: threads and fork handlers use it until exit
  return *g;
}

// What this thread holds: shared holds (hold_off_forks and the preload's), the exclusive one.
thread_local int t_holds = 0;
thread_local bool t_preload_hold = false;
thread_local bool t_exclusive = false;

// Between a fork's prepare handler and its parent / child handler (on the forking thread).
enum class ForkCase { Clean, OutlastedTheWait, MadeByACompilingThread };
thread_local ForkCase t_fork_case = ForkCase::Clean;
thread_local bool t_took_writer = false;

// Set in a child forked while another thread was inside NVRTC (and inherited by its own children).
ForkCase g_inherited = ForkCase::Clean;

// Until when a fork waits for the compiles in flight, from now (KJIT_COMPILE_TIMEOUT).
std::chrono::steady_clock::time_point fork_deadline(const Gate& g) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(g.fork_wait_s));
}

void before_fork() {
  Gate& g = gate();
  std::unique_lock<std::mutex> lock(g.mu);
  t_fork_case = ForkCase::Clean;
  t_took_writer = false;
  if (t_exclusive) {
    // kjit's own compile child: no thread is inside NVRTC.
  } else if (t_holds > 0) {
    // This thread holds the gate, so it cannot wait for the others: were any of them inside NVRTC, the
    // child gets that state.
    if (g.readers > t_holds) t_fork_case = ForkCase::MadeByACompilingThread;
  } else {
    ++g.forks_waiting;
    const bool free = g.changed.wait_until(lock, fork_deadline(g), [&] { return !g.writer && g.readers == 0; });
    --g.forks_waiting;
    if (free) {
      g.writer = true;
      t_took_writer = true;
    } else {
      t_fork_case = ForkCase::OutlastedTheWait;
      g.changed.notify_all();  // the holds that waited for this fork go on
    }
  }
  // No thread inside: the gate's mutex stays locked across the fork, so that no hold starts or ends
  // meanwhile (the compiler preload takes it only with try_lock, and holds nothing now). Otherwise it is
  // let go, so that the threads inside can end their holds while the other fork handlers wait for them
  // (the preload's waits for the preload): the child, which refuses to compile, makes a fresh one.
  if (t_fork_case == ForkCase::Clean) lock.release();
}

void after_fork_in_parent() {
  Gate& g = gate();
  if (t_fork_case == ForkCase::Clean) {
    const bool notify = t_took_writer;
    if (t_took_writer) g.writer = false;
    g.mu.unlock();
    if (notify) g.changed.notify_all();
  }
  t_took_writer = false;
  t_fork_case = ForkCase::Clean;
}

void after_fork_in_child() {
  Gate& g = gate();
  const bool kept_the_mutex = t_fork_case == ForkCase::Clean;
  if (!kept_the_mutex) {
    if (g_inherited == ForkCase::Clean) g_inherited = t_fork_case;
    new (&g.mu) std::mutex;  // another thread may have held it at the fork
  }
  // Only this thread lives on here: its own holds are the gate's readers, and the condition variable
  // that other threads waited on (their waits are left in its counters) is made anew in place.
  g.readers = t_holds;
  g.forks_waiting = 0;  // the threads that waited to fork are the parent's
  g.writer = false;
  new (&g.changed) std::condition_variable;
  t_exclusive = false;
  t_took_writer = false;
  t_fork_case = ForkCase::Clean;
  if (kept_the_mutex) g.mu.unlock();
}

void install_fork_handlers() {
  static const bool installed = [] {
    double wait_s = 300;
    try {
      wait_s = settings().compile_timeout_s;
    } catch (const std::exception&) {
      // bad settings: reported by the first real use; the default applies here
    }
    {
      std::lock_guard<std::mutex> lock(gate().mu);
      gate().fork_wait_s = wait_s;
    }
    return ::pthread_atfork(&before_fork, &after_fork_in_parent, &after_fork_in_child) == 0;
  }();
  (void)installed;
}

// One more shared hold on this thread (the gate's mutex held): none is started while a fork waits for
// the holds in flight, but a thread's nested hold, and a hold lent by a holder (hold_off_forks_beside).
void start_a_hold(std::unique_lock<std::mutex>& lock, bool wait_for_forks) {
  Gate& g = gate();
  if (wait_for_forks) g.changed.wait(lock, [&] { return !g.writer && g.forks_waiting == 0; });
  ++g.readers;
  ++t_holds;
}

// One shared hold of this thread ends; the last one lets a waiting fork go.
void end_a_hold() noexcept {
  Gate& g = gate();
  bool last;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    --g.readers;
    --t_holds;
    last = g.readers == 0;
  }
  if (last) g.changed.notify_all();
}

void refuse_if_forked_during_a_compile() {
  if (g_inherited == ForkCase::Clean) return;
  const std::string why =
      g_inherited == ForkCase::OutlastedTheWait
          ? "and that compile had not ended after " + std::to_string(static_cast<long long>(gate().fork_wait_s)) +
                " s (KJIT_COMPILE_TIMEOUT), the longest a fork waits for one"
          : "and the fork was made by a thread that was compiling itself, so it could not wait for the others";
  throw Error("kjit cannot compile in this process (pid " + std::to_string(::getpid()) +
              "): it was forked while another thread of its parent was inside NVRTC, the CUDA compiler, " + why +
              "; NVRTC's lock may be held here by a thread this process does not have, and a compile would wait "
              "forever. Kernels already compiled still load (memory, disk, remote cache). Compile what the workers "
              "need before forking them (a first call in the parent, or `kjit warm`), or start them with "
              "multiprocessing's 'spawn' or 'forkserver' start method.");
}

}  // namespace

ForkHold& ForkHold::operator=(ForkHold&& o) noexcept {
  if (this != &o) {
    release();
    held_ = o.held_;
    o.held_ = false;
  }
  return *this;
}

void ForkHold::release() noexcept {
  if (!held_) return;
  held_ = false;
  end_a_hold();
}

ForkHold hold_off_forks() {
  install_fork_handlers();
  refuse_if_forked_during_a_compile();
  Gate& g = gate();
  std::unique_lock<std::mutex> lock(g.mu);
  // A thread that holds the gate already is a reader: it must not wait for a fork that waits for it.
  start_a_hold(lock, t_holds == 0);
  ForkHold h;
  h.held_ = true;
  return h;
}

ForkHold hold_off_forks_beside(const ForkHold& caller) {
  if (!caller.held_) return hold_off_forks();
  Gate& g = gate();
  std::unique_lock<std::mutex> lock(g.mu);
  start_a_hold(lock, false);  // `caller` is held: no fork has the gate, and a waiting one waits for this thread
  ForkHold h;
  h.held_ = true;
  return h;
}

bool try_hold_off_forks_on_this_thread() noexcept {
  if (t_preload_hold) return true;
  install_fork_handlers();
  Gate& g = gate();
  // try_lock: a fork's prepare handler keeps the mutex across the fork, and may meanwhile wait for the
  // preload's own fork handler, which waits for this thread.
  std::unique_lock<std::mutex> lock(g.mu, std::try_to_lock);
  if (!lock.owns_lock() || g.writer || g.forks_waiting > 0) return false;
  start_a_hold(lock, false);
  t_preload_hold = true;
  return true;
}

void stop_holding_off_forks_on_this_thread() noexcept {
  if (!t_preload_hold) return;
  t_preload_hold = false;
  end_a_hold();
}

ForkGateExclusive::ForkGateExclusive() {
  install_fork_handlers();
  refuse_if_forked_during_a_compile();
  Gate& g = gate();
  std::unique_lock<std::mutex> lock(g.mu);
  // Compiles that start after this wait go after it, for KJIT_COMPILE_TIMEOUT at most: a compile in flight
  // that outlasts that (in-process ones cannot be stopped) holds back this compile child, not every other.
  const auto free = [&] { return !g.writer && g.readers == 0; };
  ++g.forks_waiting;
  const bool in_time = g.changed.wait_until(lock, fork_deadline(g), free);
  --g.forks_waiting;
  if (!in_time) {
    g.changed.notify_all();
    g.changed.wait(lock, free);
  }
  g.writer = true;
  t_exclusive = true;
}

ForkGateExclusive::~ForkGateExclusive() {
  Gate& g = gate();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.writer = false;
    t_exclusive = false;
  }
  g.changed.notify_all();
}

bool forked_during_a_compile() noexcept { return g_inherited != ForkCase::Clean; }

}  // namespace kjit
