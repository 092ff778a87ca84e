// RespScanner (cache/src/resp_limits.cpp): the bound on what a Redis reply may announce, checked on the
// raw bytes before hiredis's reader sees them. Every stream is fed whole, one byte at a time and split
// in two at every byte, with the same outcome; a refusal comes at the last byte of the header that
// announces too much, never later.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kjit/cache/resp_limits.hpp"

namespace {

using kjit::cache::kMaxRespDepth;
using kjit::cache::kMaxRespHeaderLine;
using kjit::cache::RespLimits;
using kjit::cache::RespScanner;

RespLimits limits(std::uint64_t bulk = 1024, std::uint64_t elements = 100, std::size_t line = 64) {
  RespLimits l;
  l.max_bulk_bytes = bulk;
  l.max_elements = elements;
  l.max_line_bytes = line;
  return l;
}

struct Outcome {
  bool ok = true;
  std::size_t replies = 0;
  bool between = true;
  std::string error;
  std::size_t refused_at = 0;  // bytes fed when it first said no (one byte at a time only)
  bool operator==(const Outcome& o) const {
    return ok == o.ok && replies == o.replies && between == o.between && error == o.error;
  }
};

Outcome scan(const std::string& bytes, const RespLimits& l, const std::vector<std::size_t>& cuts) {
  RespScanner s(l);
  Outcome o;
  std::size_t at = 0;
  std::vector<std::size_t> ends = cuts;
  ends.push_back(bytes.size());
  for (std::size_t end : ends) {
    if (!s.feed(bytes.data() + at, end - at)) {
      if (o.ok) o.refused_at = end;
      o.ok = false;
    }
    at = end;
  }
  o.replies = s.replies();
  o.between = s.between_replies();
  o.error = s.error();
  return o;
}

// The outcome of `bytes`, after checking that every way of splitting them gives the same one.
Outcome scan_every_way(const std::string& bytes, const RespLimits& l = limits()) {
  const Outcome whole = scan(bytes, l, {});
  std::vector<std::size_t> every;
  for (std::size_t i = 1; i < bytes.size(); ++i) every.push_back(i);
  const Outcome bytewise = scan(bytes, l, every);
  EXPECT_EQ(whole, bytewise) << "one byte at a time: " << bytewise.error;
  for (std::size_t i = 0; i <= bytes.size(); ++i) {
    const Outcome two = scan(bytes, l, {i});
    EXPECT_EQ(whole, two) << "split at " << i << ": " << two.error;
  }
  Outcome out = whole;
  out.refused_at = bytewise.refused_at;
  return out;
}

TEST(RespScanner, CountsEveryKindOfReplyHoweverTheBytesAreSplit) {
  const std::vector<std::pair<std::string, std::size_t>> streams = {
      {"+OK\r\n", 1},
      {"-ERR wrong\r\n", 1},
      {":-42\r\n", 1},
      {"$5\r\nhello\r\n", 1},
      {"$0\r\n\r\n", 1},
      {"$-1\r\n", 1},
      {"*-1\r\n", 1},
      {"*0\r\n", 1},
      {"$4\r\n\r\n\r\n\r\n", 1},  // a body made of CR LF
      {"+a\rb\r\n", 1},           // a lone CR is part of a status line, as hiredis reads it
      {"+OK\r\n$3\r\nabc\r\n:1\r\n", 3},
      {"*3\r\n$1\r\na\r\n$-1\r\n*2\r\n:1\r\n+x\r\n", 1},
      {"*2\r\n*0\r\n*-1\r\n-E\r\n", 2},
  };
  for (const auto& [bytes, replies] : streams) {
    const Outcome o = scan_every_way(bytes);
    EXPECT_TRUE(o.ok) << bytes << ": " << o.error;
    EXPECT_EQ(o.replies, replies) << bytes;
    EXPECT_TRUE(o.between) << bytes;
  }
}

TEST(RespScanner, SaysWhenTheBytesEndInsideAReply) {
  for (const std::string partial : {"+OK\r", "$5\r\nhel", "$5\r\nhello\r", "*2\r\n:1\r\n", "*1\r\n*1\r\n", "$"}) {
    const Outcome o = scan_every_way(partial);
    EXPECT_TRUE(o.ok) << partial << ": " << o.error;
    EXPECT_EQ(o.replies, 0u) << partial;
    EXPECT_FALSE(o.between) << partial;
  }
}

TEST(RespScanner, AValueLongerThanTheLimitIsRefusedAtTheEndOfItsHeader) {
  EXPECT_TRUE(scan_every_way("$1024\r\n" + std::string(1024, 'x') + "\r\n").ok) << "exactly the limit";
  const std::string header = "$1025\r\n";
  const Outcome o = scan_every_way(header + std::string(4096, 'x'));
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.refused_at, header.size()) << "refused before any byte of the body";
  EXPECT_EQ(o.error, "a value of 1025 bytes announced, over the 1024 bytes allowed");
  const Outcome huge = scan_every_way("$8589934592\r\n");
  EXPECT_EQ(huge.error, "a value of 8589934592 bytes announced, over the 1024 bytes allowed");
  EXPECT_FALSE(scan_every_way("$99999999999999999999999\r\n").ok) << "more digits than 64 bits hold";
}

