#include "kjit/cache/redis_connection.hpp"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <cmath>

namespace kjit::cache {
namespace {

timeval to_timeval(double s) {
  timeval tv{};
  const double whole = std::floor(s);
  tv.tv_sec = static_cast<time_t>(whole);
  tv.tv_usec = static_cast<suseconds_t>((s - whole) * 1e6);
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1000;
  return tv;
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
  if (r->type == REDIS_REPLY_ARRAY)
    for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
  return out;
}

// A write to a connection the server closed raises SIGPIPE, whose default action ends the process; a
// library must neither die of it nor change the program's handlers: SIGPIPE is blocked on this thread
// while the connection is used, and one raised meanwhile is consumed.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    sigset_t pending;
    if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const timespec now{0, 0};
      sigtimedwait(&pipe_, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_{}, old_{};
  bool was_pending_ = false;
};

struct ReplyFree {
  void operator()(void* r) const { freeReplyObject(r); }
};

}  // namespace

RedisConnection::RedisConnection(const RedisEndpoint& endpoint, double timeout_s) : where_(endpoint.display()) {
  try {
    open(endpoint, timeout_s);
  } catch (...) {
    if (ctx_) redisFree(ctx_);  // the destructor does not run for a constructor that throws
    ctx_ = nullptr;
    throw;
  }
}

void RedisConnection::open(const RedisEndpoint& endpoint, double timeout_s) {
  const timeval tv = to_timeval(timeout_s);
  ctx_ = redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, tv);
  if (!ctx_) throw RemoteError("cannot allocate a Redis connection to " + where_);
  if (ctx_->err) fail("connecting");
  if (redisSetTimeout(ctx_, tv) != REDIS_OK) fail("setting the reply timeout");
  redisEnableKeepAlive(ctx_);
  auto must_be_ok = [&](const RedisReply& r, const char* doing) {
    if (r.type == RedisReply::Type::Error) throw RemoteError(where_ + " refused " + doing + ": " + r.str);
  };
  if (!endpoint.password.empty()) {
    if (endpoint.user.empty())
      must_be_ok(command({"AUTH", endpoint.password}), "AUTH");
    else
      must_be_ok(command({"AUTH", endpoint.user, endpoint.password}), "AUTH");
  }
  if (endpoint.db != 0) {
    const std::string db = std::to_string(endpoint.db);
    must_be_ok(command({"SELECT", db}), "SELECT");
  }
}

RedisConnection::~RedisConnection() {
  if (ctx_) redisFree(ctx_);
}

void RedisConnection::fail(const std::string& doing) {
  std::string why = ctx_ && ctx_->err ? std::string(ctx_->errstr) : std::string("unknown error");
  if (ctx_ && ctx_->err == REDIS_ERR_IO && why.find("Resource temporarily unavailable") != std::string::npos)
    why = "timed out";
  const bool lost = ctx_ && (ctx_->err == REDIS_ERR_EOF ||
                             (ctx_->err == REDIS_ERR_IO && (why.find("reset") != std::string::npos ||
                                                            why.find("Broken pipe") != std::string::npos)));
  throw RemoteError(doing + " failed: " + why, lost);
}

RedisReply RedisConnection::command(const Command& args) {
  return std::move(pipeline({args}).front());
}

std::vector<RedisReply> RedisConnection::pipeline(const std::vector<Command>& commands) {
  if (!ctx_ || ctx_->err) fail("sending a command");
  SigpipeGuard no_sigpipe;
  for (const Command& args : commands) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK)
      fail("queueing a command");
  }
  std::vector<RedisReply> out;
  out.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK || !raw) fail("reading a reply");
    std::unique_ptr<void, ReplyFree> reply(raw);
    out.push_back(convert(static_cast<const redisReply*>(raw)));
  }
  return out;
}

}  // namespace kjit::cache
