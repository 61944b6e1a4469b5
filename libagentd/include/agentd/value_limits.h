// Limits on what an agentd::Value may be, and the checks and parsing that enforce them where
// values enter agentd from outside.
#pragma once

#include <agentd/msg.h>
#include <agentd/value.h>

#include <string>
#include <string_view>

namespace agentd {

// How deep a value may nest: lists and objects inside each other, the outermost counting 1
// (`[[1]]` is 2 deep, a string 0). Values deeper than this are refused wherever they enter
// agentd (calls from clients, agents' answers, JSON from model endpoints and command lines,
// Python objects), with an error naming the limit, so every value agentd holds can be sent,
// stored and read back.
inline constexpr int kMaxValueDepth = 64;

// JSON text from outside (a network answer, a file, a command line) as a Value, or why not.
struct ParsedValue {
  Value value;        // discarded when error is set
  std::string error;  // empty when parsed: "JSON nested deeper than 64 levels ... (byte 70)", or the parser's
  bool too_deep = false;  // error is the nesting limit (the text may be valid JSON)
  explicit operator bool() const { return error.empty(); }
};

// Parses text, refusing (before building anything) JSON nested deeper than max_depth levels of
// `[`/`{`; the error names the limit and the byte where it was passed. Never recurses: safe on
// any input.
ParsedValue parse_value(std::string_view text, int max_depth = kMaxValueDepth);

// What keeps v from travelling, or empty: a part nested deeper than max_depth, or a string or
// object key that is not UTF-8 (text must be UTF-8; bytes go as Value::binary). Names where:
// "nested deeper than 64 levels (at /a/0/b/...)", "not UTF-8 at /name: byte 3 is 0xff".
// Recurses at most max_depth + 1 levels.
std::string value_problem(const Value& v, int max_depth = kMaxValueDepth);

// value_problem for a whole message: its text fields (id, name, role, url, timestamp) and its
// content and metadata, naming the field ("the message's content: nested deeper than ...").
std::string msg_problem(const Msg& m, int max_depth = kMaxValueDepth);

// Where s stops being UTF-8 ("byte 3 is 0xff, which starts no UTF-8 character"), or empty when
// it is all UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
std::string utf8_problem(std::string_view s);

// The length of the longest prefix of s that is whole UTF-8 characters by the rules above (s.size()
// when all of s is UTF-8): where a parser reporting line and column finds the first bad byte.
std::size_t utf8_prefix_length(std::string_view s);

// s with every byte that is not part of a UTF-8 character replaced by U+FFFD (for text meant
// for people, such as error messages; never for data).
std::string utf8_replaced(std::string_view s);

}  // namespace agentd
