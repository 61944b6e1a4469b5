#include "session_impl.h"

#include "call_queue.h"
#include "outcome_codec.h"
#include "task_errors.h"
#include "value_codec.h"
#include "wire_limits.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <string_view>
#include <vector>

namespace agentd::detail {

namespace {

using CallDoneWriter = kj::Function<void(wire::CallDone::Builder)>;

// A lone call's CallDone, written into its submit's answer: about size bytes.
struct LoneAnswer {
  CallDoneWriter write;
  std::size_t size = 0;
};

// The most calls one Session.submit may carry. The C++ client sends at most 4,096; a list of
// empty structs costs a few bytes on the wire per million, so the count is checked, not the size.
constexpr unsigned kMaxCallsPerSubmit = 65536;

// Completions (and chunks of streamed calls) waiting for the next CallSink.done / .chunks.
// Loop thread only; the session holds it, and what arrives after the session is gone
// (weak_ptr expired) is dropped.
// What a client leaves unread is bounded: items queued here plus those sent and not yet
// answered by its CallSink count against ctx.client_backlog_limit; past it, the client is not
// reading (or not keeping up by a wide margin), its connection is closed (ctx.close_connection)
// and what was queued for it is dropped.
class Outbox : public std::enable_shared_from_this<Outbox> {
 public:
  Outbox(wire::CallSink::Client sink, RpcContext& ctx)
      : sink_(kj::mv(sink)),
        ctx_(ctx),
        max_bytes_(std::min(ctx.max_message_bytes, kMaxMessageBytes)),
        batch_bytes_(std::min(kBatchBytes, max_bytes_ / 8)),
        max_chunk_bytes_(batch_bytes_ - 1024) {}

  // One finished call: its ticket, about how many bytes its CallDone takes, and how to write
  // the rest of it. Sent after everything already queued on the loop (a whole bridge batch),
  // or, when the call's submit waits for it (claim()), in that submit's answer.
  void add(std::uint64_t ticket, std::size_t size, CallDoneWriter write) {
    if (overflowed_) return;  // the connection is closing: nobody will read it
    if (!claims_.empty()) {
      auto claim = claims_.find(ticket);
      if (claim != claims_.end()) {
        auto fulfiller = kj::mv(claim->second);
        claims_.erase(claim);
        // Bigger than about a batch: through the sink, which cuts and checks sizes.
        if (size <= batch_bytes_) {
          fulfiller->fulfill(kj::Maybe<LoneAnswer>(LoneAnswer{kj::mv(write), size}));
          return;
        }
        fulfiller->fulfill(nullptr);
      }
    }
    items_.push_back(Item{ticket, size + 16, kj::mv(write), false, 0, {}});
    if (!count(size + 16)) return;
    schedule();
  }
  // The submit of call ticket answers with its CallDone: the promise resolves to its writer
  // when the call finishes, or to nullptr when it goes through the sink after all.
  kj::Promise<kj::Maybe<LoneAnswer>> claim(std::uint64_t ticket) {
    auto paf = kj::newPromiseAndFulfiller<kj::Maybe<LoneAnswer>>();
    claims_[ticket] = kj::mv(paf.fulfiller);
    return kj::mv(paf.promise);
  }
  // The claimed call was refused at once (its submit answers now).
  void unclaim(std::uint64_t ticket) { claims_.erase(ticket); }

