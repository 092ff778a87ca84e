// A real redis-server for the remote tier's tests: started on 127.0.0.1 on a free port with its own
// directory and no persistence, stopped (and reaped) when the object goes. Found on PATH or in
// /usr/bin, /usr/sbin (Debian's redis-server package, installed by .ci/system_packages.sh). Tests skip
// without it, unless KJIT_REQUIRE_REDIS=1 (CI), where its absence is a failure.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "local_redis.hpp"

namespace kjit::testing {

class RedisServer : public LocalRedis {
 public:
  // The redis-server executable, or empty when none is installed.
  static std::filesystem::path executable();
  // Why the tests cannot run (no server), or empty; fails (ADD_FAILURE) under KJIT_REQUIRE_REDIS=1.
  static std::string unavailable_reason();

  // Starts a server on a free port in `dir` and waits until it answers PING (throws std::runtime_error
  // when it does not within 10 s). `options` are added to the command line (later ones win), e.g.
  // {"--appendonly", "yes"} for a server that keeps its data across stop() and start().
  explicit RedisServer(const std::filesystem::path& dir, std::vector<std::string> options = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // Stops it (SIGTERM, reaped); start() again on the same port.
  void stop();
  void start();
  // Freezes / resumes it (SIGSTOP / SIGCONT): connections are accepted by the kernel, never answered.
  void freeze();
  void thaw();

 private:
  std::filesystem::path dir_;
  std::vector<std::string> options_;
  pid_t pid_ = -1;
};

// A fresh free TCP port on 127.0.0.1 (bound and released: good for a server started right after).
int free_port();

}  // namespace kjit::testing
