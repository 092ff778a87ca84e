// A scripted Redis for the remote tier's hostile-server tests: it listens on 127.0.0.1 (a free port), reads
// each command a client sends (a RESP array of bulk strings, as every Redis client sends them) and answers
// as the test's script says: bytes sent at once, then bytes trickled one at a time, then, if told, silence
// with the socket kept open. No real Redis behaves so; a proxy, a lossy link or whoever holds the address
// may. Every connection is closed after `max_connection_s` whatever happens, so that a client that does
// not bound its wait (the code under test, when it is wrong) fails its timing check instead of hanging.
// The server stops (threads joined, sockets closed) when the object goes.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "local_redis.hpp"

namespace kjit::testing {

class ScriptedRedis : public LocalRedis {
 public:
  struct Answer {
    std::string now;      // sent at once
    std::string trickle;  // then one byte per `every`
    std::chrono::milliseconds every{50};
    bool hold = false;  // then nothing more on this connection: it stays open, unread
  };
  // Called on the server's connection thread with each command's arguments (args[0] is its name).
  using Script = std::function<Answer(const std::vector<std::string>& args)>;

  explicit ScriptedRedis(Script script, double max_connection_s = 20);
  ~ScriptedRedis();
  ScriptedRedis(const ScriptedRedis&) = delete;
  ScriptedRedis& operator=(const ScriptedRedis&) = delete;
  // The names of the commands received so far, in order.
  std::vector<std::string> received() const;

  // A reply that announces a bulk string of `n` bytes and sends its first `sent` bytes.
  static std::string bulk_header(unsigned long long n, std::size_t sent = 0);
  // A bulk string of 100000 bytes that comes one byte every 50 ms (5000 s in all): each read() gets a
  // byte, well within any per-read timeout.
  static Answer trickled_bulk();

 private:
  void accept_loop();
  void serve(int fd);
  bool wait_stop(std::chrono::steady_clock::duration d);  // true when stopping

  Script script_;
  std::chrono::steady_clock::duration max_connection_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<std::string> received_;
  std::vector<std::thread> connections_;
  std::thread acceptor_;
};

}  // namespace kjit::testing
