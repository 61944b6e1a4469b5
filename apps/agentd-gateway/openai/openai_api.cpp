#include "openai/openai_api.h"

#include "openai/chat_mapping.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <optional>
#include <utility>

namespace gateway::openai {

namespace {

using ExchangePtr = std::shared_ptr<http::Exchange>;

void send_error(const ExchangePtr& ex, const ErrorReply& e) { ex->respond_json(e.status, e.body); }

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A callback for Placeholder::on_ready: posts work to the strand the first time it runs and
// keeps nothing afterwards (work may hold the placeholder, which must not be dropped on the
// client's loop thread).
template <class Work>
std::function<void()> post_once(boost::asio::any_io_executor strand, Work work) {
  return [strand, slot = std::optional<Work>(std::move(work))]() mutable {
    if (!slot) return;
    boost::asio::post(strand, std::move(*slot));
    slot.reset();
  };
}

// A streamed completion, on the connection's strand. It ends once both have happened: the
// result is there (on_ready) and every chunk has been handed over (the on_chunk callback was
// released, which the client library does after the stream's last chunk). Either may come
// first: a result that is there before on_chunk's callback is installed still has chunks queued.
struct StreamState {
  ExchangePtr ex;
  std::string model;
  std::string id;
  std::int64_t created = 0;
  bool chunks_done = false;
  bool finished = false;
  std::optional<std::variant<agentd::Msg, agentd::Error>> outcome;
  std::optional<boost::asio::steady_timer> deadline;

