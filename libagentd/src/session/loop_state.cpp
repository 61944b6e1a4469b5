#include "loop_state.h"

#include "call_done.h"

#include <fmt/format.h>

#include <unordered_set>

namespace agentd::detail {

void open_session(LoopState& loop) {
  {
    auto req = loop.server.sessionRequest();
    req.setSink(new_call_sink(loop));
    loop.session = req.send().getSession();  // pipelined: usable at once
  }
  if (loop.rpc) {
    const std::uint64_t generation = loop.generation;
    loop.tasks.add(loop.rpc->onDisconnect().then([&loop, generation]() {
      if (generation != loop.generation) return;  // handled already (a call saw it first)
      if (loop.on_lost && !loop.down) {
        connection_lost(loop);
        return;
      }
      fail_all_tickets(loop, Error(ErrorCode::disconnected, "lost the connection to as_server at " +
                                                                loop.where + " before the call finished"));
    }));
  }
}

void fail_all_tickets(LoopState& loop, const Error& e) {
  auto tickets = std::move(loop.tickets);
  loop.tickets.clear();
  for (auto& [_, t] : tickets) t.fail(e);
  auto lost = std::move(loop.lost_calls);
  loop.lost_calls.clear();
  for (auto& t : lost) t.fail(e);
  auto reads = std::move(loop.pending_reads);
  loop.pending_reads.clear();
  for (auto& [_, slot] : reads) slot->fail(e);
}

void fail_tickets(LoopState& loop, const std::vector<std::uint64_t>& tickets, const Error& e) {
  for (auto t : tickets) {
    auto it = loop.tickets.find(t);
    if (it == loop.tickets.end()) continue;
    Ticket ticket = std::move(it->second);
    loop.tickets.erase(it);
    ticket.fail(e);
  }
}

void connection_lost(LoopState& loop) {
  if (!loop.connected || loop.down) return;
  loop.connected = false;
  ++loop.generation;  // late answers of the old connection's submits are ignored from now
  loop.submits_in_flight = 0;
  loop.dropped.clear();  // ticket numbers the old session knew; the next one never heard of them
  if (loop.look_up_lost_calls) {
    // The calls not sent yet stay where they are and go after the reconnect.
    std::unordered_set<std::uint64_t> unsent;
    for (const auto& spec : loop.batch) unsent.insert(spec.ticket);
    for (const auto& [batch, _] : loop.held)
      for (const auto& spec : batch) unsent.insert(spec.ticket);
    for (const auto& [ticket, _] : loop.retries) unsent.insert(ticket);
    // The rest were sent and not answered. A reply / call_async has a call id the server can be
    // asked about; the others (observe, method, memory, create) cannot be looked up.
    std::vector<Ticket> unknowable;
    for (auto it = loop.tickets.begin(); it != loop.tickets.end();) {
      if (unsent.count(it->first)) {
        ++it;
        continue;
      }
      if (it->second.slot && !it->second.call_id.empty())
        loop.lost_calls.push_back(std::move(it->second));
      else
        unknowable.push_back(std::move(it->second));
      it = loop.tickets.erase(it);
    }
    const Error e = Error::retryable(
        ErrorCode::disconnected,
        fmt::format("lost the connection to as_server at {} after sending the call and before "
                    "its answer: it may or may not have been applied",
                    loop.where));
    for (auto& t : unknowable) t.fail(e);
  }
  if (loop.on_lost) loop.on_lost();
}

void set_server(LoopState& loop, const std::string& server_id) {
  if (server_id == loop.server_id) return;
  if (!loop.server_id.empty()) ++loop.server_epoch;
  loop.server_id = server_id;
}

void connection_restored(LoopState& loop) {
  loop.connected = true;
  auto lost = std::move(loop.lost_calls);
  loop.lost_calls.clear();
  for (auto& t : lost) look_up_lost(loop, std::move(t));
  auto reads = std::move(loop.pending_reads);
  loop.pending_reads.clear();
  for (auto& [id, slot] : reads) request_result(loop, id, slot);
  // What was gathered or held while disconnected goes now, in the order it was made.
  flush(loop);
  send_held(loop);
}

void connection_down(LoopState& loop, const Error& e) {
  loop.down = e;
  loop.connected = true;  // nothing waits any longer: later calls fail at once on the broken caps
  ++loop.generation;
  loop.submits_in_flight = 0;
  kj::Exception broken(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__, kj::str(e.message().c_str()));
  loop.session = wire::Session::Client(kj::cp(broken));
  loop.server = wire::AgentServer::Client(kj::mv(broken));
  loop.batch.clear();
  loop.batch_bytes = 0;
  loop.held.clear();
  loop.held_sent = loop.held_added;
  loop.retries.clear();
  fail_all_tickets(loop, e);
  // Requests that waited for the reconnect run now and fail on the broken capabilities.
  send_held(loop);
}

}  // namespace agentd::detail
