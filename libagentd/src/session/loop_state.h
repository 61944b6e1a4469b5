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

#include "rpc_connection.h"

#include <kj/async-io.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
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
  // A creation refused as overloaded (--max-agents) is retried only this long after it was
  // first sent (never past timeout); 0: it fails at once.
  std::chrono::milliseconds create_retry = std::chrono::seconds(2);

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
  kj::Own<RpcConnection> rpc;
  wire::AgentServer::Client server = nullptr;
  wire::Session::Client session = nullptr;
  std::string where;  // the server, for error messages
  // The id of the server the connection reached, and a count bumped whenever a (re)connection
  // reaches a different one (one that restarted without its state): see set_server().
  std::string server_id;
  std::uint64_t server_epoch = 0;
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
  bool retry_warned = false;             // this series of refusals was logged (reset with backoff)
  std::vector<std::uint64_t> dropped;    // refused calls given up on, for the next submit
  // Submits sent and not yet answered; past kMaxSubmitsInFlight, gathered batches wait in held
  // (in order) until an answer comes, so a burst of calls never floods the connection.
  unsigned submits_in_flight = 0;
  std::deque<std::pair<std::vector<OutSpec>, std::size_t>> held;  // calls, their bytes
  std::uint64_t held_added = 0;                                   // batches ever put in held
  std::uint64_t held_sent = 0;                                    // batches ever sent from held
  // Requests waiting until the held batch numbered first has been sent (after_calls_sent).
  std::deque<std::pair<std::uint64_t, kj::Function<void()>>> after_sent;
  ByteCount bytes;  // counted by the CountingStream around the connection

  // ---- Losing the connection (see connection_lost) ----
  // Set by the owner when a lost connection is not the end (independent mode reconnects, child
  // mode finds out why the child died): connection_lost() runs instead of failing every call,
  // then calls it. The owner later calls connection_restored() or connection_down().
  std::function<void()> on_lost;
  // Whether calls sent before the loss are looked up by call id after reconnecting (independent
  // mode). False (child mode): they wait for connection_down() with everything else.
  bool look_up_lost_calls = false;
  // False between a loss and connection_restored(): gathered calls wait in held, requests in
  // after_sent, get()s of large results in pending_reads.
  bool connected = true;
  // Set by connection_down(): the connection is gone for good (server and session are broken
  // capabilities carrying this error, so later calls fail at once with it).
  std::optional<Error> down;
  // Bumped on every loss: answers from an earlier connection's submits are ignored (the loss
  // has dealt with their calls).
  std::uint64_t generation = 0;
  // Replies and call_asyncs that were sent when the connection went: after reconnecting, each
  // is asked for by call id (Session.read).
  std::vector<Ticket> lost_calls;
  // get()s of too-large results (request_result) waiting for the reconnect.
  std::vector<std::pair<std::string, std::shared_ptr<ResultSlot>>> pending_reads;

  explicit LoopState(kj::AsyncIoContext& io_in) : io(io_in), bridge(io_in.unixEventPort) {}
};

// Loop thread: opens the session on loop.server (pipelined: usable at once), with a CallSink
// that redeems loop.tickets. Over a network connection (loop.rpc set), losing it fails every
// ticket still waiting.
void open_session(LoopState& loop);

// Loop thread: fails every call still waiting for its CallDone (the connection is gone), the
// lost calls not yet looked up and the reads waiting for a reconnect.
void fail_all_tickets(LoopState& loop, const Error& e);

// Loop thread, with loop.on_lost set: the connection went (its onDisconnect, or a call on it
// failed as disconnected). Idempotent until connection_restored(). Calls not yet sent (gathered,
// held, waiting to be retried) stay queued; with look_up_lost_calls, of the calls sent and not
// answered, replies and call_asyncs move to lost_calls and the others fail with disconnected
// (they may or may not have been applied). Then runs loop.on_lost.
void connection_lost(LoopState& loop);

// Loop thread: the (re)connection reached the server with this id.
void set_server(LoopState& loop, const std::string& server_id);

// Loop thread: the owner has put a new connection in loop (stream, rpc, server) and called
// open_session(): looks up the lost calls, then sends what waited, in order.
void connection_restored(LoopState& loop);

// Loop thread: no connection will come back. Fails everything waiting with e and makes server
// and session broken capabilities that fail later calls with e's message.
void connection_down(LoopState& loop, const Error& e);

// Loop thread: fails those of the calls listed that still wait for their CallDone.
void fail_tickets(LoopState& loop, const std::vector<std::uint64_t>& tickets, const Error& e);

}  // namespace agentd::detail
