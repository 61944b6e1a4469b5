// MCP's Streamable HTTP transport (spec 2025-11-25, "Transports"), client side, on AsyncHttp.
//
// Each message is one POST to the server's endpoint (Accept: application/json,
// text/event-stream). A request's answer is either one JSON body or a server-sent-event stream
// whose events each carry one message (requests and notifications of the server may come before
// the response); notifications and responses are answered 202 Accepted with no body. POSTs run
// concurrently (many tool calls in flight share the loop and the connection pool), except that
// what is sent while `initialize` is in flight waits for its answer's Mcp-Session-Id.
//
// Failures of one request become a JSON-RPC error response for its id (HTTP 4xx/5xx, a transfer
// that broke, an answer over max_message_bytes, a stream that ended before the response), so the
// session fails that call and goes on. The transport closes (Events::closed) only when the server
// cannot be reached at all, or when it answers 404 to a request carrying the session id: the
// session is gone and the registry starts a new one.
//
// Not done: the optional GET stream for messages the server sends outside any request (so a
// server's list_changed arrives only inside a POST's stream), and resuming a broken SSE stream
// with Last-Event-ID (the request fails instead).
#include "mcp_transport.h"

#include <agentd/error.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <deque>
#include <memory>
#include <utility>

#include "async_http.h"
#include "kj_errors.h"
#include "task_errors.h"

namespace agentd::detail {
namespace {

constexpr int kInternalError = -32603;  // JSON-RPC's code for the errors made up here

bool starts_with_ci(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i]) return false;
  }
  return true;
}

// Server-sent events (the WHATWG grammar), incrementally: lines end with CR, LF or CRLF; an empty
// line dispatches the event; `data:` lines join with LF; comments (":") and other fields are
// ignored. Only events of type "message" (or none) carry MCP messages; an empty data (the
// priming event a 2025-11-25 server sends first, for resumption) is skipped.
bool mentions_session(std::string_view body) {
  std::string lower(body.substr(0, 4096));
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("session") != std::string::npos;
}

class SseParser {
 public:
  explicit SseParser(std::size_t limit) : limit_(limit) {}

  // Feeds bytes; each complete event's data goes to on_data. Returns false when a line or an
  // event grew over the limit (the rest is then ignored).
  template <class OnData>
  bool feed(std::string_view bytes, const OnData& on_data) {
    for (char c : bytes) {
      if (c == '\n' && after_cr_) {
        after_cr_ = false;
        continue;
      }
      after_cr_ = c == '\r';
      if (c == '\r' || c == '\n') {
        if (!line_end(on_data)) return false;
        continue;
      }
      if (line_.size() >= limit_) return false;
      line_ += c;
    }
    return true;
  }

 private:
  template <class OnData>
  bool line_end(const OnData& on_data) {
    std::string line = std::exchange(line_, {});
    if (line.empty()) {
      if (has_data_ && (event_.empty() || event_ == "message") && !data_.empty()) on_data(std::move(data_));
      data_.clear();
      event_.clear();
      has_data_ = false;
      return true;
    }
    if (line[0] == ':') return true;
    std::string_view field = line, value;
    if (auto colon = line.find(':'); colon != std::string::npos) {
      field = std::string_view(line).substr(0, colon);
      value = std::string_view(line).substr(colon + 1);
      if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    }
    if (field == "data") {
      if (has_data_) data_ += '\n';
      if (data_.size() + value.size() > limit_) return false;
      data_ += value;
      has_data_ = true;
    } else if (field == "event") {
      event_ = std::string(value);
    }
    return true;
  }

  std::size_t limit_;
  std::string line_;
  std::string data_;
  std::string event_;
  bool has_data_ = false;
  bool after_cr_ = false;
};

class HttpTransport final : public McpTransport {
 public:
  HttpTransport(const ToolServerConfig& config, AsyncHttp& http, kj::Timer& timer)
      : config_(config), http_(http), timer_(timer), tasks_(task_errors_) {
    for (const auto& [name, value] : config.headers) headers_.push_back(name + ": " + value);
  }

  ~HttpTransport() noexcept override { *alive_ = false; }

  void start(Events events) override { events_ = std::move(events); }

  void send(const Value& message) override {
    if (closed_ || shutting_down_) return;
    if (initializing_) {
      held_.push_back(message);
      return;
    }
    post(message);
  }

  void set_protocol_version(const std::string& version) override { protocol_version_ = version; }

  kj::Promise<void> shut_down(kj::Duration grace) override {
    shutting_down_ = true;
    held_.clear();
    if (session_id_.empty() || closed_) return kj::READY_NOW;
    HttpRequest request = base_request();
    request.method = "DELETE";
    request.timeout = std::chrono::milliseconds(std::max<std::int64_t>(1, grace / kj::MILLISECONDS));
    // Any answer will do (405: the server does not let clients end sessions).
    return http_.post(std::move(request)).ignoreResult().exclusiveJoin(timer_.afterDelay(grace));
  }

