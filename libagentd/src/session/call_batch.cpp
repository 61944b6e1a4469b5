#include "call_batch.h"

#include "call_done.h"
#include "kj_errors.h"
#include "loop_state.h"
#include "value_codec.h"
#include "wire_limits.h"

#include <agentd/value_limits.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

namespace agentd::detail {

namespace {

void write_input_ref(const InputRef& in, wire::Input::Builder out) {
  auto ref = out.initPlaceholder();
  ref.setOrigin(to_kj(in.origin));
  ref.setServerId(to_kj(in.server_id));
  ref.setCallId(to_kj(in.call_id));
}

// Puts spec (ticket set) in the batch, sending the batch first if spec would take it past the
// batch limit, and after it when full.
void add_to_batch(LoopState& loop, OutSpec spec, std::size_t size) {
  if (!loop.batch.empty() && loop.batch_bytes + size > loop.limits.batch_limit()) flush(loop);
  loop.batch_bytes += size;
  loop.batch.push_back(std::move(spec));
  if (loop.batch.size() >= 4096 || loop.batch_bytes >= loop.limits.batch_limit()) flush(loop);
}

// Fails the call of ticket with e (it will not be sent again) and tells the server to forget it.
void give_up(LoopState& loop, std::uint64_t ticket, const Error& e) {
  auto it = loop.tickets.find(ticket);
  if (it == loop.tickets.end()) return;
  Ticket t = std::move(it->second);
  loop.tickets.erase(it);
  loop.dropped.push_back(ticket);
  t.fail(e);
}

void schedule_retry(LoopState& loop);
void submit(LoopState& loop, std::vector<OutSpec> batch, std::size_t batch_bytes);

// A submit was answered (or failed): send what was held, in order, while there is room, and run
// the requests that waited for it.
void submit_answered(LoopState& loop) {
  --loop.submits_in_flight;
  send_held(loop);
}

// Sends the refused calls again, in ticket order, after whatever was gathered before.
void resend(LoopState& loop) {
  flush(loop);
  auto retries = std::move(loop.retries);
  loop.retries.clear();
  for (auto& [ticket, spec] : retries) {
    if (!loop.tickets.count(ticket)) {  // failed meanwhile (the connection went)
      loop.dropped.push_back(ticket);
      continue;
    }
    const std::size_t size = spec_size(spec);
    add_to_batch(loop, std::move(spec), size);
  }
  flush(loop);
}

void schedule_retry(LoopState& loop) {
  if (loop.retry_scheduled) return;
  loop.retry_scheduled = true;
  auto delay = loop.backoff.count() > 0 ? loop.backoff : loop.limits.retry_initial;
  loop.backoff = std::min(loop.limits.retry_max, delay * 2);
  // Jitter: somewhere in [delay / 2, delay], so clients refused together come back apart.
  thread_local std::minstd_rand rng{std::random_device{}()};
  const auto ms = delay.count() / 2 + static_cast<std::int64_t>(rng() % (delay.count() / 2 + 1));
  auto* loop_ptr = &loop;
  loop.tasks.add(loop.io.provider->getTimer().afterDelay(ms * kj::MILLISECONDS).then([loop_ptr]() {
    loop_ptr->retry_scheduled = false;
    resend(*loop_ptr);
  }));
}

// The server refused spec as overloaded (e): send it again later, or give up at its deadline.
void refused(LoopState& loop, OutSpec spec, Error e) {
  if (!loop.tickets.count(spec.ticket)) {  // failed already: the server may forget it
    loop.dropped.push_back(spec.ticket);
    return;
  }
  const auto next = loop.backoff.count() > 0 ? loop.backoff : loop.limits.retry_initial;
  // A refused creation means the server is full (--max-agents): that does not pass by itself,
  // so it is retried only briefly (create_retry, when shorter than the caller's timeout).
  const bool creation = spec.kind == wire::CallKind::CREATE && loop.limits.create_retry < loop.limits.timeout;
  auto deadline = spec.deadline;
  if (creation) deadline = spec.deadline - loop.limits.timeout + loop.limits.create_retry;
  // The last try must be answered before the caller's own wait (the same timeout) runs out, so
  // the caller sees the server's error rather than a timeout.
  if (loop.limits.retry_initial.count() <= 0 || std::chrono::steady_clock::now() + 2 * next >= deadline) {
    std::string why = e.message();
    if (loop.limits.retry_initial.count() > 0 && (!creation || loop.limits.create_retry.count() > 0))
      why = fmt::format("{} (still refused after retrying for {} ms, {})", e.message(),
                        creation ? loop.limits.create_retry.count() : loop.limits.timeout.count(),
                        creation ? "ClientOptions::agent_limit_retry" : "the client's timeout");
    give_up(loop, spec.ticket, Error(e.code(), std::move(why), e.agent_id(), e.agent_class(), e.retryable()));
    return;
  }
  if (!loop.retry_warned) {
    // Once per series (until the server takes calls again): retries are otherwise silent.
    loop.retry_warned = true;
    spdlog::warn(
        "as_server at {} refused {} as overloaded: {}; retrying with backoff for up to "
        "{} ms",
        loop.where, spec.kind == wire::CallKind::CREATE ? "an agent creation" : "a call", e.message(),
        creation ? loop.limits.create_retry.count() : loop.limits.timeout.count());
  }
  const std::uint64_t ticket = spec.ticket;
  loop.retries.emplace(ticket, std::move(spec));
  schedule_retry(loop);
}

}  // namespace

std::size_t spec_size(const OutSpec& s) {
  return 128 + s.agent_id.size() + s.call_id.size() + s.method.size() + s.class_name.size() + s.name.size() +
         s.trace_id.size() + (s.args ? approx_wire_size(*s.args) : 0) +
         (s.msg ? approx_wire_size(*s.msg) : 0) +
         (s.ref ? s.ref->call_id.size() + s.ref->origin.size() + s.ref->server_id.size() : 0);
}

namespace {

// What keeps spec from being sent (as_server would refuse it), or empty.
std::string spec_problem(const OutSpec& spec) {
  auto text = [](std::string_view field, const std::string& s) -> std::string {
    auto why = utf8_problem(s);
    return why.empty() ? why : fmt::format("{} is not UTF-8: {}", field, why);
  };
  auto value = [](std::string_view what, const Value& v) -> std::string {
    auto why = value_problem(v);
    return why.empty() ? why : fmt::format("{}: {}", what, why);
  };
  for (auto why : {text("the agent id", spec.agent_id), text("the call id", spec.call_id),
                   text("the method name", spec.method), text("the class name", spec.class_name),
                   text("the agent's name", spec.name)})
    if (!why.empty()) return why;
  if (spec.args)
    if (auto why =
            value(spec.kind == wire::CallKind::CREATE ? "the agent's args" : "the method's args", *spec.args);
        !why.empty())
      return why;
  return spec.msg ? msg_problem(*spec.msg) : std::string();
}

}  // namespace

void send_spec(LoopState& loop, OutSpec spec, Ticket ticket) {
  spec.ticket = ++loop.next_ticket;
  if (auto why = spec_problem(spec); !why.empty()) {
    ticket.fail(Error(ErrorCode::bad_request, why + "; it was not sent", spec.agent_id));
    return;
  }
  const std::size_t size = spec_size(spec);
  if (size > loop.limits.max_message_bytes) {
    ticket.fail(Error(ErrorCode::too_large,
                      fmt::format("the call is about {} bytes, more than one message may carry "
                                  "({} bytes, ClientOptions::max_message_bytes); it was not sent; "
                                  "send less per call (e.g. split the content over several calls)",
                                  size, loop.limits.max_message_bytes),
                      spec.agent_id));
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  spec.deadline = now + loop.limits.timeout;
  ticket.sent = now;
  ticket.server_epoch = loop.server_epoch;
  loop.tickets.emplace(spec.ticket, std::move(ticket));
  // Bounded batches: a call that would take the batch past the batch limit starts the next one,
  // so a big call travels alone and one message never nears the message limit.
  add_to_batch(loop, std::move(spec), size);
  if (loop.batch.empty()) return;  // sent already
  if (loop.flush_scheduled) return;
  loop.flush_scheduled = true;
  loop.tasks.add(kj::evalLater([&loop]() {
    loop.flush_scheduled = false;
    flush(loop);
  }));
}

void flush(LoopState& loop) {
  if (loop.batch.empty()) return;
  std::vector<OutSpec> batch = std::move(loop.batch);
  const std::size_t bytes = loop.batch_bytes;
  loop.batch.clear();
  loop.batch_bytes = 0;
  // Without a connection (reconnecting) everything waits in held, in order.
  if (!loop.connected || loop.submits_in_flight >= kMaxSubmitsInFlight || !loop.held.empty()) {
    loop.held.emplace_back(std::move(batch), bytes);
    ++loop.held_added;
    return;
  }
  submit(loop, std::move(batch), bytes);
}

void after_calls_sent(LoopState& loop, kj::Function<void()> fn) {
  flush(loop);
  if (loop.held.empty() && loop.connected) {
    fn();
    return;
  }
  // While reconnecting, requests wait too (send_held runs them once connected).
  loop.after_sent.emplace_back(loop.held_added, kj::mv(fn));
}

void send_held(LoopState& loop) {
  auto run_ready = [&loop]() {
    while (loop.connected && !loop.after_sent.empty() && loop.after_sent.front().first <= loop.held_sent) {
      auto fn = kj::mv(loop.after_sent.front().second);
      loop.after_sent.pop_front();
      fn();
    }
  };
  while (loop.connected && loop.submits_in_flight < kMaxSubmitsInFlight && !loop.held.empty()) {
    auto [batch, bytes] = std::move(loop.held.front());
    loop.held.pop_front();
    ++loop.held_sent;
    submit(loop, std::move(batch), bytes);
    run_ready();
  }
  run_ready();
}

namespace {

void submit(LoopState& loop, std::vector<OutSpec> batch, std::size_t batch_bytes) {
  auto req = loop.session.submitRequest(
      message_size_for(std::min(batch_bytes, loop.limits.message_limit()) + 64 * batch.size()));
  if (!loop.dropped.empty()) {
    auto dropped = req.initDropped(static_cast<unsigned>(loop.dropped.size()));
    for (unsigned i = 0; i < loop.dropped.size(); ++i) dropped.set(i, loop.dropped[i]);
    loop.dropped.clear();
  }
  // A lone small call is answered in its submit's answer (answerLone): one RPC per call. Such a
  // submit stays unanswered while its call runs, so it does not count against
  // kMaxSubmitsInFlight (a long call must not hold back the calls issued after it); the server
  // holds it open within its flow limit, which small calls stay far from.
  const bool lone_call = batch.size() == 1 && !batch[0].stream && batch_bytes <= kLoneCallBytes;
  auto list = req.initCalls(static_cast<unsigned>(batch.size()));
  std::vector<std::uint64_t> sent;
  sent.reserve(batch.size());
  // The calls the server may refuse as overloaded, kept until its answer to send them again.
  const bool may_retry = loop.limits.retry_initial.count() > 0;
  auto kept = std::make_shared<std::vector<OutSpec>>();
  if (may_retry) kept->reserve(batch.size());
  for (unsigned i = 0; i < batch.size(); ++i) {
    OutSpec& spec = batch[i];
    auto out = list[i];
    out.setTicket(spec.ticket);
    out.setKind(spec.kind);
    out.setAgentId(to_kj(spec.agent_id));
    if (!spec.call_id.empty()) out.setCallId(to_kj(spec.call_id));
    if (!spec.method.empty()) out.setMethod(to_kj(spec.method));
    if (!spec.class_name.empty()) out.setClassName(to_kj(spec.class_name));
    if (!spec.name.empty()) out.setName(to_kj(spec.name));
    if (spec.args) write_value(*spec.args, out.initArgs());
    if (spec.ref)
      write_input_ref(*spec.ref, out.initInput());
    else if (spec.msg)
      write_msg(*spec.msg, out.initInput().initMsg());
    out.setInlineLimit(spec.inline_limit);
    if (spec.stream) out.setStream(true);
    if (spec.timeout_ms != 0) out.setTimeoutMs(spec.timeout_ms);
    if (!spec.trace_id.empty()) out.setTraceId(to_kj(spec.trace_id));
    // A placeholder dropped before its call left (passed on in a chain, never read here): the
    // ticket's slot is its only holder, and nobody can take another reference to it. Its result
    // need not come back.
    if (auto it = loop.tickets.find(spec.ticket);
        it != loop.tickets.end() && it->second.slot && it->second.slot.use_count() == 1) {
      out.setReport(false);
      loop.tickets.erase(it);
      continue;
    }
    sent.push_back(spec.ticket);
    if (may_retry) kept->push_back(std::move(spec));
  }
  const std::size_t limit = loop.limits.message_limit();
  const bool may_be_over = batch_bytes > limit / 4;  // only a lone big call
  if (may_be_over) {
    const std::size_t exact = req.totalSize().wordCount * sizeof(capnp::word);
    if (exact + 4096 > limit) {
      // Cap'n Proto (or our limit) would refuse to send it: fail the call here, saying why.
      fail_tickets(
          loop, sent,
          Error(ErrorCode::too_large, fmt::format("the call is {} bytes, more than one message may carry ({} "
                                                  "bytes, ClientOptions::max_message_bytes); send less per "
                                                  "call (e.g. split the content over several calls)",
                                                  exact, limit)));
      return;
    }
  }
  const bool lone = lone_call && sent.size() == 1;  // and reported
  if (lone) req.setAnswerLone(true);
  auto* loop_ptr = &loop;
  if (!lone) ++loop.submits_in_flight;
  const std::uint64_t generation = loop.generation;
  loop.tasks.add(req.send().then(
      [loop_ptr, kept, generation, lone](capnp::Response<wire::Session::SubmitResults> r) {
        auto answered = kj::defer([loop_ptr, generation, lone]() {
          if (!lone && generation == loop_ptr->generation) submit_answered(*loop_ptr);
        });
        for (auto d : r.getDone()) dispatch_done(*loop_ptr, d);
        auto refusals = r.getRefused();
        if (refusals.size() == 0) {
          loop_ptr->backoff = std::chrono::milliseconds(0);  // the server takes calls again
          loop_ptr->retry_warned = false;
          return;
        }
        std::unordered_map<std::uint64_t, std::size_t> at;
        for (std::size_t i = 0; i < kept->size(); ++i) at.emplace((*kept)[i].ticket, i);
        for (auto d : refusals) {
          Error e = d.isError() ? read_error(d.getError())
                                : Error(ErrorCode::overloaded, "the server refused the call");
          auto i = at.find(d.getTicket());
          if (i == at.end()) {  // not kept (no retries): fails as it is
            give_up(*loop_ptr, d.getTicket(), e);
            continue;
          }
          refused(*loop_ptr, std::move((*kept)[i->second]), std::move(e));
        }
      },
      [loop_ptr, sent = std::move(sent), generation, lone](kj::Exception&& e) {
        // A connection lost since: connection_lost() has dealt with these calls.
        if (generation != loop_ptr->generation) return;
        if (e.getType() == kj::Exception::Type::DISCONNECTED && loop_ptr->on_lost && !loop_ptr->down) {
          // May come before the connection's onDisconnect: the loss is handled here as there.
          connection_lost(*loop_ptr);
          return;
        }
        fail_tickets(*loop_ptr, sent, error_from_kj(e, "sending calls to " + loop_ptr->where));
        if (!lone) submit_answered(*loop_ptr);
      }));
}

}  // namespace

}  // namespace agentd::detail
