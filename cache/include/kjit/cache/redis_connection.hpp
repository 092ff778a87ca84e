// One connection to a Redis server (hiredis, blocking, with time limits): connect, AUTH and SELECT as
// the endpoint says, then commands with binary-safe arguments, alone or pipelined (many commands in one
// round trip). Not thread-safe: one thread at a time (RedisStore keeps a pool). Every failure (refused,
// timed out, closed, a protocol error, an error reply to AUTH/SELECT) is a RemoteError, after which the
// connection is unusable and must be dropped; an error *reply* to a command is a Reply of type Error.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kjit/cache/remote_config.hpp"
#include "kjit/error.hpp"

struct redisContext;

namespace kjit::cache {

class RemoteError : public Error {
 public:
  explicit RemoteError(const std::string& message, bool connection_lost = false)
      : Error(message), connection_lost_(connection_lost) {}
  // The server closed or reset the connection (an idle one it dropped, a restart): a new connection
  // may work at once, unlike a refused connect or a timeout.
  bool connection_lost() const noexcept { return connection_lost_; }

 private:
  bool connection_lost_ = false;
};

struct RedisReply {
  enum class Type { Nil, String, Status, Integer, Error, Array };
  Type type = Type::Nil;
  std::string str;  // String, Status, Error
  long long integer = 0;
  std::vector<RedisReply> elements;  // Array
};

class RedisConnection {
 public:
  using Command = std::vector<std::string_view>;

  // Throws RemoteError when the server cannot be reached in `timeout_s` or refuses AUTH / SELECT.
  RedisConnection(const RedisEndpoint& endpoint, double timeout_s);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  RedisReply command(const Command& args);
  // The replies of `commands`, sent together and read in order (one round trip).
  std::vector<RedisReply> pipeline(const std::vector<Command>& commands);

 private:
  void open(const RedisEndpoint& endpoint, double timeout_s);
  [[noreturn]] void fail(const std::string& doing);

  std::string where_;
  redisContext* ctx_ = nullptr;
};

}  // namespace kjit::cache
