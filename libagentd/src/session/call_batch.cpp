#include "call_batch.h"

#include "loop_state.h"
#include "value_codec.h"

#include <fmt/format.h>

#include <vector>

namespace agentd::detail {

namespace {

void write_input_ref(const InputRef& in, wire::Input::Builder out) {
  auto ref = out.initPlaceholder();
  ref.setOrigin(to_kj(in.origin));
  ref.setServerId(to_kj(in.server_id));
  ref.setCallId(to_kj(in.call_id));
}

}  // namespace

std::size_t spec_size(const OutSpec& s) {
  return 128 + s.agent_id.size() + s.call_id.size() + s.method.size() + s.class_name.size() +
         s.name.size() + (s.args ? approx_wire_size(*s.args) : 0) +
         (s.msg ? approx_wire_size(*s.msg) : 0) +
         (s.ref ? s.ref->call_id.size() + s.ref->origin.size() + s.ref->server_id.size() : 0);
}

void send_spec(LoopState& loop, OutSpec spec, Ticket ticket) {
  spec.ticket = ++loop.next_ticket;
  const std::size_t size = spec_size(spec);
  // Bounded batches: a call that would take the batch past kBatchBytes starts the next one, so
  // a big call travels alone and one message never nears Cap'n Proto's limit.
  if (!loop.batch.empty() && loop.batch_bytes + size > kBatchBytes) flush(loop);
  loop.tickets.emplace(spec.ticket, std::move(ticket));
  loop.batch_bytes += size;
  loop.batch.push_back(std::move(spec));
  if (loop.batch.size() >= 4096 || loop.batch_bytes >= kBatchBytes) {
    flush(loop);
    return;
  }
  if (loop.flush_scheduled) return;
  loop.flush_scheduled = true;
  loop.tasks.add(kj::evalLater([&loop]() {
    loop.flush_scheduled = false;
    flush(loop);
  }));
}

void flush(LoopState& loop) {
  if (loop.batch.empty()) return;
  auto req = loop.session.submitRequest();
  auto list = req.initCalls(static_cast<unsigned>(loop.batch.size()));
  std::vector<std::uint64_t> sent;
  sent.reserve(loop.batch.size());
  for (unsigned i = 0; i < loop.batch.size(); ++i) {
    OutSpec& spec = loop.batch[i];
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
  }
  const bool may_be_over = loop.batch_bytes > kMaxMessageBytes / 4;  // only a lone big call
  loop.batch.clear();
  loop.batch_bytes = 0;
  if (may_be_over) {
    const std::size_t exact = req.totalSize().wordCount * sizeof(capnp::word);
    if (exact + 4096 > kMaxMessageBytes) {
      // Cap'n Proto would refuse to send it: fail the call here, saying why.
      fail_tickets(loop, sent,
                   Error(ErrorCode::too_large,
                         fmt::format("the call is {} bytes, more than one message can carry ({} "
                                     "bytes); send less per call (e.g. split the content over "
                                     "several calls)",
                                     exact, kMaxMessageBytes)));
      return;
    }
  }
  auto* loop_ptr = &loop;
  loop.tasks.add(req.send().then(
      [](capnp::Response<wire::Session::SubmitResults>) {},
      [loop_ptr, sent = std::move(sent)](kj::Exception&& e) {
        fail_tickets(*loop_ptr, sent,
                     error_from_exception(e, "sending calls to " + loop_ptr->where));
      }));
}

}  // namespace agentd::detail