TEST(RespScanner, ArrayElementsAreCountedAcrossNestingAndReplies) {
  auto nils = [](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += "$-1\r\n";
    return s;
  };
  EXPECT_TRUE(scan_every_way("*100\r\n" + nils(100)).ok) << "exactly the limit";
  const Outcome one = scan_every_way("*101\r\n$-1\r\n");
  EXPECT_FALSE(one.ok);
  EXPECT_EQ(one.refused_at, 6u);
  EXPECT_EQ(one.error, "an array of 101 elements announced, over the 100 elements allowed");
  // 60 + 41: each array is under the limit, not the two together (one request's replies).
  const Outcome two = scan_every_way("*60\r\n" + nils(60) + "*41\r\n");
  EXPECT_FALSE(two.ok);
  EXPECT_EQ(two.replies, 1u);
  EXPECT_EQ(two.error, "an array of 41 elements announced after 60 others, over the 100 elements allowed");
  const Outcome nested = scan_every_way("*2\r\n*50\r\n");
  EXPECT_TRUE(nested.ok) << nested.error;
  EXPECT_FALSE(scan_every_way("*2\r\n*50\r\n*49\r\n").ok) << "2 + 50 + 49";
}

TEST(RespScanner, ArraysNestedDeeperThanTheLimitAreRefused) {
  std::string deep;
  for (int i = 0; i < kMaxRespDepth; ++i) deep += "*1\r\n";
  const Outcome ok = scan_every_way(deep + ":1\r\n");
  EXPECT_TRUE(ok.ok) << ok.error;
  EXPECT_EQ(ok.replies, 1u);
  const Outcome o = scan_every_way(deep + "*1\r\n:1\r\n");
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.error, "arrays nested more than 7 deep");
}

TEST(RespScanner, WhatIsNotRespIsRefusedWithWhatCame) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"HTTP/1.1 400\r\n", "a reply that starts with 'H', which is no RESP2 reply type (+ - : $ *)"},
      {"%1\r\n", "a reply that starts with '%', which is no RESP2 reply type (+ - : $ *)"},  // RESP3: not asked for
      {"$abc\r\n", "a malformed bulk string length line '$abc' (allowed: -1 or decimal digits)"},
      {"$-2\r\n", "a malformed bulk string length line '$-2' (allowed: -1 or decimal digits)"},
      {"$\r\n", "a malformed bulk string length line '$' (allowed: -1 or decimal digits)"},
      {"*1\x01\r\n", "a malformed array count line '*1\\x01' (allowed: -1 or decimal digits)"},
      {"$3\r\nabcd\r\n", "a value not followed by \\r\\n where its announced length ends"},
  };
  for (const auto& [bytes, error] : bad) {
    const Outcome o = scan_every_way(bytes);
    EXPECT_FALSE(o.ok) << bytes;
    EXPECT_EQ(o.error, error);
  }
}

TEST(RespScanner, LinesAreBoundedEvenWithoutTheirEnd) {
  // A header that never ends: refused once it is longer than any number.
  const std::string endless_header = "$" + std::string(100, '1');
  const Outcome h = scan_every_way(endless_header);
  EXPECT_FALSE(h.ok);
  EXPECT_EQ(h.refused_at, 1 + kMaxRespHeaderLine + 1);
  // A status line: up to the limit (64 here), with its CR LF split anywhere.
  EXPECT_TRUE(scan_every_way("+" + std::string(64, 's') + "\r\n").ok);
  EXPECT_TRUE(scan_every_way("+" + std::string(63, 's') + "\r\r\n").ok) << "a CR in the line counts as a byte of it";
  const Outcome s = scan_every_way("+" + std::string(65, 's'));
  EXPECT_FALSE(s.ok);
  EXPECT_EQ(s.refused_at, 66u);
  EXPECT_EQ(s.error, "a '+' line longer than 64 bytes");
  EXPECT_FALSE(scan_every_way("-" + std::string(64, 's') + "\rx\r\n").ok);
}

TEST(RespScanner, NothingIsAcceptedAfterARefusal) {
  RespScanner s(limits());
  EXPECT_FALSE(s.feed("?", 1));
  EXPECT_FALSE(s.feed("+OK\r\n", 5));
  EXPECT_EQ(s.replies(), 0u);
}

}  // namespace
