#include "redis_server.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kjit/cache/redis_connection.hpp"

namespace kjit::testing {
namespace fs = std::filesystem;

fs::path RedisServer::executable() {
  std::vector<fs::path> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string d; std::getline(ss, d, ':');)
      if (!d.empty()) dirs.emplace_back(d);
  }
  dirs.emplace_back("/usr/bin");
  dirs.emplace_back("/usr/sbin");
  for (const auto& d : dirs)
    if (::access((d / "redis-server").c_str(), X_OK) == 0) return d / "redis-server";
  return {};
}

std::string RedisServer::unavailable_reason() {
  if (!executable().empty()) return "";
  const std::string why = "no redis-server (Debian package redis-server; bash .ci/system_packages.sh installs it)";
  const char* require = std::getenv("KJIT_REQUIRE_REDIS");
  if (require && std::string(require) == "1") ADD_FAILURE() << why << ", and KJIT_REQUIRE_REDIS=1";
  return why;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot bind a free port");
  }
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

RedisServer::RedisServer(const fs::path& dir, std::vector<std::string> options)
    : LocalRedis(free_port()), dir_(dir), options_(std::move(options)) {
  fs::create_directories(dir_);
  start();
}

RedisServer::~RedisServer() { stop(); }

void RedisServer::start() {
  const fs::path exe = executable();
  if (exe.empty()) throw std::runtime_error("no redis-server");
  const std::string port = std::to_string(port_), dir = dir_.string();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::setpgid(0, 0);
    std::vector<const char*> argv = {exe.c_str(),   "--port",     port.c_str(),   "--bind",    "127.0.0.1",
                                     "--save",      "",           "--appendonly", "no",        "--dir",
                                     dir.c_str(),   "--loglevel", "warning",      "--logfile", "",
                                     "--daemonize", "no"};
    for (const auto& o : options_) argv.push_back(o.c_str());
    argv.push_back(nullptr);
    // Its log goes nowhere visible: the test reports what matters.
    if (!freopen("/dev/null", "w", stdout)) ::_exit(126);
    ::execv(exe.c_str(), const_cast<char* const*>(argv.data()));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      cache::RedisConnection c(endpoint(), 1.0);
      if (c.command({"PING"}).type == cache::RedisReply::Type::Status) return;
    } catch (const cache::RemoteError&) {
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("redis-server exited at start on port " + port);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop();
  throw std::runtime_error("redis-server did not answer within 10 s on port " + port);
}

void RedisServer::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGTERM);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
}

void RedisServer::freeze() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void RedisServer::thaw() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

}  // namespace kjit::testing
