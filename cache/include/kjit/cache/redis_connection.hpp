// One connection to a Redis server: connect, AUTH and SELECT as the endpoint says, then commands with
// binary-safe arguments, alone or pipelined (many commands in one round trip). Not thread-safe: one
// thread at a time (RedisStore keeps a pool).
//
// Time: every request has ONE deadline, `timeout_s` after it starts: a command or a pipeline, from its
// first byte sent to its last reply's last byte, and the connection's set-up (connect, AUTH, SELECT).
// hiredis connects (redisConnectWithTimeout); after that kjit does the I/O itself on the socket, made
// non-blocking: poll() until the deadline, the bytes fed to hiredis's reader, which assembles replies.
// A server that trickles a reply, or stops in the middle of one, costs one timeout, never more; so does
// a value too large to come through the link in that time (a big entry over a slow link needs a larger
// timeout). A host name is resolved by the system's resolver before the connect, outside the deadline.
// Size: before the reader sees them, the same bytes go through a RespScanner (resp_limits.hpp). A reply
// that announces a value longer than kMaxRemoteValueBytes, or more array elements in all than the
// request can need (one per argument sent, plus kRespElementSlack), is refused as soon as its header is
// read, before its body. A write to a connection the server closed never raises SIGPIPE (MSG_NOSIGNAL).
//
// Every failure (refused, timed out, closed, a refused or malformed reply, an error reply to AUTH or
// SELECT) is a RemoteError, after which the connection is unusable and must be dropped; an error
// *reply* to a command is a Reply of type Error.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kjit/cache/entry_check.hpp"
#include "kjit/cache/entry_seal.hpp"
#include "kjit/cache/remote_config.hpp"
#include "kjit/cache/unique_fd.hpp"
#include "kjit/error.hpp"

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

// The longest value a reply may carry: the largest entry kjit accepts, sealed.
inline constexpr std::uint64_t kMaxRemoteValueBytes = kMaxEntryFileBytes + kSealHeaderBytes;
// Array elements a request's replies may announce beyond one per argument sent (MGET's reply has one
// per key); room for an administrator's CONFIG GET or ACL GETUSER through this class.
inline constexpr std::uint64_t kRespElementSlack = 1024;
// The longest status, error or integer line accepted.
inline constexpr std::size_t kMaxRespLineBytes = 64 * 1024;

class RedisConnection {
 public:
  using Command = std::vector<std::string_view>;

  // Throws RemoteError when the server cannot be reached and set up (AUTH, SELECT) within `timeout_s`,
  // or refuses AUTH / SELECT.
  RedisConnection(const RedisEndpoint& endpoint, double timeout_s);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends `args` and reads its reply, within timeout_s of the call.
  RedisReply command(const Command& args);
  // The replies of `commands`, sent together and read in order (one round trip), all within timeout_s
  // of the call.
  std::vector<RedisReply> pipeline(const std::vector<Command>& commands);

 private:
  using Deadline = std::chrono::steady_clock::time_point;
  void open(const RedisEndpoint& endpoint);
  std::vector<RedisReply> exchange(const std::vector<Command>& commands, Deadline deadline);
  // Marks the connection unusable and throws.
  [[noreturn]] void fail(const std::string& what, bool connection_lost = false);

  std::string where_;
  double timeout_s_;
  UniqueFd fd_;
  bool broken_ = false;
};

}  // namespace kjit::cache
