// Conversions between agentd's C++ types and their Cap'n Proto wire form. Private to libagentd.
#pragma once

#include <agentd/error.h>
#include <agentd/msg.h>
#include <agentd/value.h>

#include "agentd.capnp.h"

#include <string>
#include <vector>

namespace agentd::detail {

void write_value(const Value& v, wire::Value::Builder out);
Value read_value(wire::Value::Reader in);

// Roughly how many bytes m (or v) takes on the wire: strings and binary dominate; the structure
// around them is undercounted, by up to about half for values made of many small parts.
std::size_t approx_wire_size(const Msg& m);
std::size_t approx_wire_size(const Value& v);

// Cap'n Proto refuses to send, and to read, a message over its traversal limit (8 Mi words):
// the RPC system throws on send. Everything that gathers many items into one message cuts it
// at kBatchBytes (by approx_wire_size), far inside that limit, and checks the exact size of a
// message that may come near it.
constexpr std::size_t kMaxMessageBytes = std::size_t{8} << 23;  // 64 MiB
constexpr std::size_t kBatchBytes = std::size_t{8} << 20;       // 8 MiB

void write_msg(const Msg& m, wire::Msg::Builder out);
Msg read_msg(wire::Msg::Reader in);

void write_error(const Error& e, wire::Error::Builder out);
Error read_error(wire::Error::Reader in);

wire::ErrorCode to_wire(ErrorCode code);
ErrorCode from_wire(wire::ErrorCode code);

inline kj::StringPtr to_kj(const std::string& s) { return kj::StringPtr(s.c_str(), s.size()); }
inline std::string to_std(capnp::Text::Reader t) { return std::string(t.cStr(), t.size()); }
// A list of texts, as is: written into a list initialised with texts.size() elements, read back
// without checks (read_text is the checked reading of text from a peer).
inline void write_texts(const std::vector<std::string>& texts, capnp::List<capnp::Text>::Builder out) {
  for (unsigned i = 0; i < texts.size(); ++i) out.set(i, to_kj(texts[i]));
}
inline std::vector<std::string> read_texts(capnp::List<capnp::Text>::Reader in) {
  std::vector<std::string> out;
  out.reserve(in.size());
  for (auto t : in) out.push_back(to_std(t));
  return out;
}

}  // namespace agentd::detail
