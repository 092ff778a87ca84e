#include "kjit/cache/redis_connection.hpp"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <memory>

#include "kjit/cache/posix_error.hpp"
#include "kjit/cache/resp_limits.hpp"

namespace kjit::cache {
namespace {

using Clock = std::chrono::steady_clock;

timeval to_timeval(double s) {
  timeval tv{};
  const double whole = std::floor(s);
  tv.tv_sec = static_cast<time_t>(whole);
  tv.tv_usec = static_cast<suseconds_t>((s - whole) * 1e6);
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1000;
  return tv;
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

RedisReply convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING: out.type = RedisReply::Type::String; break;
    case REDIS_REPLY_STATUS: out.type = RedisReply::Type::Status; break;
    case REDIS_REPLY_ERROR: out.type = RedisReply::Type::Error; break;
    case REDIS_REPLY_INTEGER: out.type = RedisReply::Type::Integer; break;
    case REDIS_REPLY_ARRAY: out.type = RedisReply::Type::Array; break;
    default: out.type = RedisReply::Type::Nil; break;
  }
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)
    out.str.assign(r->str, r->len);
  if (r->type == REDIS_REPLY_INTEGER) out.integer = r->integer;
  if (r->type == REDIS_REPLY_ARRAY) {
    out.elements.reserve(r->elements);
    for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
  }
  return out;
}

struct ReplyFree {
  void operator()(void* r) const { freeReplyObject(r); }
};
struct ReaderFree {
  void operator()(redisReader* r) const { redisReaderFree(r); }
};
struct CommandFree {
  void operator()(char* c) const { redisFreeCommand(c); }
};

// What a request is, for messages: its first command's name only (an AUTH's other arguments are secret).
std::string request_name(const std::vector<RedisConnection::Command>& commands) {
  std::string name(commands.front().empty() ? std::string_view("(empty command)") : commands.front().front());
  if (commands.size() == 2) name += " and 1 more command";
  if (commands.size() > 2) name += " and " + std::to_string(commands.size() - 1) + " more commands";
  return name;
}

bool lost_errno(int err) { return err == ECONNRESET || err == EPIPE || err == ECONNABORTED; }

}  // namespace

RedisConnection::RedisConnection(const RedisEndpoint& endpoint, double timeout_s)
    : where_(endpoint.display()), timeout_s_(timeout_s) {
  open(endpoint);
}

RedisConnection::~RedisConnection() = default;

void RedisConnection::open(const RedisEndpoint& endpoint) {
  // Connect, AUTH and SELECT: one request, one deadline.
  const Deadline deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  redisContext* ctx = redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, to_timeval(timeout_s_));
  if (!ctx) throw RemoteError("cannot allocate a Redis connection to " + where_);
  if (ctx->err) {
    std::string why = ctx->errstr;
    if (ctx->err == REDIS_ERR_IO && why.find("Resource temporarily unavailable") != std::string::npos)
      why = "timed out";
    redisFree(ctx);
    throw RemoteError("connecting failed: " + why);
  }
  redisEnableKeepAlive(ctx);
  // From here on the socket is ours (hiredis's blocking I/O bounds each read(), not a reply).
  fd_.reset(redisFreeKeepFd(ctx));
  const int flags = ::fcntl(fd_.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd_.get(), F_SETFL, flags | O_NONBLOCK) != 0)
    fail("connecting failed: cannot make the socket non-blocking (" + errno_text(errno) + ")");
  ::fcntl(fd_.get(), F_SETFD, FD_CLOEXEC);  // not inherited by programs that compile children exec

  std::vector<Command> setup;
  std::vector<const char*> doing;
  if (!endpoint.password.empty()) {
    if (endpoint.user.empty())
      setup.push_back({"AUTH", endpoint.password});
    else
      setup.push_back({"AUTH", endpoint.user, endpoint.password});
    doing.push_back("AUTH");
  }
  const std::string db = std::to_string(endpoint.db);
  if (endpoint.db != 0) {
    setup.push_back({"SELECT", db});
    doing.push_back("SELECT");
  }
  if (setup.empty()) return;
  const std::vector<RedisReply> replies = exchange(setup, deadline);
  for (std::size_t i = 0; i < replies.size(); ++i)
    if (replies[i].type == RedisReply::Type::Error) {
      broken_ = true;
      throw RemoteError(where_ + " refused " + doing[i] + ": " + replies[i].str);
    }
}

void RedisConnection::fail(const std::string& what, bool connection_lost) {
  broken_ = true;
  fd_.reset();
  throw RemoteError(what, connection_lost);
}

RedisReply RedisConnection::command(const Command& args) { return std::move(pipeline({args}).front()); }

std::vector<RedisReply> RedisConnection::pipeline(const std::vector<Command>& commands) {
  return exchange(
      commands, Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_)));
}

