#include "kjit/cache/remote_config.hpp"

#include <charconv>

#include "kjit/error.hpp"

namespace kjit::cache {

const char* to_string(RemoteMode mode) noexcept { return mode == RemoteMode::Read ? "read" : "readwrite"; }

std::string RedisEndpoint::display() const {
  std::string out = "redis://";
  if (!user.empty() || !password.empty()) out += user + (password.empty() ? "" : ":***") + "@";
  return out + host + ":" + std::to_string(port) + "/" + std::to_string(db);
}

std::string display_url(const std::string& url) {
  const auto scheme = url.find("://");
  const std::size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  const auto at = url.rfind('@');
  if (at == std::string::npos || at < start) return url;
  const std::string auth = url.substr(start, at - start);
  const auto colon = auth.find(':');
  // user:password@ keeps the user; a bare password@ (Redis < 6 style) is hidden whole.
  const std::string shown = colon == std::string::npos ? "***" : auth.substr(0, colon) + ":***";
  return url.substr(0, start) + shown + url.substr(at);
}

namespace {

// The URL without its credentials: error messages end up in logs.
std::string without_credentials(const std::string& url) {
  const auto scheme = url.find("://");
  const std::size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  const auto at = url.rfind('@');
  if (at == std::string::npos || at < start) return url;
  return url.substr(0, start) + "***@" + url.substr(at + 1);
}

[[noreturn]] void bad_url(const std::string& url, const std::string& why) {
  throw ValueError("'" + without_credentials(url) + "' is not a Redis URL: " + why +
                   "; allowed redis://[user:password@]host[:port][/db], e.g. redis://10.0.0.5:6379/0");
}

int parse_number(const std::string& url, const std::string& text, int lo, int hi, const char* what) {
  int n = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, n);
  if (text.empty() || ec != std::errc() || p != end || n < lo || n > hi)
    bad_url(url, std::string("the ") + what + " '" + text + "' is not an integer from " + std::to_string(lo) + " to " +
                     std::to_string(hi));
  return n;
}

}  // namespace

RedisEndpoint parse_redis_url(const std::string& url) {
  const std::string scheme = "redis://";
  if (url.compare(0, scheme.size(), scheme) != 0) {
    const auto colon = url.find("://");
    bad_url(url, colon == std::string::npos
                     ? "it has no redis:// scheme"
                     : "the scheme '" + url.substr(0, colon) +
                           "' is not supported (only redis://; "
                           "TLS (rediss://) is not: reach Redis through a private network or a tunnel)");
  }
  std::string rest = url.substr(scheme.size());
  RedisEndpoint e;
  if (const auto at = rest.rfind('@'); at != std::string::npos) {
    const std::string auth = rest.substr(0, at);
    rest = rest.substr(at + 1);
    if (const auto colon = auth.find(':'); colon != std::string::npos) {
      e.user = auth.substr(0, colon);
      e.password = auth.substr(colon + 1);
    } else {
      e.password = auth;  // redis://secret@host: a password without a user
    }
  }
  std::string hostport = rest;
  if (const auto slash = rest.find('/'); slash != std::string::npos) {
    hostport = rest.substr(0, slash);
    const std::string db = rest.substr(slash + 1);
    if (!db.empty()) e.db = parse_number(url, db, 0, 1 << 20, "database number");
  }
  if (!hostport.empty() && hostport.front() == '[') {  // [IPv6]:port
    const auto close = hostport.find(']');
    if (close == std::string::npos) bad_url(url, "the IPv6 address has no closing ']'");
    e.host = hostport.substr(1, close - 1);
    const std::string after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad_url(url, "expected ':port' after the IPv6 address");
      e.port = parse_number(url, after.substr(1), 1, 65535, "port");
    }
  } else if (const auto colon = hostport.rfind(':'); colon != std::string::npos) {
    e.host = hostport.substr(0, colon);
    if (e.host.find(':') != std::string::npos)
      bad_url(url, "an IPv6 address must be in brackets, e.g. redis://[::1]:6379");
    e.port = parse_number(url, hostport.substr(colon + 1), 1, 65535, "port");
  } else {
    e.host = hostport;
  }
  if (e.host.empty()) bad_url(url, "it names no host");
  for (char c : e.host)
    if (c == '/' || c == '?' || c == '#' || c == ' ' || c == '@')
      bad_url(url, std::string("the host contains '") + c + "'");
  return e;
}

}  // namespace kjit::cache
