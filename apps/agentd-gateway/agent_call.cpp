#include "agent_call.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <exception>
#include <memory>
#include <optional>
#include <utility>

namespace gateway {

namespace asio = boost::asio;

namespace {

// A callback for Placeholder::on_ready: posts work to the strand the first time it runs and
// keeps nothing afterwards (work may hold the placeholder, which must not be dropped on the
// client's loop thread).
template <class Work>
std::function<void()> post_once(asio::any_io_executor strand, Work work) {
  return [strand, slot = std::optional<Work>(std::move(work))]() mutable {
    if (!slot) return;
    asio::post(strand, std::move(*slot));
    slot.reset();
  };
}

Outcome outcome_of(const agentd::Placeholder& p) {
  Outcome out = [&p]() -> Outcome {
    try {
      return p.get();  // returns at once: on_ready ran
    } catch (const agentd::Error& e) {
      return e;
    } catch (const std::exception& e) {
      return agentd::Error(agentd::ErrorCode::internal, e.what());
    }
  }();
  out.usage = p.usage();
  return out;
}

void forget_if_gone(Upstream& upstream, const std::string& agent_id, const Outcome& outcome) {
  if (auto* e = std::get_if<agentd::Error>(&outcome); e && e->code() == agentd::ErrorCode::unknown_agent)
    upstream.forget(agent_id);
}

// A streamed call, on the strand. It ends once both have happened: the result is there
// (on_ready) and every chunk has been handed over (the on_chunk callback was released, which
// the client library does after the stream's last chunk). Either may come first: a result that
// is there before on_chunk's callback is installed still has chunks queued.
struct StreamWait {
  std::function<void(std::string)> on_chunk;
  std::function<void(Outcome)> done;
  bool chunks_done = false;
  bool finished = false;
  std::optional<Outcome> outcome;
  std::optional<asio::steady_timer> deadline;

  void maybe_finish() {
    if (finished || !chunks_done || !outcome) return;
    finished = true;
    if (deadline) deadline->cancel();
    on_chunk = nullptr;
    auto d = std::move(done);
    d(std::move(*outcome));
  }
};

// Released on the client's loop thread when on_chunk's callback is: tells the strand that every
// chunk was handed over (the posts keep their order: chunks first).
struct ChunksEnd {
  ChunksEnd(asio::any_io_executor s, std::shared_ptr<StreamWait> w)
      : strand(std::move(s)), wait(std::move(w)) {}
  ChunksEnd(const ChunksEnd&) = delete;
  ChunksEnd& operator=(const ChunksEnd&) = delete;
  asio::any_io_executor strand;
  std::shared_ptr<StreamWait> wait;
  ~ChunksEnd() {
    if (!wait) return;
    asio::post(strand, [wait = std::move(wait)] {
      wait->chunks_done = true;
      wait->maybe_finish();
    });
  }
};

}  // namespace

agentd::Error reply_timeout_error(const std::string& agent_id, std::chrono::seconds timeout) {
  return agentd::Error(agentd::ErrorCode::timeout,
                       "agent '" + agent_id + "' did not answer within --reply-timeout " +
                           std::to_string(timeout.count()) + " s",
                       agent_id, "", true);
}

void await_reply(Upstream& upstream, asio::any_io_executor strand, const std::string& agent_id,
                 const agentd::Placeholder& p, std::chrono::seconds timeout,
                 std::function<void(Outcome)> done) {
  // Whichever comes first on the strand, the reply or the deadline, takes done.
  auto slot = std::make_shared<std::function<void(Outcome)>>(std::move(done));
  auto deadline = std::make_shared<asio::steady_timer>(strand, timeout);
  deadline->async_wait([slot, agent_id, timeout](boost::system::error_code ec) {
    if (ec || !*slot) return;
    auto d = std::move(*slot);
    *slot = nullptr;
    d(reply_timeout_error(agent_id, timeout));
  });
  p.on_ready(post_once(strand, [p, slot, deadline, &upstream, agent_id] {
    deadline->cancel();
    auto outcome = outcome_of(p);
    forget_if_gone(upstream, agent_id, outcome);
    if (!*slot) return;
    auto d = std::move(*slot);
    *slot = nullptr;
    d(std::move(outcome));
  }));
}

void await_stream(Upstream& upstream, asio::any_io_executor strand, const std::string& agent_id,
                  const agentd::Placeholder& p, std::chrono::seconds timeout,
                  std::function<void(std::string)> on_chunk, std::function<void(Outcome)> done) {
  auto wait = std::make_shared<StreamWait>();
  wait->on_chunk = std::move(on_chunk);
  wait->done = std::move(done);
  // Past the deadline the stream ends with a timeout error; what comes later is dropped.
  wait->deadline.emplace(strand, timeout);
  wait->deadline->async_wait([wait, agent_id, timeout](boost::system::error_code ec) {
    if (ec || wait->finished) return;
    wait->outcome = reply_timeout_error(agent_id, timeout);
    wait->chunks_done = true;
    wait->maybe_finish();
  });
  auto end = std::make_shared<ChunksEnd>(strand, wait);
  p.on_chunk([end, wait, strand](std::string_view chunk) {
    asio::post(strand, [wait, text = std::string(chunk)]() mutable {
      if (!wait->finished && wait->on_chunk) wait->on_chunk(std::move(text));
    });
  });
  end.reset();
  p.on_ready(post_once(strand, [wait, p, &upstream, agent_id] {
    if (wait->finished) return;
    wait->outcome = outcome_of(p);
    forget_if_gone(upstream, agent_id, *wait->outcome);
    wait->maybe_finish();
  }));
}

}  // namespace gateway
