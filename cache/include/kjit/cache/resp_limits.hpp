// RespScanner: bounds what a Redis reply may make kjit hold, checked on the raw bytes as they arrive,
// before they are parsed. hiredis's reader assembles the replies from the same bytes but bounds nothing
// (0.14 neither a bulk string's length nor an array's count), so a server that announces a value of
// 8 GiB would be read until memory runs out. The scanner reads only the protocol's frame (RESP2, what
// Redis speaks to a client that did not ask for RESP3): each reply's type byte, its header line (the
// length of a bulk string, the count of an array), bulk bodies skipped without being kept, the nesting of
// arrays. A header over a limit is refused as soon as its line is complete: nothing of its body has been
// read, so the caller drops the connection instead.
//
// Bytes may be fed split anywhere (one byte at a time included) with the same outcome. Its memory is
// fixed: a few counters and a stack of kMaxRespDepth counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kjit::cache {

// Arrays nested deeper than this are refused (hiredis refuses them too; kjit's replies nest 1 deep).
inline constexpr int kMaxRespDepth = 7;
// A header line ($<length>, *<count>) longer than this is malformed: 20 digits and a sign fit.
inline constexpr std::size_t kMaxRespHeaderLine = 24;

struct RespLimits {
  std::uint64_t max_bulk_bytes = 0;  // the longest bulk string ($<length>) accepted
  std::uint64_t max_elements = 0;    // array elements announced in all, over every reply scanned
  std::size_t max_line_bytes = 0;    // the longest status (+), error (-) or integer (:) line
};

class RespScanner {
 public:
  explicit RespScanner(RespLimits limits) : limits_(limits) {}

  // Scans the next `size` bytes of the stream. false once something was refused (a limit, or bytes that
  // are not RESP2): error() says what, and every later call is false too.
  bool feed(const char* data, std::size_t size);

  const std::string& error() const noexcept { return error_; }
  // Top-level replies completed so far.
  std::size_t replies() const noexcept { return replies_; }
  // Whether the bytes so far end exactly after a complete reply (or are none): not inside one.
  bool between_replies() const noexcept { return state_ == State::Type && depth_ == 0; }
  // Bytes scanned so far (for messages).
  std::uint64_t scanned() const noexcept { return scanned_; }

 private:
  enum class State { Type, Line, Body, BodyEnd };
  enum class LineKind { Simple, Bulk, Array };

  bool refuse(std::string why);
  bool end_of_line();
  bool header_value(long long* value);
  std::string header_name() const;
  void item_done();

  RespLimits limits_;
  State state_ = State::Type;
  LineKind kind_ = LineKind::Simple;
  char type_ = 0;
  bool cr_ = false;                           // the last byte of the line so far was '\r'
  std::size_t line_bytes_ = 0;                // bytes of the current line so far (a trailing '\r' included)
  char header_[kMaxRespHeaderLine + 2] = {};  // the line, and a '\r' that may end it
  std::uint64_t body_left_ = 0;               // bulk bytes still to skip
  int body_end_ = 0;                          // bytes of the "\r\n" after a bulk body seen
  long long open_[kMaxRespDepth] = {};        // elements still to come, per open array
  int depth_ = 0;
  std::uint64_t elements_ = 0;
  std::size_t replies_ = 0;
  std::uint64_t scanned_ = 0;
  std::string error_;
};

}  // namespace kjit::cache