  void add_error(std::uint64_t ticket, Error e) {
    std::size_t size = error_size(e);
    add(ticket, size, [e = std::move(e)](wire::CallDone::Builder out) { write_error(e, out.initError()); });
  }
  // A chunk of streamed call ticket, numbered from seq (advanced past it). Goes out in order
  // with everything else added, so before the call's CallDone. Text over kMaxChunkBytes is
  // split (at UTF-8 character boundaries) into several chunks.
  void add_chunk(std::uint64_t ticket, std::uint32_t& seq, std::string text) {
    if (overflowed_) return;
    bool within = true;
    auto push = [&](std::string piece) {
      if (overflowed_) return;
      const std::size_t size = piece.size() + 32;
      items_.push_back(Item{ticket, size, CallDoneWriter(), true, seq++, std::move(piece)});
      if (within) within = count(size);
    };
    if (text.size() <= max_chunk_bytes_) {
      push(std::move(text));
    } else {
      std::string_view rest = text;
      while (!rest.empty()) {
        std::size_t cut = std::min(rest.size(), max_chunk_bytes_);
        // Back up to the start of a UTF-8 character (not UTF-8: cut anywhere).
        while (cut < rest.size() && cut > 0 && (static_cast<unsigned char>(rest[cut]) & 0xC0) == 0x80) --cut;
        if (cut == 0) cut = std::min(rest.size(), max_chunk_bytes_);
        push(std::string(rest.substr(0, cut)));
        rest.remove_prefix(cut);
      }
    }
    if (!within) return;
    schedule();
  }

 private:
  struct Item {
    std::uint64_t ticket = 0;
    std::size_t size = 0;
    CallDoneWriter write;  // a CallDone (chunk == false)
    bool chunk = false;
    std::uint32_t seq = 0;  // chunk
    std::string text;       // chunk
  };

  // Counts bytes newly queued; false (and the connection closing) past the client's limit.
  bool count(std::size_t bytes) {
    queued_bytes_ += bytes;
    if (queued_bytes_ + unanswered_bytes_ <= ctx_.client_backlog_limit) return true;
    overflow();
    return false;
  }

  // The client left more than the limit unread: close its connection and drop what waits.
  void overflow() {
    overflowed_ = true;
    const std::size_t mib = (queued_bytes_ + unanswered_bytes_) >> 20;
    items_.clear();
    queued_bytes_ = 0;
    if (ctx_.close_connection)
      ctx_.close_connection(
          fmt::format("the client left {} MiB of call completions unread (limit {} MiB, "
                      "--max-client-backlog); it is not reading its connection",
                      mib, ctx_.client_backlog_limit >> 20));
  }

  // Counts a sent message as unanswered until its CallSink call returns.
  void track(kj::Promise<void> sent, std::size_t bytes) {
    unanswered_bytes_ += bytes;
    std::weak_ptr<Outbox> weak = shared_from_this();
    tasks_.add(sent.attach(kj::defer([weak, bytes]() {
      if (auto self = weak.lock()) self->unanswered_bytes_ -= bytes;
    })));
  }

  void schedule() {
    if (scheduled_) return;
    scheduled_ = true;
    std::weak_ptr<Outbox> weak = shared_from_this();
    tasks_.add(kj::evalLater([weak]() {
      if (auto self = weak.lock()) self->flush();
    }));
  }

  // Sends the gathered items in order, as CallSink.done / CallSink.chunks messages of at most
  // about kBatchBytes each (one message over Cap'n Proto's limit would be refused whole): a run
  // of completions or of chunks goes as one message until it reaches that size. Calls on one
  // capability are delivered in the order sent, so the client sees them in this order.
  void flush() {
    scheduled_ = false;
    if (overflowed_) return;
    std::size_t begin = 0;
    while (begin < items_.size()) {
      const bool chunks = items_[begin].chunk;
      std::size_t end = begin + 1;
      std::size_t bytes = items_[begin].size;
      while (end < items_.size() && items_[end].chunk == chunks && bytes + items_[end].size <= batch_bytes_)
        bytes += items_[end++].size;
      if (chunks)
        send_chunks(begin, end);
      else
        send(begin, end, bytes);
      begin = end;
    }
    items_.clear();
    queued_bytes_ = 0;
  }

  void send_chunks(std::size_t begin, std::size_t end) {
    std::size_t approx_bytes = 0;
    for (std::size_t i = begin; i < end; ++i) approx_bytes += items_[i].size;
    auto req = sink_.chunksRequest(message_size_for(approx_bytes));
    auto list = req.initChunks(static_cast<unsigned>(end - begin));
    std::size_t bytes = 0;
    for (std::size_t i = begin; i < end; ++i) {
      auto out = list[static_cast<unsigned>(i - begin)];
      out.setTicket(items_[i].ticket);
      out.setSeq(items_[i].seq);
      out.setText(to_kj(items_[i].text));
      bytes += items_[i].size;
    }
    track(req.send().ignoreResult(), bytes);
  }

