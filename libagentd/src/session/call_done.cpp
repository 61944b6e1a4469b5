#include "call_done.h"

#include "call_batch.h"
#include "kj_errors.h"
#include "loop_state.h"
#include "outcome_codec.h"
#include "value_codec.h"
#include "wire_limits.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <exception>

namespace agentd::detail {

namespace {

// The client end of the session: the server reports finished calls here.
class SinkImpl final : public wire::CallSink::Server {
 public:
  explicit SinkImpl(LoopState& loop) : loop_(loop) {}
  kj::Promise<void> done(DoneContext context) override {
    for (auto d : context.getParams().getCalls()) dispatch_done(loop_, d);
    return kj::READY_NOW;
  }
  kj::Promise<void> chunks(ChunksContext context) override {
    for (auto c : context.getParams().getChunks()) {
      auto it = loop_.tickets.find(c.getTicket());
      if (it == loop_.tickets.end() || !it->second.slot) continue;  // failed already
      it->second.slot->push_chunk(to_std(c.getText()));
    }
    return kj::READY_NOW;
  }

 private:
  LoopState& loop_;  // outlives the RPC system that calls this
};

// Loop thread: the outcome of call id arrived. A "too large" answer is followed up with a read
// of the whole message once get() wants it.
void deliver(LoopState& loop, wire::Outcome::Reader o, const std::string& id,
             const std::shared_ptr<ResultSlot>& slot) {
  if (o.hasUsage()) {
    // Before the slot settles (its lock publishes it); a settled slot is not changed.
    std::lock_guard lock(slot->mu);
    if (!slot->value && !slot->error) slot->usage = read_usage(o);
  }
  if (!o.isTooLarge()) {
    auto outcome = read_outcome(o);
    if (Msg* m = std::get_if<Msg>(&outcome))
      slot->set(std::move(*m));
    else
      slot->fail(std::get<Error>(outcome));
    return;
  }
  slot->too_large = true;
  if (slot->wanted && !slot->full_requested) {
    slot->full_requested = true;
    request_result(loop, id, slot);
  }
}

}  // namespace

wire::CallSink::Client new_call_sink(LoopState& loop) { return kj::heap<SinkImpl>(loop); }

namespace {

void call_reader(const std::function<void(std::string_view)>& fn, std::string_view text) {
  try {
    fn(text);
  } catch (const std::exception& e) {
    spdlog::warn("a Placeholder::on_chunk callback threw (ignored): {}", e.what());
  } catch (...) {
    spdlog::warn("a Placeholder::on_chunk callback threw a non-standard exception (ignored)");
  }
}

}  // namespace

void ResultSlot::push_chunk(std::string text) {
  if (on_chunk) {
    call_reader(on_chunk, text);
    return;
  }
  WaitList::Wake wake;
  {
    std::lock_guard lock(mu);
    chunks.push_back(std::move(text));
    wake = waiters.take_locked();
  }
  wake.run();
}

void ResultSlot::set_on_chunk(std::function<void(std::string_view)> fn) {
  std::list<std::string> queued;
  bool ended = false;
  {
    std::lock_guard lock(mu);
    queued.swap(chunks);
    ended = stream_ended;
  }
  on_chunk = std::move(fn);
  if (!on_chunk) return;
  for (const auto& c : queued) call_reader(on_chunk, c);
  if (ended) on_chunk = nullptr;
}

void request_result(LoopState& loop, const std::string& id, const std::shared_ptr<ResultSlot>& slot) {
  if (!loop.connected) {  // reconnecting: asked once connected (connection_restored)
    loop.pending_reads.emplace_back(id, slot);
    return;
  }
  flush(loop);
  auto req = loop.session.readRequest();
  req.setCallId(to_kj(id));
  auto* loop_ptr = &loop;
  const std::uint64_t generation = loop.generation;
  loop.tasks.add(req.send().then(
      [slot, loop_ptr, id](capnp::Response<wire::Session::ReadResults> r) {
        auto o = r.getOutcome();
        // This session was told the call finished (tooLarge), so a server that no longer knows
        // the id evicted it longer ago than it remembers evictions.
        if (o.isError() && o.getError().getCode() == wire::ErrorCode::UNKNOWN_CALL) {
          slot->fail(Error(ErrorCode::expired,
                           fmt::format("result of call {} expired: it was evicted from the "
                                       "server's result pool before get() read it; read large "
                                       "results sooner or raise --max-pool-size / --max-expire-time",
                                       id)));
          return;
        }
        deliver(*loop_ptr, o, id, slot);
      },
      [slot, loop_ptr, id, generation](kj::Exception&& e) {
        if (e.getType() == kj::Exception::Type::DISCONNECTED && loop_ptr->on_lost && !loop_ptr->down) {
          // Lost the connection while reading: read again once reconnected (or now, when this
          // is the late failure of a connection already replaced).
          if (generation == loop_ptr->generation) connection_lost(*loop_ptr);
          request_result(*loop_ptr, id, slot);
          return;
        }
        slot->fail(error_from_kj(e, fmt::format("waiting for the result of call {}", id)));
      }));
}

Error unknown_lost_call(const LoopState& loop, const Ticket& t, std::int64_t forgotten_age_ms) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  if (t.server_epoch != loop.server_epoch)
    // Another server now (one that restarted without its state dir): it knows nothing of the
    // old one's calls, which may have been running when it stopped.
    return Error(ErrorCode::interrupted,
                 fmt::format("call {}: as_server at {} came back as another server (id {}) that "
                             "never heard of it: the server it was sent to stopped without its "
                             "state, and the call may have been running then; its outcome is "
                             "unknown, so it is not safe to retry blindly (its agent is gone too)",
                             t.call_id, loop.where, loop.server_id));
  const auto sent_ago = duration_cast<milliseconds>(std::chrono::steady_clock::now() - t.sent);
  // A margin for the time the call took to reach the server after it was handed over.
  if (forgotten_age_ms >= 0 && sent_ago.count() + 1000 >= forgotten_age_ms)
    return Error(ErrorCode::expired,
                 fmt::format("call {}: as_server at {} no longer knows it: it was sent {:.1f} s "
                             "ago, and the server has forgotten calls that finished up to {:.1f} s "
                             "ago (its result pool keeps --max-pool-size results for at most "
                             "--max-expire-time), so it may have been applied; it is not safe to "
                             "retry blindly",
                             t.call_id, loop.where, sent_ago.count() / 1000.0, forgotten_age_ms / 1000.0));
  // Unknown, and sent after anything the server forgot: it never started there (every call
  // that starts is recorded, as running or finished).
  return Error::retryable(
      ErrorCode::not_applied,
      fmt::format("call {} was not applied on as_server at {}: the server has no record of it (it "
                  "restarted before the call started, or the call never reached it); it is safe "
                  "to retry",
                  t.call_id, loop.where));
}

