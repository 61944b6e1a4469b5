#include "http/connection.h"

#include "http/metrics.h"
#include "http/trace_context.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>
#include <variant>

namespace gateway::http {

std::string error_body(const std::string& message, const std::string& type, const std::string& code) {
  nlohmann::json e{{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!code.empty()) e["code"] = code;
  return nlohmann::json{{"error", e}}.dump();
}

// What the write queue holds: a whole response, the header of a chunked one, one chunk of its
// body, or its last chunk.
struct Connection::Item {
  enum Kind { full, header, chunk, last } kind = full;
  std::shared_ptr<bhttp::response<bhttp::string_body>> response;
  std::shared_ptr<bhttp::response<bhttp::empty_body>> head;
  std::shared_ptr<bhttp::response_serializer<bhttp::empty_body>> serializer;
  std::shared_ptr<std::string> data;
  bool close_after = false;         // the exchange ends the connection (Connection: close)
  std::shared_ptr<RequestLog> log;  // on the item that ends an exchange: logged once written
  std::uint64_t exchange = 0;       // which exchange of the connection it belongs to
};

// One JSON line per request on stderr, once its answer is written (never a header's value, nor
// the query string).
struct RequestLog {
  std::string method;
  std::string path;
  std::string trace_id;  // "" for a request that could not be read
  unsigned status = 0;
  std::size_t bytes_in = 0;
  bool stream = false;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  void write(const std::string& peer, bool ok) const {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const auto ts = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    nlohmann::json line{{"ts_ms", ts},          {"peer", peer},     {"method", method},
                        {"path", path},         {"status", status}, {"ms", std::round(ms * 1000) / 1000},
                        {"bytes_in", bytes_in}, {"stream", stream}, {"written", ok}};
    if (!trace_id.empty()) line["trace_id"] = trace_id;
    metrics().request(path, status, ms / 1000);
    const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::fwrite(text.data(), 1, text.size(), stderr);
  }
};

// ---- Exchange ----

Exchange::Exchange(std::shared_ptr<Connection> conn, Request req, std::uint64_t seq)
    : conn_(std::move(conn)),
      req_(std::move(req)),
      seq_(seq),
      trace_id_(request_trace_id(req_["traceparent"])),
      log_(std::make_shared<RequestLog>()) {
  log_->method = std::string(req_.method_string());
  log_->trace_id = trace_id_;
  const std::string_view target = req_.target();
  log_->path = std::string(target.substr(0, target.find('?')));
  log_->bytes_in = req_.body().size();
}

namespace {
std::atomic<bool> shutting_down{false};
}  // namespace

void set_shutting_down() { shutting_down.store(true); }

Exchange::~Exchange() {
  if (shutting_down.load()) return;
  const int s = state_.load();
  if (s == 0) {
    respond(Status::internal_server_error, "application/json",
            error_body("the gateway dropped this request without an answer", "server_error"));
  } else if (s == 1) {
    end_stream();
  }
}

asio::any_io_executor Exchange::executor() const { return conn_->executor_; }

bool Exchange::client_gone() const { return conn_->gone_.load(); }

std::size_t Exchange::unwritten() const { return conn_->unwritten_.load(); }

bool Exchange::secure() const { return conn_->tls_ != nullptr; }

void Exchange::respond(Status status, std::string content_type, std::string body) {
  int expected = 0;
  if (!state_.compare_exchange_strong(expected, 2)) return;  // answered already
  auto res = std::make_shared<bhttp::response<bhttp::string_body>>(status, req_.version());
  res->set(bhttp::field::server, "agentd-gateway");
  res->set(bhttp::field::content_type, content_type);
  res->set("X-Trace-Id", trace_id_);
  for (const auto& [name, value] : extra_headers_) res->set(name, value);
  res->body() = std::move(body);
  res->keep_alive(req_.keep_alive());
  res->prepare_payload();
  Connection::Item item;
  item.exchange = seq_;
  item.kind = Connection::Item::full;
  log_->status = static_cast<unsigned>(status);
  item.log = log_;
  item.response = std::move(res);
  item.close_after = !req_.keep_alive();
  asio::dispatch(conn_->executor_,
                 [c = conn_, item = std::move(item)]() mutable { c->enqueue(std::move(item)); });
}

void Exchange::start_stream(Status status, std::string content_type) {
  int expected = 0;
  if (!state_.compare_exchange_strong(expected, 1)) return;
  auto head = std::make_shared<bhttp::response<bhttp::empty_body>>(status, req_.version());
  head->set(bhttp::field::server, "agentd-gateway");
  head->set(bhttp::field::content_type, content_type);
  head->set(bhttp::field::cache_control, "no-cache");
  head->set("X-Trace-Id", trace_id_);
  for (const auto& [name, value] : extra_headers_) head->set(name, value);
  head->keep_alive(req_.keep_alive());
  head->chunked(true);
  log_->status = static_cast<unsigned>(status);
  log_->stream = true;
  Connection::Item item;
  item.exchange = seq_;
  item.kind = Connection::Item::header;
  item.head = std::move(head);
  asio::dispatch(conn_->executor_,
                 [c = conn_, item = std::move(item)]() mutable { c->enqueue(std::move(item)); });
}

void Exchange::send(std::string piece) {
  if (state_.load() != 1 || piece.empty()) return;
  Connection::Item item;
  item.exchange = seq_;
  item.kind = Connection::Item::chunk;
  item.data = std::make_shared<std::string>(std::move(piece));
  ++conn_->unwritten_;
  asio::dispatch(conn_->executor_,
                 [c = conn_, item = std::move(item)]() mutable { c->enqueue(std::move(item)); });
}

void Exchange::end_stream() {
  int expected = 1;
  if (!state_.compare_exchange_strong(expected, 2)) return;
  Connection::Item item;
  item.exchange = seq_;
  item.kind = Connection::Item::last;
  item.log = log_;
  item.close_after = !req_.keep_alive();
  asio::dispatch(conn_->executor_,
                 [c = conn_, item = std::move(item)]() mutable { c->enqueue(std::move(item)); });
}

// ---- Connection ----

// The stream a connection reads and writes: TCP, or TLS over TCP once a TLS client has been told
// from a plaintext one. Every operation goes through visit(), so plain and TLS connections run
// the same code; deadlines are on the TCP stream under both (beast::tcp_stream's timeouts).
struct Connection::Stream {
  using Tls = beast::ssl_stream<beast::tcp_stream>;
  std::variant<beast::tcp_stream, Tls> s;

  explicit Stream(asio::ip::tcp::socket socket)
      : s(std::in_place_type<beast::tcp_stream>, std::move(socket)) {}
  beast::tcp_stream& tcp() {
    return std::visit([](auto& st) -> beast::tcp_stream& { return beast::get_lowest_layer(st); }, s);
  }
  Tls* tls() { return std::get_if<Tls>(&s); }
  template <class F>
  void visit(F&& f) {
    std::visit(std::forward<F>(f), s);
  }
};

Connection::Connection(asio::ip::tcp::socket socket, std::shared_ptr<asio::ssl::context> tls,
                       const Limits& limits, std::shared_ptr<const Handler> handler,
                       std::shared_ptr<std::atomic<std::size_t>> open_count)
    : executor_(socket.get_executor()),
      tls_(std::move(tls)),
      limits_(limits),
      handler_(std::move(handler)),
      open_count_(std::move(open_count)) {
  beast::error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  if (!ec) peer_ = remote.address().to_string() + ":" + std::to_string(remote.port());
  stream_ = std::make_unique<Stream>(std::move(socket));
  metrics().connection_opened();
}

Connection::~Connection() {
  open_count_->fetch_sub(1);
  metrics().connection_closed();
}

void Connection::start() {
  asio::dispatch(executor_, [self = shared_from_this()] {
    if (self->tls_)
      self->detect_tls();
    else
      self->read_request();
  });
}

void Connection::detect_tls() {
  // The handshake counts as part of the first request: a client that connects and sends nothing,
  // or stalls in the handshake, is closed at the request deadline.
  stream_->tcp().expires_after(limits_.request_timeout);
  beast::async_detect_ssl(
      stream_->tcp(), buffer_,
      [self = shared_from_this()](beast::error_code ec, bool tls) { self->on_detected(ec, tls); });
}

void Connection::on_detected(beast::error_code ec, bool tls) {
  if (ec) return close();  // gone, or silent until the deadline
  if (!tls) {
    // Plaintext HTTP on a TLS listener: read the request as usual and answer it in plaintext.
    plaintext_on_tls_ = true;
    return read_request();
  }
  beast::tcp_stream tcp = std::move(std::get<beast::tcp_stream>(stream_->s));
  stream_->s.emplace<Stream::Tls>(std::move(tcp), *tls_);
  // The bytes read to tell TLS from plaintext are the start of the handshake.
  stream_->tls()->async_handshake(asio::ssl::stream_base::server, buffer_.data(),
                                  [self = shared_from_this()](beast::error_code hec, std::size_t used) {
                                    self->on_handshake(hec, used);
                                  });
}

void Connection::on_handshake(beast::error_code ec, std::size_t used) {
  if (ec) {
    // Not trusted by the client, no common protocol version or cipher, or too slow: the client
    // has its own side of the story; nothing can be answered over a failed handshake.
    metrics().tls_handshake_failed();
    return close();
  }
  buffer_.consume(used);
  read_request();
}

void Connection::read_request() {
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
  parser_->body_limit(limits_.max_body_bytes);
  // One deadline for the whole request, set once: a client that trickles bytes (slowloris) or
  // idles on a keep-alive connection is closed when it passes.
  stream_->tcp().expires_after(limits_.request_timeout);
  stream_->visit([this](auto& s) {
    bhttp::async_read_header(
        s, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  });
}

void Connection::on_header(beast::error_code ec) {
  if (ec) return fail_request(ec);
  const auto& req = parser_->get();
  if (beast::iequals(req[bhttp::field::expect], "100-continue") && !parser_->is_done() &&
      !plaintext_on_tls_) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    stream_->visit([this](auto& s) {
      asio::async_write(s, asio::buffer(kContinue),
                        [self = shared_from_this()](beast::error_code wec, std::size_t) {
                          if (wec) return self->close();
                          self->read_body();
                        });
    });
    return;
  }
  read_body();
}

void Connection::read_body() {
  stream_->visit([this](auto& s) {
    bhttp::async_read(s, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  });
}

void Connection::on_read(beast::error_code ec) {
  if (ec) return fail_request(ec);
  stream_->tcp().expires_never();  // the handler may take long (an agent's reply); writes set their own
  Request req = parser_->release();
  parser_.reset();
  if (plaintext_on_tls_) {
    const std::string_view host = req[bhttp::field::host];
    return refuse(Status::bad_request,
                  "this port serves HTTPS only: send the request over TLS (https://" +
                      std::string(host.empty() ? "HOST:PORT" : host) + "/)",
                  "https_required", &req);
  }
  keep_alive_ = req.keep_alive();
  auto exchange = std::make_shared<Exchange>(shared_from_this(), std::move(req), ++exchanges_);
  try {
    (*handler_)(std::move(exchange));
  } catch (...) {
    // The exchange answers 500 when its last reference goes; nothing else to do here.
  }
}

void Connection::refuse(Status status, const std::string& message, const std::string& code,
                        const Request* req) {
  Item item;
  item.kind = Item::full;
  item.response = std::make_shared<bhttp::response<bhttp::string_body>>(status, 11);
  item.response->set(bhttp::field::server, "agentd-gateway");
  item.response->set(bhttp::field::content_type, "application/json");
  item.response->body() = error_body(message, "invalid_request_error", code);
  item.response->keep_alive(false);
  item.response->prepare_payload();
  item.close_after = true;
  item.log = std::make_shared<RequestLog>();
  item.log->method = req ? std::string(req->method_string()) : "-";  // "-": the request could not be read
  item.log->path = req ? std::string(req->target().substr(0, req->target().find('?'))) : "-";
  item.log->bytes_in = req ? req->body().size() : 0;
  item.log->status = static_cast<unsigned>(status);
  enqueue(std::move(item));
}

void Connection::fail_request(beast::error_code ec) {
  if (ec == bhttp::error::end_of_stream || ec == asio::error::eof)
    return close(true);  // the client closed its side between requests: say goodbye
  if (ec == beast::error::timeout ||
      ec.category() != bhttp::make_error_code(bhttp::error::bad_method).category())
    return close();  // the client went, idled too long or sent too slowly: nothing to answer
  if (ec == bhttp::error::body_limit)
    return refuse(
        Status::payload_too_large,
        "the request body is larger than --max-body-bytes " + std::to_string(limits_.max_body_bytes),
        "body_too_large", nullptr);
  if (ec == bhttp::error::header_limit)
    return refuse(
        Status::request_header_fields_too_large,
        "the request header is larger than --max-header-bytes " + std::to_string(limits_.max_header_bytes),
        "header_too_large", nullptr);
  refuse(Status::bad_request, "malformed HTTP request: " + ec.message(), "bad_http", nullptr);
}

void Connection::enqueue(Item item) {
  // A chunk counts as unwritten until it is written (on_written's caller) or dropped here.
  struct Dropped {
    Connection* c;
    bool chunk;
    bool kept = false;
    ~Dropped() {
      if (chunk && !kept) --c->unwritten_;
    }
  } dropped{this, item.kind == Item::chunk};
  if (gone_.load()) return;
  // A piece of a stream that has ended (sent from another thread while the stream was ended,
  // e.g. at --reply-timeout) must not reach the wire after its last chunk, nor inside the next
  // exchange's answer.
  if (item.kind == Item::header) {
    streaming_ = item.exchange;
    metrics().stream_opened();
  }
  if (item.kind == Item::chunk || item.kind == Item::last) {
    if (item.exchange != streaming_) return;
    if (item.kind == Item::last) {
      streaming_ = 0;
      metrics().stream_closed();
    }
  }
  dropped.kept = true;
  queue_.push_back(std::move(item));
  if (!writing_) write_next();
}

void Connection::write_next() {
  if (queue_.empty() || gone_.load()) {
    writing_ = false;
    return;
  }
  writing_ = true;
  auto item = std::make_shared<Item>(std::move(queue_.front()));
  queue_.pop_front();
  const bool ends = item->kind == Item::full || item->kind == Item::last;
  auto done = [self = shared_from_this(), item, ends](beast::error_code ec, std::size_t) {
    if (item->kind == Item::chunk) --self->unwritten_;
    if (item->log) item->log->write(self->peer_, !ec);
    self->on_written(ec, ends, item->close_after);
  };
  stream_->tcp().expires_after(limits_.write_timeout);
  stream_->visit([&item, &done](auto& s) {
    switch (item->kind) {
      case Item::full:
        bhttp::async_write(s, *item->response, std::move(done));
        break;
      case Item::header:
        item->serializer = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*item->head);
        bhttp::async_write_header(s, *item->serializer, std::move(done));
        break;
      case Item::chunk:
        asio::async_write(s, bhttp::make_chunk(asio::buffer(*item->data)), std::move(done));
        break;
      case Item::last:
        asio::async_write(s, bhttp::make_chunk_last(), std::move(done));
        break;
    }
  });
}

void Connection::on_written(beast::error_code ec, bool ends_exchange, bool close_after) {
  if (ec) return close();
  if (ends_exchange) {
    if (close_after || !keep_alive_) return close(true);
    read_request();
  } else {
    stream_->tcp().expires_never();  // between the pieces of a stream the agent takes its time
  }
  write_next();
}

void Connection::close(bool graceful) {
  if (gone_.exchange(true)) return;
  if (streaming_ != 0) metrics().stream_closed();  // the client went mid-stream
  streaming_ = 0;
  queue_.clear();
  writing_ = false;
  if (auto* tls = stream_->tls(); tls && graceful) {
    // TLS's own end of the conversation (close_notify), so that a client reading to the end
    // sees a clean end rather than a truncated stream; then the socket goes.
    stream_->tcp().expires_after(limits_.write_timeout);
    tls->async_shutdown([self = shared_from_this()](beast::error_code) { self->drop(); });
    return;
  }
  drop();
}

void Connection::drop() {
  beast::error_code ignored;
  stream_->tcp().socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  stream_->tcp().close();
}

}  // namespace gateway::http