  // Sends items [begin, end) as one CallSink.done. A batch holds more than kBatchBytes only
  // when it is one big item; if that one is over the message limit, its call gets too_large.
  void send(std::size_t begin, std::size_t end, std::size_t approx_bytes) {
    auto req = sink_.doneRequest(message_size_for(approx_bytes));
    auto list = req.initCalls(static_cast<unsigned>(end - begin));
    for (std::size_t i = begin; i < end; ++i) {
      auto out = list[static_cast<unsigned>(i - begin)];
      out.setTicket(items_[i].ticket);
      items_[i].write(out);
    }
    if (approx_bytes > max_bytes_ / 4) {
      const std::size_t exact = req.totalSize().wordCount * sizeof(capnp::word);
      if (exact + 4096 > max_bytes_) {
        req = sink_.doneRequest();
        auto d = req.initCalls(1)[0];
        d.setTicket(items_[begin].ticket);
        write_error(Error(ErrorCode::too_large,
                          fmt::format("the answer to this call is {} bytes, more than one message "
                                      "may carry ({} bytes, --max-message-bytes); make the agent "
                                      "return less per call",
                                      exact, max_bytes_)),
                    d.initError());
      }
    }
    track(req.send().ignoreResult(), approx_bytes);
  }

  wire::CallSink::Client sink_;
  RpcContext& ctx_;
  const std::size_t max_bytes_;        // the most one message may carry (--max-message-bytes)
  const std::size_t batch_bytes_;      // a CallSink message is cut at about this size
  const std::size_t max_chunk_bytes_;  // a streamed chunk over it is split
  std::vector<Item> items_;
  // Calls whose submit answers with their CallDone (Session.submit's answerLone), by ticket.
  std::unordered_map<std::uint64_t, kj::Own<kj::PromiseFulfiller<kj::Maybe<LoneAnswer>>>> claims_;
  std::size_t queued_bytes_ = 0;      // of items_
  std::size_t unanswered_bytes_ = 0;  // of CallSink messages sent and not answered
  bool overflowed_ = false;
  bool scheduled_ = false;
  // Completions that could not be sent. A client that went away needs no word; anything else
  // means calls the client will never hear of, which must not pass silently.
  TaskErrors send_errors_{"sending call completions to a client", spdlog::level::err};
  kj::TaskSet tasks_{send_errors_};
};

Call::Kind call_kind(wire::CallKind k) {
  switch (k) {
    case wire::CallKind::REPLY:
      return Call::Kind::reply;
    case wire::CallKind::OBSERVE:
      return Call::Kind::observe;
    case wire::CallKind::METHOD:
      return Call::Kind::method;
    case wire::CallKind::METHOD_ASYNC:
      return Call::Kind::method_async;
    case wire::CallKind::MEMORY:
      return Call::Kind::memory;
    case wire::CallKind::CREATE:
      break;
  }
  throw Error(ErrorCode::bad_request, "a call of an unknown kind (a newer client?)");
}

class SessionImpl final : public wire::Session::Server {
 public:
  SessionImpl(RpcContext& ctx, wire::CallSink::Client sink)
      : ctx_(ctx), out_(std::make_shared<Outbox>(kj::mv(sink), ctx)) {}

