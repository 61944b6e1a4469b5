// LoopState: what a client's KJ loop thread owns for one connection to an agent server and the
// session on it: the capabilities, the batch of calls not yet submitted (call_batch.h) and the
// tickets of calls whose CallDone has not arrived (call_done.h).
#pragma once

#include <agentd/error.h>

#include "agentd.capnp.h"
#include "bridge.h"
#include "call_batch.h"
#include "counting_stream.h"
#include "result_slot.h"
#include "task_errors.h"
#include "value_codec.h"

#include <capnp/rpc-twoparty.h>

#include <kj/async-io.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace agentd::detail {

// What the client sends and how it retries (from ClientOptions).
struct SendLimits {
  // A call bigger than this fails at once, unsent (too_large). At most kMaxMessageBytes.
  std::size_t max_message_bytes = kMaxMessageBytes;
  // A call refused as overloaded is sent again after a backoff growing from retry_initial to
  // retry_max (with jitter), until timeout after it was first sent; retry_initial 0: never.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  std::chrono::milliseconds retry_initial = std::chrono::milliseconds(20);
  std::chrono::milliseconds retry_max = std::chrono::seconds(2);

  std::size_t message_limit() const { return std::min(max_message_bytes, kMaxMessageBytes); }
  // A Session.submit is cut at about this size.
  std::size_t batch_limit() const { return std::min(kBatchBytes, message_limit() / 8); }
};

// Created, used and destroyed on the loop thread; other threads reach it only through
// bridge.post(). io is borrowed and outlives it. The owner connects (stream, rpc) or serves in
// process, sets server and where, then calls open_session().
struct LoopState {
  kj::AsyncIoContext& io;
  Bridge bridge;
  // Loop tasks whose failure matters report it through their call's own state (a Sync, a
  // ResultSlot, a Ticket); what reaches the task set is unexpected, and logged.
  TaskErrors task_errors{"client connection task"};
  kj::TaskSet tasks{task_errors};
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyClient> rpc;
  wire::AgentServer::Client server = nullptr;
  wire::Session::Client session = nullptr;
  std::string where;  // the server, for error messages
  // Calls are gathered here and sent together once per loop turn (or when the batch is big).
  std::vector<OutSpec> batch;
  std::size_t batch_bytes = 0;
  bool flush_scheduled = false;
  std::uint64_t next_ticket = 0;
  std::unordered_map<std::uint64_t, Ticket> tickets;
  SendLimits limits;
  // Calls refused as overloaded, by ticket, waiting to be sent again (call_batch.h).
  std::map<std::uint64_t, OutSpec> retries;
  bool retry_scheduled = false;
  std::chrono::milliseconds backoff{0};  // the next retry's delay; 0: retry_initial
  std::vector<std::uint64_t> dropped;    // refused calls given up on, for the next submit
  // Submits sent and not yet answered; past kMaxSubmitsInFlight, gathered batches wait in held
  // (in order) until an answer comes, so a burst of calls never floods the connection.
  unsigned submits_in_flight = 0;
  std::deque<std::pair<std::vector<OutSpec>, std::size_t>> held;  // calls, their bytes
  std::uint64_t held_added = 0;  // batches ever put in held
  std::uint64_t held_sent = 0;   // batches ever sent from held
  // Requests waiting until the held batch numbered first has been sent (after_calls_sent).
  std::deque<std::pair<std::uint64_t, kj::Function<void()>>> after_sent;
  ByteCount bytes;  // counted by the CountingStream around the connection

  explicit LoopState(kj::AsyncIoContext& io_in) : io(io_in), bridge(io_in.unixEventPort) {}
};

// Loop thread: opens the session on loop.server (pipelined: usable at once), with a CallSink
// that redeems loop.tickets. Over a network connection (loop.rpc set), losing it fails every
// ticket still waiting.
void open_session(LoopState& loop);

// Loop thread: fails every call still waiting for its CallDone (the connection is gone).
void fail_all_tickets(LoopState& loop, const Error& e);

// Loop thread: fails those of the calls listed that still wait for their CallDone.
void fail_tickets(LoopState& loop, const std::vector<std::uint64_t>& tickets, const Error& e);

}  // namespace agentd::detail
