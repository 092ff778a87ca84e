// What the remote tier's test servers (redis_server.hpp, scripted_redis.hpp) have in common: a port on
// 127.0.0.1, and the URL and endpoint that reach it.
#pragma once

#include <string>

#include "kjit/cache/remote_config.hpp"

namespace kjit::testing {

class LocalRedis {
 public:
  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/0"; }
  cache::RedisEndpoint endpoint() const {
    cache::RedisEndpoint e;
    e.host = "127.0.0.1";
    e.port = port_;
    return e;
  }

 protected:
  explicit LocalRedis(int port = 0) : port_(port) {}

  int port_;
};

}  // namespace kjit::testing