  kj::Promise<void> submit(SubmitContext context) override {
    auto calls = context.getParams().getCalls();
    if (calls.size() > kMaxCallsPerSubmit) {
      const std::string why = fmt::format(
          "Session.submit carries {} calls, more than the {} one submit may carry; send them in "
          "several",
          calls.size(), kMaxCallsPerSubmit);
      return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                           kj::heapString(why.data(), why.size()));
    }
    for (auto ticket : context.getParams().getDropped()) forget_refused(ticket);
    // A lone call the client wants answered in this submit's answer (see the schema).
    kj::Maybe<kj::Promise<kj::Maybe<LoneAnswer>>> lone;
    std::uint64_t lone_ticket = 0;
    if (context.getParams().getAnswerLone() && calls.size() == 1 && calls[0].getReport() &&
        !calls[0].getStream()) {
      lone_ticket = calls[0].getTicket();
      lone = out_->claim(lone_ticket);
    }
    std::vector<std::pair<std::uint64_t, Error>> overloaded;  // answered in the results
    const std::size_t max_bytes = std::min(ctx_.max_message_bytes, kMaxMessageBytes);
    for (auto spec : calls) {
      try {
        const std::size_t size = spec.totalSize().wordCount * sizeof(capnp::word);
        if (size > max_bytes) {
          refuse(spec, Error(ErrorCode::too_large,
                             fmt::format("the call is {} bytes, more than one message may carry "
                                         "to this server ({} bytes, --max-message-bytes); send "
                                         "less per call",
                                         size, max_bytes),
                             to_std(spec.getAgentId())));
          continue;
        }
        admit_in_order(spec, overloaded);
      } catch (const Error& e) {
        out_->add_error(spec.getTicket(), e);
      } catch (const kj::Exception& e) {
        // A call the message's limits refuse (a value nested too deep, a broken pointer): this
        // call fails alone, the calls around it go on.
        out_->add_error(spec.getTicket(), unreadable(e, "the call"));
      }
    }
    if (!overloaded.empty()) {
      auto list = context.getResults().initRefused(static_cast<unsigned>(overloaded.size()));
      for (unsigned i = 0; i < overloaded.size(); ++i) {
        list[i].setTicket(overloaded[i].first);
        write_error(overloaded[i].second, list[i].initError());
      }
      if (lone != nullptr) out_->unclaim(lone_ticket);  // refused: it was this submit's one call
      return kj::READY_NOW;
    }
    KJ_IF_MAYBE (done, lone) {
      return kj::mv(*done).then([context, lone_ticket](kj::Maybe<LoneAnswer> answer) mutable {
        KJ_IF_MAYBE (a, answer) {
          auto d = context.getResults(message_size_for(a->size + 16)).initDone(1)[0];
          d.setTicket(lone_ticket);
          a->write(d);
        }  // else sent through the sink
      });
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> read(ReadContext context) override {
    // A session reads only results it was told about (tooLarge), so an id the pool no longer
    // has was evicted: answer at once (expired, or unknown_call long after), never wait.
    const std::size_t max_bytes = std::min(ctx_.max_message_bytes, kMaxMessageBytes);
    return answer_when_ready(
        ctx_, to_std(context.getParams().getCallId()), /*wait_for_unknown=*/false,
        [context, max_bytes, host = &ctx_.host](const OutcomePtr& o) mutable {
          const std::size_t size = outcome_size(*o, 0);
          context.getResults(message_size_for(std::min(size, max_bytes)));  // the first call sizes it
          if (const Error* e = std::get_if<Error>(o.get()); e && e->code() == ErrorCode::unknown_call)
            if (auto age = host->forgotten_age()) context.getResults().setForgottenAgeMs(age->count());
          if (size + 4096 > max_bytes) {
            // About the size: the message goes only when clearly under the limit.
            write_error(
                Error(ErrorCode::too_large, fmt::format("the result is about {} bytes, more than one message "
                                                        "may carry ({} bytes, --max-message-bytes); make the "
                                                        "agent return less per call",
                                                        size, max_bytes)),
                context.getResults().initOutcome().initError());
            return;
          }
          write_outcome(*o, context.getResults().initOutcome());
        });
  }

 private:
  // Queues spec. A refusal as overloaded is returned, not reported (nothing was recorded).
  std::optional<Error> queue(wire::CallSpec::Reader spec) {
    const std::uint64_t ticket = spec.getTicket();
    CallRequest req;
    req.kind = call_kind(spec.getKind());
    req.agent_id = read_text(spec.getAgentId(), "the agent id");
    req.call_id = read_text(spec.getCallId(), "the call id");
    req.input = spec.getInput();
    req.method = read_text(spec.getMethod(), "the method name");
    if (spec.hasArgs()) req.args = read_value(spec.getArgs(), "the method's args");
    req.timeout = std::chrono::milliseconds(spec.getTimeoutMs());
    if (spec.hasTraceId()) req.trace_id = to_std(spec.getTraceId());  // checked by queue_call
    std::weak_ptr<Outbox> weak = out_;
    if (spec.getStream() && spec.getReport() &&
        (req.kind == Call::Kind::reply || req.kind == Call::Kind::method_async)) {
      req.on_chunk = [weak, ticket, seq = std::make_shared<std::uint32_t>(0)](std::string&& text) {
        if (auto out = weak.lock()) out->add_chunk(ticket, *seq, std::move(text));
      };
    }
    CallReport report;
    switch (req.kind) {
      case Call::Kind::reply:
      case Call::Kind::method_async:
        // report = false: nobody at the client can read it; the result only goes to the pool.
        if (spec.getReport())
          report.outcome = [weak, ticket, limit = spec.getInlineLimit()](const OutcomePtr& o) {
            if (auto out = weak.lock())
              out->add(ticket, outcome_size(*o, limit),
                       [o, limit](wire::CallDone::Builder d) { write_outcome(*o, d.initOutcome(), limit); });
          };
        break;
      case Call::Kind::method:
        report.finished = [weak, ticket](Call& c) {
          auto out = weak.lock();
          if (!out) return;
          std::size_t size = c.out_error ? error_size(*c.out_error) : approx_wire_size(c.out_value);
          out->add(
              ticket, size,
              [value = std::move(c.out_value), error = std::move(c.out_error)](wire::CallDone::Builder d) {
                auto v = d.initValue();
                if (error)
                  write_error(*error, v.initError());
                else
                  write_value(value, v.initValue());
              });
        };
        break;
      case Call::Kind::memory:
        report.finished = [weak, ticket](Call& c) {
          auto out = weak.lock();
          if (!out) return;
          std::size_t size = c.out_error ? error_size(*c.out_error) : 0;
          for (const auto& m : c.out_memory) size += approx_wire_size(m);
          out->add(
              ticket, size,
              [msgs = std::move(c.out_memory), error = std::move(c.out_error)](wire::CallDone::Builder d) {
                if (error) {
                  write_error(*error, d.initError());
                  return;
                }
                auto list = d.initMemory(static_cast<unsigned>(msgs.size()));
                for (unsigned i = 0; i < msgs.size(); ++i) write_msg(msgs[i], list[i]);
              });
        };
        break;
      case Call::Kind::observe:
      case Call::Kind::snapshot:  // never from the wire (queue_call refuses it)
        break;
    }
    const Call::Kind kind = req.kind;
    const bool reported = spec.getReport() || (kind != Call::Kind::reply && kind != Call::Kind::method_async);
    if (auto refused = queue_call(ctx_, std::move(req), kj::mv(report))) {
      if (refused->code() == ErrorCode::overloaded) return refused;
      if (reported) out_->add_error(ticket, std::move(*refused));
      return std::nullopt;
    }
    if (kind == Call::Kind::observe) out_->add(ticket, 0, [](wire::CallDone::Builder d) { d.setDone(); });
    return std::nullopt;
  }

  // Creates the agent of spec. A refusal as overloaded (--max-agents) is returned, not reported.
  std::optional<Error> create(wire::CallSpec::Reader spec) {
    const std::uint64_t ticket = spec.getTicket();
    std::weak_ptr<Outbox> weak = out_;
    auto made = ctx_.host.create(
        read_text(spec.getClassName(), "the class name"), read_text(spec.getName(), "the agent's name"),
        read_value(spec.getArgs(), "the agent's args"), read_text(spec.getAgentId(), "the agent id"),
        [weak, ticket](std::variant<AgentInfoRow, Error> r) {
          auto out = weak.lock();
          if (!out) return;
          if (auto* err = std::get_if<Error>(&r)) {
            out->add_error(ticket, std::move(*err));
            return;
          }
          out->add(ticket, 64, [id = std::get<AgentInfoRow>(r).id](wire::CallDone::Builder d) {
            d.setCreated(to_kj(id));
          });
        });
    if (auto* err = std::get_if<Error>(&made)) {
      if (err->code() == ErrorCode::overloaded) return std::move(*err);
      out_->add_error(ticket, std::move(*err));
    }
    return std::nullopt;
  }

  // Per-agent order across overload retries. A call refused as overloaded is remembered (by
  // agent and ticket) until the client sends it again and it is queued, or the client gives up
  // on it (Session.submit's dropped); meanwhile the agent's later calls are refused too, so a
  // retried call never runs after one the client issued after it. The client sends refused calls
  // again in ticket order. Refusals of calls the client hears about go to out (the submit's
  // results).
  void admit_in_order(wire::CallSpec::Reader spec, std::vector<std::pair<std::uint64_t, Error>>& out) {
    const std::uint64_t ticket = spec.getTicket();
    const std::string agent = to_std(spec.getAgentId());
    const auto kind = spec.getKind();
    // report = false: the client keeps nothing to send again; the call fails in the pool.
    const bool retried =
        spec.getReport() || (kind != wire::CallKind::REPLY && kind != wire::CallKind::METHOD_ASYNC);
    auto refuse_now = [&](Error e) {
      if (!agent.empty() && retried) {
        refused_[agent].insert(ticket);
        refused_agent_.emplace(ticket, agent);
      }
      if (retried)
        out.emplace_back(ticket, std::move(e));
      else
        ctx_.host.refuse_result(to_std(spec.getCallId()), agent, std::move(e));
    };
    auto waiting = agent.empty() ? refused_.end() : refused_.find(agent);
    if (waiting != refused_.end() && *waiting->second.begin() != ticket) {
      refuse_now(Error(ErrorCode::overloaded,
                       fmt::format("an earlier call to agent '{}' was refused (the server is "
                                   "overloaded) and is not queued yet; this one waits behind it",
                                   agent),
                       agent, ctx_.host.class_of(agent)));
      return;
    }
    auto over = kind == wire::CallKind::CREATE ? create(spec) : queue(spec);
    if (over) {
      refuse_now(std::move(*over));
      return;
    }
    forget_refused(ticket);
  }

  void forget_refused(std::uint64_t ticket) {
    auto at = refused_agent_.find(ticket);
    if (at == refused_agent_.end()) return;
    auto it = refused_.find(at->second);
    refused_agent_.erase(at);
    if (it == refused_.end()) return;
    it->second.erase(ticket);
    if (it->second.empty()) refused_.erase(it);
  }

  // Fails spec without queueing it (CallSink.done). A reply the client does not hear about
  // (report = false: its placeholder was passed on) fails in the pool, so the calls that consume
  // it fail too.
  void refuse(wire::CallSpec::Reader spec, Error e) {
    const auto kind = spec.getKind();
    if (!spec.getReport() && (kind == wire::CallKind::REPLY || kind == wire::CallKind::METHOD_ASYNC)) {
      ctx_.host.refuse_result(to_std(spec.getCallId()), to_std(spec.getAgentId()), std::move(e));
      return;
    }
    out_->add_error(spec.getTicket(), std::move(e));
  }

  RpcContext& ctx_;
  std::shared_ptr<Outbox> out_;
  std::unordered_map<std::string, std::set<std::uint64_t>> refused_;  // agent -> tickets
  std::unordered_map<std::uint64_t, std::string> refused_agent_;      // ticket -> agent
};

}  // namespace

wire::Session::Client make_session(RpcContext& ctx, wire::CallSink::Client sink) {
  return kj::heap<SessionImpl>(ctx, kj::mv(sink));
}

}  // namespace agentd::detail
