#include "kjit/cache/resp_limits.hpp"

#include <algorithm>
#include <cstdio>

namespace kjit::cache {
namespace {

// `bytes` as text a message can show: printable ASCII as is, anything else as \xNN.
std::string shown(const char* bytes, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace

bool RespScanner::refuse(std::string why) {
  error_ = std::move(why);
  return false;
}

// A header's number: "-1" (nil), or decimal digits (saturating at 10^18, over any limit).
bool RespScanner::header_value(long long* value) {
  const std::size_t n = line_bytes_;
  if (n == 2 && header_[0] == '-' && header_[1] == '1') {
    *value = -1;
    return true;
  }
  if (n == 0) return false;
  constexpr unsigned long long kSaturated = 1000000000000000000ull;
  unsigned long long v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = header_[i];
    if (c < '0' || c > '9') return false;
    v = std::min(kSaturated, v * 10 + static_cast<unsigned>(c - '0'));
  }
  *value = static_cast<long long>(v);
  return true;
}

std::string RespScanner::header_name() const { return kind_ == LineKind::Bulk ? "bulk string length" : "array count"; }

void RespScanner::item_done() {
  state_ = State::Type;
  while (depth_ > 0) {
    if (--open_[depth_ - 1] > 0) return;
    --depth_;  // that array is complete: one element of the one around it
  }
  ++replies_;
}

bool RespScanner::end_of_line() {
  if (kind_ == LineKind::Simple) {
    item_done();
    return true;
  }
  long long v = 0;
  if (!header_value(&v))
    return refuse("a malformed " + header_name() + " line '" + type_ + shown(header_, line_bytes_) +
                  "' (allowed: -1 or decimal digits)");
  const std::string text = shown(header_, line_bytes_);
  if (kind_ == LineKind::Bulk) {
    if (v == -1) {
      item_done();
      return true;
    }
    if (static_cast<unsigned long long>(v) > limits_.max_bulk_bytes)
      return refuse("a value of " + text + " bytes announced, over the " + std::to_string(limits_.max_bulk_bytes) +
                    " bytes allowed");
    body_left_ = static_cast<std::uint64_t>(v);
    body_end_ = 0;
    state_ = body_left_ ? State::Body : State::BodyEnd;
    return true;
  }
  if (v <= 0) {  // an empty or nil array: complete at once
    item_done();
    return true;
  }
  if (static_cast<unsigned long long>(v) > limits_.max_elements - std::min(elements_, limits_.max_elements))
    return refuse("an array of " + text + " elements announced" +
                  (elements_ ? " after " + std::to_string(elements_) + " others" : std::string()) + ", over the " +
                  std::to_string(limits_.max_elements) + " elements allowed");
  if (depth_ == kMaxRespDepth) return refuse("arrays nested more than " + std::to_string(kMaxRespDepth) + " deep");
  elements_ += static_cast<std::uint64_t>(v);
  open_[depth_++] = v;
  state_ = State::Type;
  return true;
}

bool RespScanner::feed(const char* data, std::size_t size) {
  if (!error_.empty()) return false;
  std::size_t i = 0;
  while (i < size) {
    if (state_ == State::Body) {  // skipped, not looked at
      const std::uint64_t n = std::min<std::uint64_t>(body_left_, size - i);
      body_left_ -= n;
      i += static_cast<std::size_t>(n);
      scanned_ += n;
      if (body_left_ == 0) state_ = State::BodyEnd;
      continue;
    }
    const char c = data[i++];
    ++scanned_;
    switch (state_) {
      case State::BodyEnd:
        if (c != (body_end_ == 0 ? '\r' : '\n'))
          return refuse("a value not followed by \\r\\n where its announced length ends");
        if (++body_end_ == 2) item_done();
        break;
      case State::Type:
        type_ = c;
        if (c == '+' || c == '-' || c == ':') {
          kind_ = LineKind::Simple;
        } else if (c == '$') {
          kind_ = LineKind::Bulk;
        } else if (c == '*') {
          kind_ = LineKind::Array;
        } else {
          return refuse("a reply that starts with '" + shown(&c, 1) + "', which is no RESP2 reply type (+ - : $ *)");
        }
        state_ = State::Line;
        cr_ = false;
        line_bytes_ = 0;
        break;
      case State::Line: {
        if (cr_ && c == '\n') {  // the line ends at the first "\r\n", as hiredis reads it
          --line_bytes_;
          if (!end_of_line()) return false;
          break;
        }
        const std::size_t max = kind_ == LineKind::Simple ? limits_.max_line_bytes : kMaxRespHeaderLine;
        if (kind_ != LineKind::Simple) header_[line_bytes_] = c;  // line_bytes_ <= max + 1 (a '\r') here
        ++line_bytes_;
        cr_ = c == '\r';
        // A '\r' may be the end of the line: it counts only once something follows it.
        if (line_bytes_ - (cr_ ? 1 : 0) > max)
          return refuse(kind_ == LineKind::Simple
                            ? "a '" + shown(&type_, 1) + "' line longer than " + std::to_string(max) + " bytes"
                            : "a malformed " + header_name() + " line '" + type_ +
                                  shown(header_, std::min(line_bytes_, max)) + "...' (longer than " +
                                  std::to_string(max) + " bytes)");
        break;
      }
      case State::Body: break;
    }
  }
  return true;
}

}  // namespace kjit::cache