  void maybe_finish() {
    if (finished || !chunks_done || !outcome) return;
    finished = true;
    if (deadline) deadline->cancel();
    if (auto* e = std::get_if<agentd::Error>(&*outcome)) {
      ex->send(error_event(*e, model));
    } else {
      ex->send(chunk_event(id, model, created, nullptr, nullptr, "stop"));
    }
    ex->send(kDoneEvent);
    ex->end_stream();
  }
};

// Released on the client's loop thread when on_chunk's callback is: tells the strand that every
// chunk was handed over (the posts keep their order: chunks first).
struct ChunksEnd {
  ChunksEnd(boost::asio::any_io_executor s, std::shared_ptr<StreamState> st)
      : strand(std::move(s)), state(std::move(st)) {}
  ChunksEnd(const ChunksEnd&) = delete;
  ChunksEnd& operator=(const ChunksEnd&) = delete;
  boost::asio::any_io_executor strand;
  std::shared_ptr<StreamState> state;
  ~ChunksEnd() {
    if (!state) return;
    boost::asio::post(strand, [state = std::move(state)] {
      state->chunks_done = true;
      state->maybe_finish();
    });
  }
};

agentd::Error reply_timeout_error(const std::string& model, std::chrono::seconds timeout) {
  return agentd::Error(
      agentd::ErrorCode::timeout,
      "agent '" + model + "' did not answer within --reply-timeout " + std::to_string(timeout.count()) + " s",
      model, "", true);
}

std::variant<agentd::Msg, agentd::Error> outcome_of(const agentd::Placeholder& p) {
  try {
    return p.get();  // returns at once: on_ready ran
  } catch (const agentd::Error& e) {
    return e;
  } catch (const std::exception& e) {
    return agentd::Error(agentd::ErrorCode::internal, e.what());
  }
}

void stream_completion(Upstream& upstream, const ExchangePtr& ex, const agentd::AgentRef& agent,
                       const ChatRequest& req, std::chrono::seconds timeout) {
  auto strand = ex->executor();
  auto state = std::make_shared<StreamState>();
  state->ex = ex;
  state->model = req.model;
  state->created = unix_now();
  // The header and the first chunk are queued before on_chunk is set below, so before any of the
  // agent's chunks (those that come earlier wait in the placeholder; posts to a strand keep
  // their order).
  agentd::Placeholder p = agent.reply_stream(req.input);
  state->id = "chatcmpl-" + p.call_id();
  ex->start_stream(http::Status::ok, "text/event-stream");
  const std::string role = "assistant";
  ex->send(chunk_event(state->id, state->model, state->created, &role, nullptr, nullptr));
  // Past the deadline the stream ends with a timeout error event; what comes later is dropped.
  state->deadline.emplace(strand, timeout);
  state->deadline->async_wait([state, timeout](boost::system::error_code ec) {
    if (ec || state->finished) return;
    state->outcome = reply_timeout_error(state->model, timeout);
    state->chunks_done = true;
    state->maybe_finish();
  });
  auto end = std::make_shared<ChunksEnd>(strand, state);
  p.on_chunk([end, state](std::string_view chunk) {
    // Loop thread: the event is built here and queued on the strand (Exchange::send posts).
    const std::string text(chunk);
    state->ex->send(chunk_event(state->id, state->model, state->created, nullptr, &text, nullptr));
  });
  end.reset();
  p.on_ready(post_once(strand, [state, p, &upstream, model = req.model] {
    if (state->finished) return;
    state->outcome = outcome_of(p);
    if (auto* e = std::get_if<agentd::Error>(&*state->outcome);
        e && e->code() == agentd::ErrorCode::unknown_agent)
      upstream.forget(model);
    state->maybe_finish();
  }));
}

void plain_completion(Upstream& upstream, const ExchangePtr& ex, const agentd::AgentRef& agent,
                      const ChatRequest& req, std::chrono::seconds timeout) {
  agentd::Placeholder p = agent.reply(req.input);
  // Past the deadline the request is answered 504 (respond() answers once: the reply, if it
  // comes later, is dropped).
  auto deadline = std::make_shared<boost::asio::steady_timer>(ex->executor(), timeout);
  deadline->async_wait([ex, model = req.model, timeout](boost::system::error_code ec) {
    if (!ec) send_error(ex, error_reply(reply_timeout_error(model, timeout), model));
  });
  p.on_ready(post_once(ex->executor(), [ex, p, deadline, &upstream, model = req.model, created = unix_now()] {
    deadline->cancel();
    auto outcome = outcome_of(p);
    if (auto* e = std::get_if<agentd::Error>(&outcome)) {
      if (e->code() == agentd::ErrorCode::unknown_agent) upstream.forget(model);
      return send_error(ex, error_reply(*e, model));
    }
    ex->respond_json(http::Status::ok, completion_json("chatcmpl-" + p.call_id(), model, created,
                                                       std::get<agentd::Msg>(outcome).text()));
  }));
}

}  // namespace

void OpenAiApi::handle(const ExchangePtr& ex) {
  const auto& req = ex->request();
  const std::string_view target = req.target();
  const std::string_view path = target.substr(0, target.find('?'));
  if (path == "/v1/models") {
    if (req.method() != http::bhttp::verb::get)
      return send_error(ex, invalid_request(http::Status::method_not_allowed, "use GET /v1/models"));
    return list_models(ex);
  }
  if (path == "/v1/chat/completions") {
    if (req.method() != http::bhttp::verb::post)
      return send_error(ex,
                        invalid_request(http::Status::method_not_allowed, "use POST /v1/chat/completions"));
    return chat_completions(ex);
  }
  send_error(ex,
             invalid_request(http::Status::not_found, "no such endpoint: " + std::string(path), "not_found"));
}

void OpenAiApi::list_models(const ExchangePtr& ex) {
  upstream_.list_agents([ex](AgentsOrError result) {
    if (auto* e = std::get_if<agentd::Error>(&result)) return send_error(ex, error_reply(*e, ""));
    std::vector<ModelEntry> models;
    for (const auto& a : std::get<std::vector<agentd::AgentInfo>>(result))
      models.push_back(ModelEntry{a.id, a.class_name, a.name});
    ex->respond_json(http::Status::ok, models_json(models));
  });
}

void OpenAiApi::chat_completions(const ExchangePtr& ex) {
  auto parsed = parse_chat_request(ex->request().body());
  if (auto* e = std::get_if<ErrorReply>(&parsed)) return send_error(ex, *e);
  auto req = std::make_shared<ChatRequest>(std::move(std::get<ChatRequest>(parsed)));
  upstream_.with_agent(req->model, [this, ex, req](AgentOrError found) {
    if (auto* e = std::get_if<agentd::Error>(&found)) return send_error(ex, error_reply(*e, req->model));
    const auto& agent = std::get<agentd::AgentRef>(found);
    try {
      if (req->stream)
        stream_completion(upstream_, ex, agent, *req, reply_timeout_);
      else
        plain_completion(upstream_, ex, agent, *req, reply_timeout_);
    } catch (const agentd::Error& e) {  // the client is closed: the call could not be sent
      send_error(ex, error_reply(e, req->model));
    }
  });
}

}  // namespace gateway::openai
