#include "scripted_redis.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace kjit::testing {
namespace {

using Clock = std::chrono::steady_clock;

// One whole command at the front of `buf` (*N then N $len bulk strings): its arguments, and the bytes it
// took in *used; false while it is incomplete.
bool take_command(const std::string& buf, std::vector<std::string>* args, std::size_t* used) {
  auto line = [&](std::size_t at, char type, long long* n, std::size_t* next) {
    if (at >= buf.size()) return false;
    if (buf[at] != type) throw std::runtime_error("ScriptedRedis: not a RESP command");
    const std::size_t end = buf.find("\r\n", at);
    if (end == std::string::npos) return false;
    *n = std::stoll(buf.substr(at + 1, end - at - 1));
    *next = end + 2;
    return true;
  };
  long long count = 0;
  std::size_t at = 0;
  if (!line(0, '*', &count, &at)) return false;
  std::vector<std::string> out;
  for (long long i = 0; i < count; ++i) {
    long long len = 0;
    if (!line(at, '$', &len, &at)) return false;
    if (buf.size() < at + static_cast<std::size_t>(len) + 2) return false;
    out.push_back(buf.substr(at, static_cast<std::size_t>(len)));
    at += static_cast<std::size_t>(len) + 2;
  }
  *args = std::move(out);
  *used = at;
  return true;
}

bool send_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

}  // namespace

ScriptedRedis::ScriptedRedis(Script script, double max_connection_s)
    : script_(std::move(script)),
      max_connection_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(max_connection_s))) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error("ScriptedRedis: socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error("ScriptedRedis: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

ScriptedRedis::~ScriptedRedis() {
  stop_ = true;
  acceptor_.join();
  for (auto& t : connections_) t.join();
  ::close(listen_fd_);
}

std::vector<std::string> ScriptedRedis::received() const {
  std::lock_guard<std::mutex> lock(mu_);
  return received_;
}

std::string ScriptedRedis::bulk_header(unsigned long long n, std::size_t sent) {
  return "$" + std::to_string(n) + "\r\n" + std::string(sent, '\0');
}

ScriptedRedis::Answer ScriptedRedis::trickled_bulk() {
  Answer a;
  a.now = bulk_header(100000);
  a.trickle = std::string(100000, 'x') + "\r\n";
  a.every = std::chrono::milliseconds(50);
  return a;
}

bool ScriptedRedis::wait_stop(Clock::duration d) {
  const auto until = Clock::now() + d;
  while (!stop_.load()) {
    const auto now = Clock::now();
    if (now >= until) return false;
    std::this_thread::sleep_for(std::min<Clock::duration>(until - now, std::chrono::milliseconds(10)));
  }
  return true;
}

void ScriptedRedis::accept_loop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    connections_.emplace_back([this, fd] {
      serve(fd);
      ::close(fd);
    });
  }
}

void ScriptedRedis::serve(int fd) {
  const auto end = Clock::now() + max_connection_;
  auto over = [&] { return stop_.load() || Clock::now() >= end; };
  std::string buf;
  char chunk[65536];
  while (!over()) {
    std::vector<std::string> args;
    std::size_t used = 0;
    if (!take_command(buf, &args, &used)) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) return;  // the client closed it
      buf.append(chunk, static_cast<std::size_t>(n));
      continue;
    }
    buf.erase(0, used);
    {
      std::lock_guard<std::mutex> lock(mu_);
      received_.push_back(args.empty() ? "" : args[0]);
    }
    const Answer a = script_(args);
    if (!send_all(fd, a.now.data(), a.now.size())) return;
    for (char c : a.trickle) {
      if (wait_stop(a.every) || over() || !send_all(fd, &c, 1)) return;
    }
    if (a.hold) {
      while (!over()) wait_stop(std::chrono::milliseconds(20));
      return;
    }
  }
}

}  // namespace kjit::testing
