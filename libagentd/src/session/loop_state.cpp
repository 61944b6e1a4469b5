#include "loop_state.h"

#include "call_done.h"

namespace agentd::detail {

void open_session(LoopState& loop) {
  {
    auto req = loop.server.sessionRequest();
    req.setSink(new_call_sink(loop));
    loop.session = req.send().getSession();  // pipelined: usable at once
  }
  if (loop.rpc) {
    loop.tasks.add(loop.rpc->onDisconnect().then([&loop]() {
      fail_all_tickets(loop, Error(ErrorCode::disconnected,
                                   "lost the connection to as_server at " + loop.where +
                                       " before the call finished"));
    }));
  }
}

void fail_all_tickets(LoopState& loop, const Error& e) {
  auto tickets = std::move(loop.tickets);
  loop.tickets.clear();
  for (auto& [_, t] : tickets) t.fail(e);
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

}  // namespace agentd::detail
