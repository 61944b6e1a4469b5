// Waiting for an agent's answer without parking a thread, for every API of the gateway (OpenAI,
// A2A): a call is sent (AgentRef::reply / reply_stream return at once), and what it reports
// through Placeholder::on_ready / on_chunk (on the client library's loop thread) is only posted
// to a strand (the connection's), where the API's continuation runs.
//
// A callback never holds the placeholder after it has run (it moves its work, placeholder
// included, into the post), so the placeholder is dropped on the strand, never on the client's
// loop thread.
#pragma once

#include "upstream.h"

#include <agentd/client.h>

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <variant>

namespace gateway {

// An agent's answer: its reply, or the typed error of the call (a std::variant: std::get_if works
// on it), with what the agent's models used during the call (Placeholder::usage(); zeros after
// the reply timeout).
struct Outcome : std::variant<agentd::Msg, agentd::Error> {
  using std::variant<agentd::Msg, agentd::Error>::variant;
  agentd::CallUsage usage{};
};

// The error an answer later than --reply-timeout gets (agentd's timeout, retryable).
agentd::Error reply_timeout_error(const std::string& agent_id, std::chrono::seconds timeout);

// Runs done(outcome) once on strand: the reply, the call's error, or reply_timeout_error once
// timeout has passed (a reply coming later is dropped). A call that fails with unknown_agent
// makes upstream look the agent up again next time.
void await_reply(Upstream& upstream, boost::asio::any_io_executor strand, const std::string& agent_id,
                 const agentd::Placeholder& p, std::chrono::seconds timeout,
                 std::function<void(Outcome)> done);

// For a placeholder of reply_stream: runs on_chunk(text) on strand for each chunk the agent
// streams, in order, then done(outcome) once, after the last chunk (or at the timeout, after
// which nothing more is delivered). Whatever the caller queued on the strand before calling
// this comes before the first chunk.
void await_stream(Upstream& upstream, boost::asio::any_io_executor strand, const std::string& agent_id,
                  const agentd::Placeholder& p, std::chrono::seconds timeout,
                  std::function<void(std::string)> on_chunk, std::function<void(Outcome)> done);

}  // namespace gateway
