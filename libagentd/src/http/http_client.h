// HTTP for the model clients (and MCP's Streamable HTTP): one POST (or GET, DELETE) over libcurl, the retry
// loop around it, and the decoders for streamed bodies (server-sent events, newline-delimited JSON).
//
// Thread-safety: every function may be called from any thread at once. Each thread keeps one
// curl easy handle (so connections to an endpoint are reused across calls on that thread);
// libcurl's global initialisation happens once, on first use.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace agentd::detail {

struct HttpResponse;

struct HttpRequest {
  std::string url;
  std::vector<std::string> headers;  // "Name: value"; Content-Type: application/json is added
  std::string body;                  // POSTed as is
  // The whole exchange; when streaming, the longest silence (checked about once a second, so a
  // stalled stream fails up to a second late).
  std::chrono::milliseconds timeout{120'000};
  bool stream = false;  // the body of a 2xx answer goes to the sink as it arrives

  // Less common needs (MCP's Streamable HTTP); their defaults cost the model calls nothing.
  // The method: empty is POST (with body); "GET" and "DELETE" send no body (nor Content-Type).
  std::string method;
  // The Accept header's value; empty: application/json (with stream: text/event-stream,
  // application/x-ndjson, application/json).
  std::string accept;
  // Response header names (any case) to keep in HttpResponse::headers; empty: none kept.
  std::vector<std::string> keep_headers;
  // Streaming requests: called once, on the sink's thread, before the first byte of a 2xx body
  // reaches the sink, with the status and the kept headers (body empty). May throw, as the sink.
  std::function<void(const HttpResponse& head)> on_head;
};

struct HttpResponse {
  long status = 0;
  std::string body;                                      // the body, unless it was streamed to a sink
  std::optional<std::chrono::milliseconds> retry_after;  // Retry-After or retry-after-ms
  bool streamed = false;                                 // some body bytes went to the sink
  // The headers named in HttpRequest::keep_headers that came (names lowercased, values trimmed),
  // of the last header block, in order.
  std::vector<std::pair<std::string, std::string>> headers;

  // The first kept header named `name` (lowercase), or null.
  const std::string* header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return &v;
    }
    return nullptr;
  }
};

// Receives the bytes of a 2xx answer to a streaming request, on the calling thread, in order.
// It may throw: the transfer is aborted and the exception reaches the caller of http_post.
using BodySink = std::function<void(std::string_view bytes)>;

// How one attempt ended: with an HTTP answer (any status), or with a transport failure.
struct HttpAttempt {
  enum class Failure { none, timeout, connect, transfer, fatal };
  HttpResponse response;
  Failure failure = Failure::none;
  std::string error;  // what failed, when failure != none
};

// One POST, no retries. Throws only what `sink` throws.
HttpAttempt http_post(const HttpRequest& request, const BodySink& sink = {});

struct RetryPolicy {
  int max_retries = 3;
  std::chrono::milliseconds initial_delay{500};
  std::chrono::milliseconds max_delay{30'000};
};

// The wait before retry number `retry` (0 for the first retry): exponential backoff with jitter,
// uniformly in [d/2, d] where d = min(max_delay, initial_delay * 2^retry).
std::chrono::milliseconds backoff_delay(const RetryPolicy& policy, int retry);

// Who is calling, for messages: the config's name, and a secret never to appear in them.
struct CallSite {
  std::string_view config_name;
  std::string_view secret;
};

// POSTs with retries: on 429 (waiting what Retry-After asks, unless that is longer than
// max_delay), 5xx, timeouts and connection failures, with backoff; never on other 4xx, nor
// once a streamed body has started reaching the sink. Returns the 2xx response.
// Throws agentd::Error(model_error) naming the config, the HTTP status and the endpoint's own
// message, with the secret replaced by "***"; retryable() tells whether a later try may succeed.
HttpResponse post_with_retries(const CallSite& site, const RetryPolicy& policy, const HttpRequest& request,
                               const BodySink& sink = {});

// [[noreturn]] helper for the model clients: throws Error(model_error) "model 'name': message",
// with the secret redacted.
[[noreturn]] void throw_model_error(const CallSite& site, std::string message, bool retryable = false);

// The endpoint's own error message from an error body: error.message, error, message, detail
// (JSON), or the start of the text.
std::string endpoint_error_message(std::string_view body);

// Splits a byte stream into lines ("\n" or "\r\n"); the last line needs no terminator at finish().
class LineSplitter {
 public:
  template <typename F>
  void feed(std::string_view bytes, F&& on_line) {
    buffer_.append(bytes);
    std::size_t start = 0;
    for (std::size_t nl; (nl = buffer_.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string_view line(buffer_.data() + start, nl - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      on_line(line);
    }
    buffer_.erase(0, start);
  }
  template <typename F>
  void finish(F&& on_line) {
    if (!buffer_.empty()) {
      std::string rest = std::move(buffer_);
      buffer_.clear();
      if (!rest.empty() && rest.back() == '\r') rest.pop_back();
      on_line(std::string_view(rest));
    }
  }

 private:
  std::string buffer_;
};

// Decodes server-sent events: calls on_event(data) for each event with data (the "data:" lines
// joined by "\n"); ignores comments, ids and retry fields; event names are passed along.
class SseDecoder {
 public:
  using Handler = std::function<void(std::string_view event, std::string_view data)>;
  explicit SseDecoder(Handler on_event) : on_event_(std::move(on_event)) {}

  void feed(std::string_view bytes);
  // Dispatches an event left without its closing blank line (a server that closed early).
  void finish();

 private:
  void on_line(std::string_view line);
  void dispatch();

  Handler on_event_;
  LineSplitter lines_;
  std::string event_;
  std::string data_;
  bool has_data_ = false;
};

}  // namespace agentd::detail
