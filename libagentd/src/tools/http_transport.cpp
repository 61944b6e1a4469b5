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
// At most kMaxPostsInFlight POSTs run at once; the rest wait in order. abandon(id) (the session
// timed out or cancelled a request) aborts that request's POST; shut_down() aborts them all. A
// request's POST ends after max(call_timeout, start_timeout) + 30 s, and its event stream after
// 4 x max_message_bytes, even when the server keeps it alive with comments.
//
// Once notifications/initialized is accepted, a GET stream is opened for messages the server
// sends outside any request (list_changed after a change of its own); see start_listening().
//
// Messages never show the config's header values (nor any long piece of one) or the URL's
// user:password (redact()). Error bodies are read up to kErrorBodyBytes only.
//
// Not done: resuming a broken SSE stream with Last-Event-ID (the request fails instead).
#include "mcp_transport.h"

#include <agentd/error.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <deque>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "async_http.h"
#include "kj_errors.h"
#include "task_errors.h"

namespace agentd::detail {
namespace {

constexpr int kInternalError = -32603;  // JSON-RPC's code for the errors made up here
// POSTs in flight per transport (replies and cancellations included); more wait their turn.
constexpr std::size_t kMaxPostsInFlight = 256;
// The most of an error answer's body kept (for its message).
constexpr std::size_t kErrorBodyBytes = 4096;
// A request's event stream may carry progress and log notifications before the response: at
// most this many times max_message_bytes in all.
constexpr std::size_t kStreamFactor = 4;
// The GET stream is reopened after this long without a byte.
constexpr std::chrono::milliseconds kListenIdle{5 * 60 * 1000};

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
    collect_secrets();
  }

  ~HttpTransport() noexcept override { *alive_ = false; }

  void start(Events events) override { events_ = std::move(events); }

  void send(const Value& message) override {
    if (closed_ || shutting_down_) return;
    waiting_.push_back(message);
    pump();
  }

