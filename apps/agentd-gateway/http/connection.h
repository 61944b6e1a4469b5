// One HTTP/1.1 client connection (Boost.Beast), and the Exchange a handler answers a request
// through.
//
// Threads: the io_context runs on a few threads; each connection has its own strand, and every
// step of it (reads, writes, its write queue) runs there, so a connection needs no lock. A
// handler may answer from any thread (the client library's loop thread included): Exchange's
// methods post to the connection's strand.
//
// Per connection: on a TLS listener first the TLS handshake (within the request deadline; a
// client that sends plaintext HTTP there is answered 400 in plaintext, saying to use https),
// then read a request (header, then body; `Expect: 100-continue` answered), hand it to the
// handler, write what the handler answers (one response, or a chunked stream of pieces), then
// read the next request on the same connection (keep-alive) or close it. Plain and TLS
// connections run the same code: only the stream under it differs. Limits: header and body size
// (431 / 413), a deadline for receiving a whole request (slow clients are closed) and one for
// each write (a client that stops reading is closed). Each request answered is logged as one
// JSON line on stderr (method, path, status, time, peer, trace id; never a header's value).
// Each request has a trace id (trace_context.h), answered in `X-Trace-Id`.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace gateway::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using Request = bhttp::request<bhttp::string_body>;
using Status = bhttp::status;

struct Limits {
  std::size_t max_header_bytes = 16 * 1024;
  std::size_t max_body_bytes = 4 * 1024 * 1024;
  std::chrono::seconds request_timeout{30};
  std::chrono::seconds write_timeout{30};
};

// An error body in OpenAI's shape: {"error": {"message", "type", "param", "code"}} (param null; code null
// when empty).
std::string error_body(const std::string& message, const std::string& type, const std::string& code = {});

class Connection;
struct RequestLog;

// One request and its answer: respond() once, or start_stream(), send() pieces, end_stream().
// Any thread. An Exchange dropped without an answer answers 500 (a stream left open is ended),
// so a connection never hangs on a forgotten request.
class Exchange {
 public:
  // seq: the exchange's number on its connection (1, 2, ...).
  Exchange(std::shared_ptr<Connection> conn, Request req, std::uint64_t seq);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  const Request& request() const { return req_; }
  // The request's trace id: its traceparent's trace-id, else a new one (trace_context.h). Every
  // answer carries it in `X-Trace-Id`; handlers pass it on to the agent call.
  const std::string& trace_id() const { return trace_id_; }
  // The connection's strand: continuations that touch this exchange's state run here.
  asio::any_io_executor executor() const;

  // A header every answer to this request carries (A2A-Version, ...): set before answering.
  void add_header(std::string name, std::string value) {
    extra_headers_.emplace_back(std::move(name), std::move(value));
  }

  void respond(Status status, std::string content_type, std::string body);
  void respond_json(Status status, std::string body) { respond(status, "application/json", std::move(body)); }
  // A chunked response whose body follows in pieces (server-sent events: text/event-stream).
  void start_stream(Status status, std::string content_type);
  void send(std::string piece);
  void end_stream();
  // True once the client has gone (a write failed or the connection closed).
  bool client_gone() const;
  // Pieces of this stream sent and not yet written to the client (a reader that falls behind).
  std::size_t unwritten() const;
  // True when the request came over TLS (the client reached the gateway with https://).
  bool secure() const;

 private:
  std::shared_ptr<Connection> conn_;
  Request req_;
  std::uint64_t seq_;
  std::string trace_id_;
  std::atomic<int> state_{0};  // 0 nothing sent, 1 streaming, 2 done
  std::shared_ptr<RequestLog> log_;
  std::vector<std::pair<std::string, std::string>> extra_headers_;
};

using Handler = std::function<void(std::shared_ptr<Exchange>)>;

// Set once the io_context has stopped for good (main, before it tears down): exchanges dropped
// from then on (with the handlers the io_context destroys) no longer try to answer.
void set_shutting_down();

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // open_count: the listener's count of open connections (this one included), decremented when
  // this connection goes, which may be after the listener has gone (at exit). tls: the
  // listener's TLS context (null: plaintext HTTP).
  Connection(asio::ip::tcp::socket socket, std::shared_ptr<asio::ssl::context> tls, const Limits& limits,
             std::shared_ptr<const Handler> handler, std::shared_ptr<std::atomic<std::size_t>> open_count);
  ~Connection();
  void start();

 private:
  friend class Exchange;
  struct Item;
  struct Stream;  // the TCP stream, or the TLS stream over it

  // TLS listeners only: plaintext or a TLS handshake? Then the handshake.
  void detect_tls();
  void on_detected(beast::error_code ec, bool tls);
  void on_handshake(beast::error_code ec, std::size_t used);

  void read_request();
  void on_header(beast::error_code ec);
  void read_body();
  void on_read(beast::error_code ec);
  void fail_request(beast::error_code ec);
  // Answers an error (OpenAI's shape) and closes the connection once it is written.
  void refuse(Status status, const std::string& message, const std::string& code, const Request* req);

  // Strand only.
  void enqueue(Item item);
  void write_next();
  void on_written(beast::error_code ec, bool ends_exchange, bool close_after);
  // graceful: a TLS connection first sends its close_notify (bounded by the write timeout).
  void close(bool graceful = false);
  void drop();

  std::unique_ptr<Stream> stream_;
  asio::any_io_executor executor_;  // the connection's strand
  std::shared_ptr<asio::ssl::context> tls_;
  bool plaintext_on_tls_ = false;  // a plaintext client of a TLS listener: its request is refused
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  const Limits limits_;
  std::shared_ptr<const Handler> handler_;
  std::shared_ptr<std::atomic<std::size_t>> open_count_;
  std::deque<Item> queue_;
  bool writing_ = false;
  bool keep_alive_ = true;
  std::uint64_t exchanges_ = 0;  // exchanges started on this connection
  std::uint64_t streaming_ = 0;  // the exchange whose stream is open (0: none)
  std::atomic<bool> gone_{false};
  std::atomic<std::size_t> unwritten_{0};  // chunks sent (Exchange::send) and not yet written or dropped
  std::string peer_;                       // "address:port" of the client, for the request log
};

}  // namespace gateway::http