std::vector<RedisReply> RedisConnection::exchange(const std::vector<Command>& commands, Deadline deadline) {
  if (commands.empty()) return {};
  const std::string name = request_name(commands);
  if (broken_ || !fd_) fail(name + ": the connection failed before and cannot be used again");

  // The request, in RESP (hiredis formats it), and a budget of array elements for its replies.
  std::vector<std::unique_ptr<char, CommandFree>> out;
  std::vector<std::size_t> out_size;
  std::uint64_t arguments = 0;
  for (const Command& args : commands) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    char* formatted = nullptr;
    const long long n = redisFormatCommandArgv(&formatted, static_cast<int>(argv.size()), argv.data(), lens.data());
    if (n < 0 || !formatted) fail(name + ": cannot format the command (out of memory)");
    out.emplace_back(formatted);
    out_size.push_back(static_cast<std::size_t>(n));
    arguments += args.size();
  }
  RespLimits limits;
  limits.max_bulk_bytes = kMaxRemoteValueBytes;
  limits.max_elements = arguments + kRespElementSlack;
  limits.max_line_bytes = kMaxRespLineBytes;
  RespScanner scanner(limits);
  std::unique_ptr<redisReader, ReaderFree> reader(redisReaderCreate());
  if (!reader) fail(name + ": cannot allocate a reply reader (out of memory)");

  std::vector<RedisReply> replies;
  replies.reserve(commands.size());
  constexpr std::size_t kChunk = 64 * 1024;
  std::unique_ptr<char[]> chunk(new char[kChunk]);
  std::size_t next = 0, sent = 0;  // the buffer being sent, and how much of it is
  auto timed_out = [&] {
    fail(name + " timed out: no complete reply within " + seconds_text(timeout_s_) +
         " s (KJIT_REMOTE_CACHE_TIMEOUT, the limit of a whole request); " +
         (next < out.size() ? "the server did not take the whole request"
                            : std::to_string(scanner.scanned()) + " bytes of its reply came"));
  };

  // Sends while there is something to send and reads whatever comes (a reply refused early ends it all).
  while (next < out.size() || replies.size() < commands.size()) {
    const auto now = Clock::now();
    if (now >= deadline) timed_out();
    const auto left_ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    pollfd p{fd_.get(), static_cast<short>(POLLIN | (next < out.size() ? POLLOUT : 0)), 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left_ms, INT_MAX)));
    if (ready < 0 && errno != EINTR) fail(name + " failed: poll: " + errno_text(errno));
    if (ready <= 0) continue;

    if (next < out.size() && (p.revents & (POLLOUT | POLLERR))) {
      const ssize_t n = ::send(fd_.get(), out[next].get() + sent, out_size[next] - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        fail(name + " failed: sending: " + errno_text(errno), lost_errno(errno));
      if (n > 0 && (sent += static_cast<std::size_t>(n)) == out_size[next]) {
        out[next].reset();  // a large value is not held longer than needed
        ++next;
        sent = 0;
      }
    }
    if (!(p.revents & (POLLIN | POLLERR | POLLHUP))) continue;
    const ssize_t got = ::recv(fd_.get(), chunk.get(), kChunk, 0);
    if (got == 0) fail(name + " failed: the server closed the connection", true);
    if (got < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      fail(name + " failed: receiving: " + errno_text(errno), lost_errno(errno));
    }
    // The scanner first: a header over a limit is refused before hiredis's reader buffers its body.
    if (!scanner.feed(chunk.get(), static_cast<std::size_t>(got)))
      fail(name + ": refused the reply of " + where_ + " at its header, before reading the rest: " + scanner.error() +
           ". kjit accepts values of at most its largest entry sealed and arrays of one element per argument "
           "sent plus " +
           std::to_string(kRespElementSlack) +
           "; is something other than a Redis that kjit fills at this address? (the connection was dropped)");
    if (scanner.replies() > commands.size())
      fail(name + ": " + where_ + " sent more replies than the " + std::to_string(commands.size()) +
           " asked for (the connection was dropped)");
    if (redisReaderFeed(reader.get(), chunk.get(), static_cast<std::size_t>(got)) != REDIS_OK)
      fail(name + " failed: cannot buffer the reply (" + std::string(reader->errstr) + ")");
    while (replies.size() < commands.size()) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader.get(), &raw) != REDIS_OK)
        fail(name + ": a reply that is not Redis's protocol (" + std::string(reader->errstr) + ")");
      if (!raw) break;
      std::unique_ptr<void, ReplyFree> reply(raw);
      replies.push_back(convert(static_cast<const redisReply*>(raw)));
    }
  }
  // Nothing may follow the last reply: the next request would read it as its own.
  if (scanner.replies() != commands.size() || !scanner.between_replies())
    fail(name + ": " + where_ + " sent more than the replies asked for (the connection was dropped)");
  return replies;
}

}  // namespace kjit::cache