  // The session gave up on request `id` (timed out or cancelled): its POST is aborted (the
  // connection closed), or never made if it still waits; nothing more is reported for it.
  void abandon(const Value& id) override {
    if (id.is_null()) return;
    if (auto it = by_id_.find(id.dump()); it != by_id_.end()) {
      Exchange& e = *it->second;
      by_id_.erase(it);
      e.abandoned = true;
      e.canceler.cancel("the request was abandoned");  // its continuation runs on a later turn
      return;
    }
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
      if (is_request(*it) && (*it)["id"] == id) {
        waiting_.erase(it);
        return;
      }
    }
  }

  void set_protocol_version(const std::string& version) override { protocol_version_ = version; }

  kj::Promise<void> shut_down(kj::Duration grace) override {
    shutting_down_ = true;
    waiting_.clear();
    abort_all("the transport shut down");
    if (session_id_.empty() || closed_) return kj::READY_NOW;
    HttpRequest request = base_request();
    request.method = "DELETE";
    request.max_buffered_body = kErrorBodyBytes;
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
    std::string key;           // id.dump(), the key in by_id_; empty for no id
    bool initialize = false;   // the request is `initialize`
    bool initialized = false;  // the notification notifications/initialized
    bool had_session = false;  // it carried Mcp-Session-Id
    enum class Body { unknown, json, sse, other } body = Body::unknown;
    std::string content_type;
    std::string json;  // a JSON body so far (Body::other: its start, for the message)
    SseParser sse;
    std::size_t stream_bytes = 0;  // of the event stream, comments included
    bool answered = false;         // the response to `id` came
    bool too_large = false;
    bool stream_too_long = false;  // the event stream passed kStreamFactor x max_message_bytes
    bool bad_json = false;         // an event's data was not JSON
    bool abandoned = false;        // abandon() or shut_down(): report nothing
    kj::Canceler canceler;         // wraps the POST's promise (abandon())
  };

  // The optional GET stream's state, shared by its sink and its continuation.
  struct Listen {
    explicit Listen(std::size_t limit) : sse(limit) {}
    SseParser sse;
    bool event_stream = false;  // the answer is 2xx text/event-stream
    bool delivered = false;     // an event came
  };

  static bool is_request(const Value& message) {
    return message.is_object() && message.contains("method") && message.contains("id");
  }

  // What messages must never show: each header value whole, and each whitespace-separated piece
  // of one of 8 or more characters ("Bearer T": T, which a 401 body may echo alone); the URL's
  // user:password. Longest first, so a piece inside a longer secret does not split it.
  void collect_secrets() {
    auto add = [this](std::string_view text, std::size_t min) {
      if (text.size() >= min) secrets_.emplace_back(text);
    };
    for (const auto& [name, value] : config_.headers) {
      add(value, 4);
      std::size_t i = 0;
      while (i < value.size()) {
        while (i < value.size() && std::isspace(static_cast<unsigned char>(value[i]))) ++i;
        std::size_t j = i;
        while (j < value.size() && !std::isspace(static_cast<unsigned char>(value[j]))) ++j;
        add(std::string_view(value).substr(i, j - i), 8);
        i = j;
      }
    }
    const std::string& url = config_.url;
    if (auto scheme = url.find("://"); scheme != std::string::npos) {
      const std::size_t host = scheme + 3;
      const std::size_t end = std::min(url.find_first_of("/?#", host), url.size());
      if (auto at = url.rfind('@', end); at != std::string::npos && at >= host && at < end) {
        std::string_view userinfo = std::string_view(url).substr(host, at - host);
        add(userinfo, 4);
        if (auto colon = userinfo.find(':'); colon != std::string_view::npos)
          add(userinfo.substr(colon + 1), 4);
      }
    }
    std::sort(secrets_.begin(), secrets_.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    secrets_.erase(std::unique(secrets_.begin(), secrets_.end()), secrets_.end());
  }

  HttpRequest base_request() const {
    HttpRequest r;
    r.url = config_.url;
    r.headers = headers_;
    if (!session_id_.empty()) r.headers.push_back("Mcp-Session-Id: " + session_id_);
    if (!protocol_version_.empty()) r.headers.push_back("MCP-Protocol-Version: " + protocol_version_);
    return r;
  }

  // POSTs what waits, while initialize is answered and fewer than kMaxPostsInFlight are out.
  void pump() {
    while (!initializing_ && !closed_ && !shutting_down_ && !waiting_.empty() &&
           posts_in_flight_ < kMaxPostsInFlight) {
      Value message = std::move(waiting_.front());
      waiting_.pop_front();
      post(message);
    }
  }

  void post(const Value& message) {
    auto ex = kj::heap<Exchange>(config_.max_message_bytes);
    Exchange& e = *ex;
    if (is_request(message)) {
      e.id = message["id"];
      e.key = e.id.dump();
      e.initialize = message["method"] == "initialize";
    } else if (message.is_object() && message.contains("method")) {
      e.initialized = message["method"] == "notifications/initialized";
    }
    HttpRequest request = base_request();
    e.had_session = !session_id_.empty();
    request.body = message.dump(-1, ' ', false, Value::error_handler_t::replace);
    request.accept = "application/json, text/event-stream";
    request.keep_headers = {"content-type", "mcp-session-id"};
    request.stream = true;  // answers go to the sink as they arrive; timeout: the longest silence
    request.max_buffered_body = kErrorBodyBytes;  // error bodies: enough for the message
    // The registry times calls out (and cancels them) itself; this only ends a POST the server
    // forgot, well after that.
    const auto limit = std::max(config_.call_timeout, config_.start_timeout) + std::chrono::seconds(30);
    request.timeout = limit;
    request.on_head = [this, &e](const HttpResponse& head) { on_head(e, head); };
    if (e.initialize) initializing_ = true;
    BodySink sink = [this, &e](std::string_view bytes) { on_body(e, bytes); };
    ++posts_in_flight_;
    in_flight_.insert(&e);
    if (!e.key.empty()) by_id_[e.key] = &e;
    kj::Promise<HttpAttempt> answer = e.canceler.wrap(http_.post(std::move(request), std::move(sink)));
    if (!e.id.is_null()) {  // a stream kept alive with comments: at most `limit` in all
      answer = answer.exclusiveJoin(timer_.afterDelay(limit.count() * kj::MILLISECONDS).then([limit] {
        HttpAttempt attempt;
        attempt.failure = HttpAttempt::Failure::timeout;
        attempt.error = "no response within " + std::to_string(limit.count() / 1000) + " s";
        return attempt;
      }));
    }
    tasks_.add(answer
                   .then([this, &e](HttpAttempt attempt) { finished(e, std::move(attempt)); },
                         [this, &e](kj::Exception&& ex) {
                           HttpAttempt attempt;
                           attempt.failure = HttpAttempt::Failure::transfer;
                           attempt.error = ex.getDescription().cStr();
                           finished(e, std::move(attempt));
                         })
                   .attach(kj::mv(ex)));
  }

  // Aborts every POST in flight and the GET stream; nothing more is reported for them.
  void abort_all(const char* why) {
    listen_canceler_.cancel(why);
    std::vector<Exchange*> all(in_flight_.begin(), in_flight_.end());
    by_id_.clear();
    for (Exchange* e : all) {
      e->abandoned = true;
      e->canceler.cancel(why);
    }
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
      schedule_flush();  // what waited goes out with the session id
    }
  }

  void on_body(Exchange& e, std::string_view bytes) {
    if (e.too_large) return;
    switch (e.body) {
      case Exchange::Body::sse:
        e.stream_bytes += bytes.size();
        if (e.stream_bytes > kStreamFactor * config_.max_message_bytes) {
          e.too_large = e.stream_too_long = true;
        } else if (!e.sse.feed(bytes, [&](std::string data) { parsed(&e, data); })) {
          e.too_large = true;
        }
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
      case Exchange::Body::other:  // refused: its start is kept for the message, then it ends
        e.json.append(bytes.substr(0, kErrorBodyBytes - std::min(kErrorBodyBytes, e.json.size())));
        if (e.json.size() >= kErrorBodyBytes) throw Error(ErrorCode::tool_error, "unexpected content type");
        break;
    }
    if (e.too_large) throw Error(ErrorCode::tool_error, "answer too large");  // ends the transfer
  }

  // One message's text from a JSON body or an event (of e's answer, or of the GET stream: null).
  void parsed(Exchange* e, const std::string& text) {
    Value v = Value::parse(text, nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded()) {
      if (e != nullptr) e->bad_json = true;
      return;
    }
    if (v.is_array()) {  // a batch (protocol versions before 2025-06-18)
      for (auto& item : v) queue(e, std::move(item));
    } else {
      queue(e, std::move(v));
    }
  }

  void queue(Exchange* e, Value message) {
    if (e != nullptr && !e->id.is_null() && message.is_object() && message.contains("id") &&
        message["id"] == e->id && (message.contains("result") || message.contains("error"))) {
      e->answered = true;
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

  // Delivers what arrived, in order, then POSTs what waits.
  void flush() {
    auto alive = alive_;
    while (!inbox_.empty() && !closed_) {
      Value message = std::move(inbox_.front());
      inbox_.pop_front();
      if (events_.message) events_.message(std::move(message));
      if (!*alive) return;
    }
    pump();
  }

  void finished(Exchange& e, HttpAttempt attempt) {
    --posts_in_flight_;
    in_flight_.erase(&e);
    if (auto it = by_id_.find(e.key); !e.key.empty() && it != by_id_.end() && it->second == &e)
      by_id_.erase(it);
    if (e.initialize && initializing_) initializing_ = false;
    schedule_flush();  // its place goes to the next that waits
    if (closed_ || e.abandoned) return;
    using Failure = HttpAttempt::Failure;
    const long status = attempt.response.status;
    if (attempt.failure == Failure::connect) {
      close(redact("cannot connect to " + url_for_messages(config_.url) + ": " + attempt.error));
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
    const bool ok = attempt.failure == Failure::none && status >= 200 && status < 300;
    if (e.initialized && ok) start_listening();
    if (e.body == Exchange::Body::json && !e.too_large && attempt.failure == Failure::none) {
      parsed(&e, e.json);
    }
    if (e.id.is_null()) {  // a notification or a response: nothing comes back but 202
      if (!ok) {
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
    if (e.stream_too_long) {
      out = "the server's event stream for this request passed " +
            std::to_string(kStreamFactor * config_.max_message_bytes) + " bytes (" +
            std::to_string(kStreamFactor) + " x max_message_bytes) without the response";
    } else if (e.too_large) {
      out = "the server's answer is larger than max_message_bytes (" +
            std::to_string(config_.max_message_bytes) +
            " bytes): raise max_message_bytes in the tool config, or ask for less";
    } else if (status != 0 && (status < 200 || status >= 300)) {
      out = "the server answered HTTP " + std::to_string(status);
      // Redacted before it is cut, so no piece of a secret survives the cut.
      std::string body = redact(attempt.response.body);
      if (body.size() > 200) body = body.substr(0, 200) + "...";
      if (!body.empty()) out += ": " + body;
      if (status == 401 || status == 403)
        out += " (check the headers, e.g. Authorization, in the tool config)";
    } else if (e.body == Exchange::Body::other) {
      out = "the server answered with Content-Type '" + e.content_type +
            "' (expected application/json or text/event-stream)";
    } else if (attempt.failure != HttpAttempt::Failure::none) {
      out = "the HTTP request failed: " + attempt.error;
    } else if (e.bad_json) {
      out = "the server sent something that is not JSON";
    } else if (e.body == Exchange::Body::sse) {
      out = "the server ended its event stream without the response (resuming streams is not supported)";
    } else {
      out = "the server answered HTTP " + std::to_string(status) + " without a response";
    }
    return redact(std::move(out));
  }

  // A server's text could echo what it was sent; header values (tokens) never go further.
  std::string redact(std::string text) const {
    for (const std::string& secret : secrets_) {
      for (std::size_t at; (at = text.find(secret)) != std::string::npos;)
        text.replace(at, secret.size(), "***");
    }
    return text;
  }

  // The GET stream (spec: "Listening for Messages from the Server"), opened once the
  // notifications/initialized POST is accepted, for what the server sends outside any request
  // (notifications/tools/list_changed after a change of its own). A 4xx ends it for good (405:
  // the server offers none; 404/400: the session is gone, which the next POST reports); any
  // other end reconnects after 1 s (a stream that worked) or a backoff doubling up to 30 s.
  void start_listening() {
    if (listening_ || closed_ || shutting_down_) return;
    listening_ = true;
    tasks_.add(listen_canceler_.wrap(listen()).catch_([](kj::Exception&&) {}));
  }

  kj::Promise<void> listen() {
    HttpRequest request = base_request();
    request.method = "GET";
    request.accept = "text/event-stream";
    request.stream = true;
    request.timeout = kListenIdle;  // a silent stream is reopened
    request.keep_headers = {"content-type"};
    request.max_buffered_body = kErrorBodyBytes;
    // Shared, not attached: each reconnection's promise replaces the last (no chain grows).
    auto s = std::make_shared<Listen>(config_.max_message_bytes);
    request.on_head = [s](const HttpResponse& head) {
      const std::string* type = head.header("content-type");
      s->event_stream = type != nullptr && starts_with_ci(*type, "text/event-stream");
    };
    BodySink sink = [this, s](std::string_view bytes) {
      if (!s->event_stream) throw Error(ErrorCode::tool_error, "the GET answer is not an event stream");
      if (!s->sse.feed(bytes, [&](std::string data) {
            s->delivered = true;
            parsed(nullptr, data);
          })) {
        throw Error(ErrorCode::tool_error, "an event over max_message_bytes");
      }
    };
    return http_.post(std::move(request), std::move(sink))
        .then(
            [this, s](HttpAttempt attempt) -> kj::Promise<void> {
              const long status = attempt.response.status;
              if (status >= 400 && status < 500) {
                spdlog::debug("tool server '{}': no GET stream (HTTP {})", config_.name, status);
                return kj::READY_NOW;
              }
              return relisten(s->event_stream && s->delivered);
            },
            [this, s](kj::Exception&&) { return relisten(s->event_stream && s->delivered); });
  }

  kj::Promise<void> relisten(bool worked) {
    if (closed_ || shutting_down_) return kj::READY_NOW;
    listen_backoff_ = worked ? kj::SECONDS : std::min(listen_backoff_ * 2, 30 * kj::SECONDS);
    return timer_.afterDelay(listen_backoff_).then([this] { return listen(); });
  }

  void answer_with_error(const Exchange& e, const std::string& why) {
    Value error = {
        {"jsonrpc", "2.0"},
        {"id", e.id},
        {"error", {{"code", kInternalError}, {"message", "tool server '" + config_.name + "': " + why}}}};
    inbox_.push_back(std::move(error));
    schedule_flush();
  }

  // Called from a POST's continuation only (never from the GET stream's, which it cancels).
  void close(std::string why) {
    if (closed_) return;
    closed_ = true;
    inbox_.clear();
    waiting_.clear();
    abort_all("the transport closed");
    if (events_.closed) events_.closed(std::move(why));  // may be the last thing done with this
  }

  ToolServerConfig config_;  // a copy: the caller's may change on reload
  AsyncHttp& http_;
  kj::Timer& timer_;
  std::vector<std::string> headers_;  // the config's, "Name: value"; never logged
  std::vector<std::string> secrets_;  // never in a message (redact()), longest first
  Events events_;
  std::string session_id_;
  std::string protocol_version_;
  bool initializing_ = false;  // an initialize request is in flight without an answer yet
  bool shutting_down_ = false;
  bool closed_ = false;
  bool flush_scheduled_ = false;
  bool listening_ = false;  // the GET stream was started
  kj::Duration listen_backoff_ = 500 * kj::MILLISECONDS;
  std::deque<Value> inbox_;    // received, not yet delivered
  std::deque<Value> waiting_;  // sent, not yet POSTed (initialize in flight, or at the cap)
  std::size_t posts_in_flight_ = 0;
  std::unordered_set<Exchange*> in_flight_;           // POSTs not yet finished
  std::unordered_map<std::string, Exchange*> by_id_;  // the requests among them, by id
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  kj::Canceler listen_canceler_;  // the GET stream
  TaskErrors task_errors_{"MCP HTTP transport"};
  kj::TaskSet tasks_;  // the POSTs, the GET stream and the flushes; destroyed first
};

}  // namespace

kj::Own<McpTransport> make_http_transport(const ToolServerConfig& config, AsyncHttp& http, kj::Timer& timer) {
  return kj::heap<HttpTransport>(config, http, timer);
}

}  // namespace agentd::detail