void look_up_lost(LoopState& loop, Ticket ticket) {
  if (!loop.connected) {
    loop.lost_calls.push_back(std::move(ticket));
    return;
  }
  auto req = loop.session.readRequest();
  req.setCallId(to_kj(ticket.call_id));
  auto* loop_ptr = &loop;
  // Dropped unanswered (the client closed with the question in flight, its loop's tasks
  // dropped): fails as closed, rather than leave its get() to wait out the client's timeout.
  auto t = std::shared_ptr<Ticket>(new Ticket(std::move(ticket)), [where = loop.where](Ticket* p) {
    if (p->slot)
      p->slot->fail(
          Error(ErrorCode::disconnected,
                fmt::format("call {} to as_server at {}: the client is closed", p->call_id, where)));
    delete p;
  });
  const std::uint64_t generation = loop.generation;
  loop.tasks.add(req.send().then(
      [loop_ptr, t](capnp::Response<wire::Session::ReadResults> r) {
        auto o = r.getOutcome();
        if (o.isError() && o.getError().getCode() == wire::ErrorCode::UNKNOWN_CALL) {
          t->fail(unknown_lost_call(*loop_ptr, *t, r.getForgottenAgeMs()));
          return;
        }
        deliver(*loop_ptr, o, t->call_id, t->slot);
        t->slot->end_stream();
      },
      [loop_ptr, t, generation](kj::Exception&& e) {
        if (e.getType() == kj::Exception::Type::DISCONNECTED && loop_ptr->on_lost && !loop_ptr->down) {
          // Lost again: ask again after the next reconnect.
          if (generation == loop_ptr->generation) connection_lost(*loop_ptr);
          look_up_lost(*loop_ptr, std::move(*t));
          return;
        }
        t->fail(error_from_kj(e, fmt::format("asking as_server at {} about call {} after reconnecting",
                                             loop_ptr->where, t->call_id)));
      }));
}

void dispatch_done(LoopState& loop, wire::CallDone::Reader done) {
  auto it = loop.tickets.find(done.getTicket());
  if (it == loop.tickets.end()) return;  // failed already (e.g. its submit was refused)
  Ticket t = std::move(it->second);
  loop.tickets.erase(it);
  // What cannot be read of this one answer (a value nested too deep, text that is not UTF-8)
  // fails this call alone; the others in the same message are delivered.
  try {
    if (t.slot) {
      if (done.isOutcome())
        deliver(loop, done.getOutcome(), t.call_id, t.slot);
      else if (done.isError())
        t.slot->fail(read_error(done.getError()));
      else
        t.slot->fail(Error(ErrorCode::internal, "the server answered a call with something odd"));
      t.slot->end_stream();  // after the outcome: a reader that sees the end finds it there
      return;
    }
    if (t.on_done) t.on_done(done);
  } catch (const Error& e) {
    t.fail(
        Error(e.code(), "the answer from as_server at " + loop.where + " could not be read: " + e.message()));
  } catch (const kj::Exception& e) {
    t.fail(unreadable(e, "the answer from as_server at " + loop.where));
  }
}

void throw_if_error(wire::CallDone::Reader d) {
  if (d.isError()) throw read_error(d.getError());
}

}  // namespace agentd::detail