 private:
  // One POSTed message and what came back for it. Heap-held by its promise; the sink and on_head
  // point at it (AsyncHttp calls neither once the promise is dropped).
  struct Exchange {
    explicit Exchange(std::size_t limit) : sse(limit) {}
    Value id;                  // the request's id; null for a notification or a response
    bool initialize = false;   // the request is `initialize`
    bool had_session = false;  // it carried Mcp-Session-Id
    enum class Body { unknown, json, sse, other } body = Body::unknown;
    std::string content_type;
    std::string json;  // a JSON body so far
    SseParser sse;
    bool answered = false;  // the response to `id` came
    bool too_large = false;
    bool bad_json = false;  // an event's data was not JSON
  };

  HttpRequest base_request() const {
    HttpRequest r;
    r.url = config_.url;
    r.headers = headers_;
    if (!session_id_.empty()) r.headers.push_back("Mcp-Session-Id: " + session_id_);
    if (!protocol_version_.empty()) r.headers.push_back("MCP-Protocol-Version: " + protocol_version_);
    return r;
  }

  void post(const Value& message) {
    auto ex = kj::heap<Exchange>(config_.max_message_bytes);
    Exchange& e = *ex;
    if (message.is_object() && message.contains("method") && message.contains("id")) {
      e.id = message["id"];
      e.initialize = message["method"] == "initialize";
    }
    HttpRequest request = base_request();
    e.had_session = !session_id_.empty();
    request.body = message.dump(-1, ' ', false, Value::error_handler_t::replace);
    request.accept = "application/json, text/event-stream";
    request.keep_headers = {"content-type", "mcp-session-id"};
    request.stream = true;  // answers go to the sink as they arrive; timeout: the longest silence
    // The registry times calls out (and cancels them) itself; this only ends a POST the server
    // forgot, well after that.
    request.timeout = std::max(config_.call_timeout, config_.start_timeout) + std::chrono::seconds(30);
    request.on_head = [this, &e](const HttpResponse& head) { on_head(e, head); };
    if (e.initialize) initializing_ = true;
    BodySink sink = [this, &e](std::string_view bytes) { on_body(e, bytes); };
    tasks_.add(http_.post(std::move(request), std::move(sink))
                   .then([this, &e](HttpAttempt attempt) { finished(e, std::move(attempt)); },
                         [this, &e](kj::Exception&& ex) {
                           HttpAttempt attempt;
                           attempt.failure = HttpAttempt::Failure::transfer;
                           attempt.error = ex.getDescription().cStr();
                           finished(e, std::move(attempt));
                         })
                   .attach(kj::mv(ex)));
  }

  // Inside libcurl's callbacks: records, parses and queues; never calls out (the events' code
  // may send, and libcurl refuses calls from its own callbacks).
  void on_head(Exchange& e, const HttpResponse& head) {
    if (const std::string* type = head.header("content-type")) e.content_type = *type;
    if (starts_with_ci(e.content_type, "text/event-stream")) {
      e.body = Exchange::Body::sse;
    } else if (starts_with_ci(e.content_type, "application/json")) {
      e.body = Exchange::Body::json;
    } else {
      e.body = Exchange::Body::other;
    }
    if (e.initialize) {
      if (const std::string* id = head.header("mcp-session-id")) session_id_ = *id;
      initializing_ = false;
      schedule_flush();  // what was held goes out with the session id
    }
  }

  void on_body(Exchange& e, std::string_view bytes) {
    if (e.too_large) return;
    switch (e.body) {
      case Exchange::Body::sse:
        if (!e.sse.feed(bytes, [&](std::string data) { parsed(e, data); })) e.too_large = true;
        break;
      case Exchange::Body::json:
      case Exchange::Body::unknown:
        if (e.json.size() + bytes.size() > config_.max_message_bytes) {
          e.too_large = true;
          e.json.clear();
        } else {
          e.json.append(bytes);
        }
        break;
      case Exchange::Body::other:
        if (e.json.size() < 200) e.json.append(bytes.substr(0, 200 - e.json.size()));  // for the message
        break;
    }
    if (e.too_large) throw Error(ErrorCode::tool_error, "answer too large");  // ends the transfer
  }

  // One message's text from a JSON body or an event.
  void parsed(Exchange& e, const std::string& text) {
    Value v = Value::parse(text, nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded()) {
      e.bad_json = true;
      return;
    }
    if (v.is_array()) {  // a batch (protocol versions before 2025-06-18)
      for (auto& item : v) queue(e, std::move(item));
    } else {
      queue(e, std::move(v));
    }
  }

  void queue(Exchange& e, Value message) {
    if (!e.id.is_null() && message.is_object() && message.contains("id") && message["id"] == e.id &&
        (message.contains("result") || message.contains("error"))) {
      e.answered = true;
    }
    inbox_.push_back(std::move(message));
    schedule_flush();
  }

  void schedule_flush() {
    if (flush_scheduled_) return;
    flush_scheduled_ = true;
    tasks_.add(kj::evalLater([this] {
      flush_scheduled_ = false;
      flush();
    }));
  }

