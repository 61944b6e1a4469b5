// What agentd refuses to read from the wire, and the reader options that let it read the rest.
// Private to libagentd.
#pragma once

#include <agentd/error.h>
#include <agentd/value_limits.h>

#include "agentd.capnp.h"

#include <capnp/message.h>
#include <kj/exception.h>

#include <string>
#include <string_view>

namespace agentd::detail {

// read_value (value_codec.h) naming what is read ("the method's args") in its error: throws
// Error(bad_request) naming what and where inside it, when in is nested deeper than
// kMaxValueDepth or holds a string or key that is not UTF-8, so what the other end sent fails
// alone and nothing agentd could not give back is ever read. Recurses at most kMaxValueDepth + 1
// levels. read_value(in) and read_msg (each field named) check the same.
Value read_value(wire::Value::Reader in, std::string_view what);

// The size hint for a message (a request, or a call's results) carrying about bytes of content.
// Without one, Cap'n Proto's RPC allocates and zeroes an 8 KiB first segment for every message,
// which was a tenth of the server's instructions per small call; a hint too small only adds a
// segment.
inline capnp::MessageSize message_size_for(std::size_t bytes) {
  return capnp::MessageSize{bytes / sizeof(capnp::word) + 16, 0};
}

// Text from the other end, refused (Error bad_request naming field and the byte) unless UTF-8.
std::string read_text(capnp::Text::Reader t, std::string_view field);

// A call's trace id (CallSpec.traceId, AgentRef::with_trace_id): at most kMaxTraceIdBytes of
// printable ASCII. What is wrong with id, in words ("" when nothing).
constexpr std::size_t kMaxTraceIdBytes = 128;
std::string trace_id_problem(std::string_view id);

// What every Cap'n Proto message carrying values is read with (client, server, peers, state
// store): Cap'n Proto's 64 MiB traversal limit, and nesting deep enough that any value within
// kMaxValueDepth decodes wherever it travels: an object level costs three Cap'n Proto levels
// (the list of fields, a field, its value), a list level two (the list, an element), and the
// message around the value (RPC call, payload, CallDone, outcome, Msg) about ten, at most
// kEnvelopeNesting.
constexpr int kEnvelopeNesting = 32;
constexpr int kWireNestingLimit = 3 * kMaxValueDepth + kEnvelopeNesting;
capnp::ReaderOptions wire_reader_options();

// The error for a call whose part could not be read (Cap'n Proto refused it: nested past
// kWireNestingLimit, a broken pointer): bad_request, saying so in words.
Error unreadable(const kj::Exception& e, std::string_view what);

}  // namespace agentd::detail
