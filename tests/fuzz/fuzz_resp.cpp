// libFuzzer target: RespScanner (resp_limits.hpp), which reads the bytes a Redis server sends before
// hiredis's reader buffers them, and refuses a reply that announces more than kjit accepts. The server is
// not trusted (anyone at its address), so the input is any byte string. The first byte picks how the rest
// is cut into pieces (a read() returns any amount); the rest is the stream.
//
// Findings: a crash or sanitizer report, and any of these broken promises:
//  - the outcome (accepted or the refusal's text, replies counted, whether it ends inside a reply)
//    depends on how the bytes were cut;
//  - bytes the scanner accepts are framed otherwise by hiredis's reader: another number of complete
//    replies without a protocol error from hiredis (hiredis refusing what the scanner accepts is fine:
//    kjit drops the connection either way; the point is that the scanner never lets through a header
//    hiredis reads as something else);
//  - a reply hiredis builds from accepted bytes holds a string or array over the limits.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kjit/cache/resp_limits.hpp"

namespace {

using kjit::cache::RespLimits;
using kjit::cache::RespScanner;

constexpr std::uint64_t kMaxBulk = 4096;
constexpr std::uint64_t kMaxElements = 64;
constexpr std::size_t kMaxLine = 256;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_resp: %s\n", what.c_str());
  std::abort();
}

// Elements of every array in `r`, added to *elements; checks the bulk strings' lengths.
void check_reply(const redisReply* r, std::uint64_t* elements) {
  if (r->type == REDIS_REPLY_STRING && r->len > kMaxBulk)
    finding("hiredis built a string of " + std::to_string(r->len) + " bytes from accepted bytes");
  if (r->type == REDIS_REPLY_ARRAY) {
    *elements += r->elements;
    for (std::size_t i = 0; i < r->elements; ++i) check_reply(r->element[i], elements);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = data[0] % 17 + 1;  // 1 (every byte) to 17
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  const std::size_t n = size - 1;

  RespLimits limits;
  limits.max_bulk_bytes = kMaxBulk;
  limits.max_elements = kMaxElements;
  limits.max_line_bytes = kMaxLine;
  RespScanner whole(limits), cut(limits);
  const bool ok = whole.feed(bytes, n);
  bool cut_ok = true;
  for (std::size_t at = 0; at < n; at += piece) cut_ok = cut.feed(bytes + at, std::min(piece, n - at)) && cut_ok;
  if (ok != cut_ok || whole.error() != cut.error() || whole.replies() != cut.replies() ||
      whole.between_replies() != cut.between_replies())
    finding("fed whole: " + std::string(ok ? "accepted" : whole.error()) + ", " + std::to_string(whole.replies()) +
            " replies; in pieces of " + std::to_string(piece) + ": " + (cut_ok ? "accepted" : cut.error()) + ", " +
            std::to_string(cut.replies()) + " replies");
  if (!ok) return 0;  // refused: hiredis never sees these bytes

  redisReader* reader = redisReaderCreate();
  if (!reader) return 0;
  redisReaderFeed(reader, bytes, n);
  std::size_t replies = 0;
  std::uint64_t elements = 0;
  bool hiredis_error = false;
  for (;;) {
    void* reply = nullptr;
    if (redisReaderGetReply(reader, &reply) != REDIS_OK) {
      hiredis_error = true;
      break;
    }
    if (!reply) break;
    ++replies;
    check_reply(static_cast<const redisReply*>(reply), &elements);
    freeReplyObject(reply);
  }
  redisReaderFree(reader);
  if (!hiredis_error && replies != whole.replies())
    finding("the scanner counted " + std::to_string(whole.replies()) + " replies, hiredis read " +
            std::to_string(replies));
  if (elements > kMaxElements) finding("hiredis built arrays of " + std::to_string(elements) + " elements in all");
  return 0;
}