  // Delivers what arrived, in order, then sends what waited for the initialize answer.
  void flush() {
    auto alive = alive_;
    while (!inbox_.empty() && !closed_) {
      Value message = std::move(inbox_.front());
      inbox_.pop_front();
      if (events_.message) events_.message(std::move(message));
      if (!*alive) return;
    }
    while (!initializing_ && !held_.empty() && !closed_ && !shutting_down_) {
      Value message = std::move(held_.front());
      held_.pop_front();
      post(message);
    }
  }

  void finished(Exchange& e, HttpAttempt attempt) {
    if (closed_) return;
    if (e.initialize && initializing_) {
      initializing_ = false;
      schedule_flush();
    }
    using Failure = HttpAttempt::Failure;
    const long status = attempt.response.status;
    if (attempt.failure == Failure::connect) {
      close("cannot connect to " + config_.url.substr(0, config_.url.find('?')) + ": " + attempt.error);
      return;
    }
    // The spec's answer to a session id the server no longer knows is 404. The TypeScript SDK's
    // Express examples, server-everything among them and much copied, answer 400 "Bad Request: No
    // valid session ID provided" instead: treated alike.
    const bool session_unknown_400 =
        status == 400 && e.had_session && mentions_session(attempt.response.body);
    if ((status == 404 || session_unknown_400) && e.had_session) {
      close("the server ended the session (HTTP " + std::to_string(status) +
            " to a request with its Mcp-Session-Id); a new session starts at next use");
      return;
    }
    if (e.body == Exchange::Body::json && !e.too_large && attempt.failure == Failure::none) {
      parsed(e, e.json);
    }
    if (e.id.is_null()) {  // a notification or a response: nothing comes back but 202
      if (attempt.failure != Failure::none || status < 200 || status >= 300) {
        spdlog::warn("tool server '{}': a notification or response POSTed was refused: {}", config_.name,
                     describe_failure(e, attempt));
      }
      return;
    }
    if (e.answered) return;
    answer_with_error(e, describe_failure(e, attempt));
  }

  // Why a request got no response, for the operator and the model.
  std::string describe_failure(const Exchange& e, const HttpAttempt& attempt) const {
    const long status = attempt.response.status;
    std::string out;
    if (e.too_large) {
      out = "the server's answer is larger than max_message_bytes (" +
            std::to_string(config_.max_message_bytes) +
            " bytes): raise max_message_bytes in the tool config, or ask for less";
    } else if (attempt.failure != HttpAttempt::Failure::none) {
      out = "the HTTP request failed: " + attempt.error;
    } else if (status < 200 || status >= 300) {
      out = "the server answered HTTP " + std::to_string(status);
      std::string body = attempt.response.body.empty() ? e.json : attempt.response.body;
      if (body.size() > 200) body = body.substr(0, 200) + "...";
      if (!body.empty()) out += ": " + body;
      if (status == 401 || status == 403)
        out += " (check the headers, e.g. Authorization, in the tool config)";
    } else if (e.bad_json) {
      out = "the server sent something that is not JSON";
    } else if (e.body == Exchange::Body::sse) {
      out = "the server ended its event stream without the response (resuming streams is not supported)";
    } else if (e.body == Exchange::Body::other) {
      out = "the server answered with Content-Type '" + e.content_type +
            "' (expected application/json or text/event-stream)";
    } else {
      out = "the server answered HTTP " + std::to_string(status) + " without a response";
    }
    return redact(std::move(out));
  }

  // A server's text could echo what it was sent; header values (tokens) never go further.
  std::string redact(std::string text) const {
    for (const auto& [name, value] : config_.headers) {
      if (value.size() < 4) continue;
      for (std::size_t at; (at = text.find(value)) != std::string::npos;)
        text.replace(at, value.size(), "***");
    }
    return text;
  }

  void answer_with_error(const Exchange& e, const std::string& why) {
    Value error = {
        {"jsonrpc", "2.0"},
        {"id", e.id},
        {"error", {{"code", kInternalError}, {"message", "tool server '" + config_.name + "': " + why}}}};
    inbox_.push_back(std::move(error));
    schedule_flush();
  }

  void close(std::string why) {
    if (closed_) return;
    closed_ = true;
    inbox_.clear();
    held_.clear();
    if (events_.closed) events_.closed(std::move(why));  // may be the last thing done with this
  }

  ToolServerConfig config_;  // a copy: the caller's may change on reload
  AsyncHttp& http_;
  kj::Timer& timer_;
  std::vector<std::string> headers_;  // the config's, "Name: value"; never logged
  Events events_;
  std::string session_id_;
  std::string protocol_version_;
  bool initializing_ = false;  // an initialize request is in flight without an answer yet
  bool shutting_down_ = false;
  bool closed_ = false;
  bool flush_scheduled_ = false;
  std::deque<Value> inbox_;  // received, not yet delivered
  std::deque<Value> held_;   // sent while initialize was in flight
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  TaskErrors task_errors_{"MCP HTTP transport"};
  kj::TaskSet tasks_;  // the POSTs and the flushes; destroyed first
};

}  // namespace

kj::Own<McpTransport> make_http_transport(const ToolServerConfig& config, AsyncHttp& http, kj::Timer& timer) {
  return kj::heap<HttpTransport>(config, http, timer);
}

}  // namespace agentd::detail
