#include "http_load.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace agentd::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

using Request = http::request<http::string_body>;
using Parser = http::response_parser<http::string_body>;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kBodyLimit = 64ull << 20;  // a long stream's whole body

Request make_request(http::verb verb, const std::string& host, const std::string& target, std::string body) {
  Request req{verb, target, 11};
  req.set(http::field::host, host);
  req.set(http::field::user_agent, "agentd-bench");
  if (verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
  }
  req.keep_alive(true);
  req.prepare_payload();
  return req;
}

tcp::endpoint resolve(asio::io_context& io, const std::string& host, std::uint16_t port) {
  tcp::resolver resolver(io);
  beast::error_code ec;
  auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec || results.empty())
    throw std::runtime_error(fmt::format("cannot resolve {}: {}", host, ec ? ec.message() : "no address"));
  return results.begin()->endpoint();
}

}  // namespace

// ---- HttpConnection ----

struct HttpConnection::Impl {
  asio::io_context io{1};
  tcp::socket socket{io};
  beast::flat_buffer buffer;
  std::string host;

  HttpAnswer exchange(Request req) {
    beast::error_code ec;
    http::write(socket, req, ec);
    if (ec) throw std::runtime_error(fmt::format("HTTP request to {} failed: {}", host, ec.message()));
    Parser parser;
    parser.body_limit(kBodyLimit);
    http::read(socket, buffer, parser, ec);
    if (ec) throw std::runtime_error(fmt::format("HTTP answer from {} failed: {}", host, ec.message()));
    return HttpAnswer{parser.get().result_int(), std::move(parser.get().body())};
  }
};

HttpConnection::HttpConnection(const std::string& host, std::uint16_t port)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = fmt::format("{}:{}", host, port);
  beast::error_code ec;
  impl_->socket.connect(resolve(impl_->io, host, port), ec);
  if (ec) throw std::runtime_error(fmt::format("cannot connect to {}: {}", impl_->host, ec.message()));
  impl_->socket.set_option(tcp::no_delay(true));
}

HttpConnection::~HttpConnection() {
  beast::error_code ignored;
  impl_->socket.shutdown(tcp::socket::shutdown_both, ignored);
  impl_->socket.close(ignored);
}

HttpAnswer HttpConnection::post_json(const std::string& target, const std::string& body) {
  return impl_->exchange(make_request(http::verb::post, impl_->host, target, body));
}

HttpAnswer HttpConnection::get(const std::string& target) {
  return impl_->exchange(make_request(http::verb::get, impl_->host, target, {}));
}

// ---- run_load ----

namespace {

// The asynchronous clients of one run_load(), on one io_context run by the caller's thread: no
// locks, every handler runs on that thread.
class Load {
 public:
  explicit Load(const LoadPlan& plan) : plan_(plan), deadline_(io_) {}

  LoadResult run() {
    const tcp::endpoint at = resolve(io_, plan_.host, plan_.port);
    host_ = fmt::format("{}:{}", plan_.host, plan_.port);
    const std::size_t n = std::max<std::size_t>(1, std::min(plan_.connections, plan_.requests));
    deadline_.expires_after(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(plan_.timeout_seconds)));
    deadline_.async_wait([this](beast::error_code ec) {
      if (!ec) time_out();
    });
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < n; ++i) {
      conns_.push_back(std::make_unique<Conn>(io_));
      Conn* c = conns_.back().get();
      c->socket.async_connect(at, [this, c](beast::error_code ec) { on_connected(*c, ec); });
    }
    io_.run();
    if (!connect_error_.empty()) throw std::runtime_error(connect_error_);
    result_.connect_seconds = std::chrono::duration<double>(started_ - t0).count();
    result_.seconds = std::chrono::duration<double>(ended_ - started_).count();
    return result_;
  }

 private:
  struct Conn {
    explicit Conn(asio::io_context& io) : socket(io) {}
    tcp::socket socket;
    beast::flat_buffer buffer;
    Request req;
    std::optional<Parser> parser;
    std::size_t index = 0;
    bool open = true;
    bool headed = false;  // the answer's header is in, its body not yet
  };

  void on_connected(Conn& c, beast::error_code ec) {
    if (finished_) return;
    if (ec) {
      if (connect_error_.empty())
        connect_error_ =
            fmt::format("cannot connect to {}: {} (after {} connections)", host_, ec.message(), connected_);
      return finish();
    }
    c.socket.set_option(tcp::no_delay(true));
    if (++connected_ < conns_.size()) return;
    // Every connection is open: the clock starts, every connection sends its first request.
    started_ = Clock::now();
    alive_ = conns_.size();
    for (auto& each : conns_) send_next(*each);
  }

  void send_next(Conn& c) {
    if (finished_) return;
    if (next_ >= plan_.requests) return close(c);
    c.index = next_++;
    c.req = make_request(http::verb::post, host_, plan_.target, plan_.body(c.index));
    http::async_write(c.socket, c.req, [this, &c](beast::error_code ec, std::size_t) {
      if (finished_) return;
      if (ec) return fail(c, "writing the request: " + ec.message());
      c.parser.emplace();
      c.parser->body_limit(kBodyLimit);
      http::async_read_header(c.socket, c.buffer, *c.parser,
                              [this, &c](beast::error_code hec, std::size_t) { on_header(c, hec); });
    });
  }

  void on_header(Conn& c, beast::error_code ec) {
    if (finished_) return;
    if (ec) return fail(c, "reading the answer's header: " + ec.message());
    c.headed = true;
    result_.most_open = std::max(result_.most_open, ++open_now_);
    http::async_read(c.socket, c.buffer, *c.parser,
                     [this, &c](beast::error_code bec, std::size_t) { on_body(c, bec); });
  }

  void on_body(Conn& c, beast::error_code ec) {
    if (finished_) return;
    c.headed = false;
    --open_now_;
    if (ec) return fail(c, "reading the answer's body: " + ec.message());
    const bool keep_alive = c.parser->get().keep_alive();
    HttpAnswer answer{c.parser->get().result_int(), std::move(c.parser->get().body())};
    c.parser.reset();
    const std::string wrong = plan_.check(c.index, answer);
    if (wrong.empty()) {
      ++result_.ok;
    } else {
      note_failure(fmt::format("request {}: {}", c.index, wrong));
    }
    if (++done_ == plan_.requests) return finish();
    if (!keep_alive) return close(c);  // the others take over what is left
    send_next(c);
  }

  void note_failure(const std::string& what) {
    ++result_.failed;
    if (result_.first_failure.empty()) result_.first_failure = what;
  }

  void fail(Conn& c, const std::string& what) {
    if (c.headed) {
      c.headed = false;
      --open_now_;
    }
    note_failure(fmt::format("request {}: {}", c.index, what));
    ++done_;
    close(c);
    if (done_ >= plan_.requests) finish();
  }

  // A connection with nothing more to send (or broken) closes; when none is left with requests
  // unsent, those count as failed.
  void close(Conn& c) {
    if (!c.open) return;
    c.open = false;
    beast::error_code ignored;
    c.socket.shutdown(tcp::socket::shutdown_both, ignored);
    c.socket.close(ignored);
    if (--alive_ == 0 && done_ < plan_.requests) {
      const std::size_t unsent = plan_.requests - next_;
      if (unsent > 0)
        note_failure(fmt::format("{} requests never sent: every connection was closed", unsent));
      result_.failed += unsent > 0 ? unsent - 1 : 0;
      finish();
    }
  }

  void time_out() {
    if (finished_) return;
    const std::size_t missing = plan_.requests - done_;
    note_failure(fmt::format("{} requests unanswered after {} s", missing, plan_.timeout_seconds));
    result_.failed += missing - 1;
    finish();
  }

  void finish() {
    if (finished_) return;
    finished_ = true;
    ended_ = Clock::now();
    if (started_ == Clock::time_point{}) started_ = ended_;
    deadline_.cancel();
    for (auto& c : conns_) {
      beast::error_code ignored;
      c->open = false;
      c->socket.shutdown(tcp::socket::shutdown_both, ignored);
      c->socket.close(ignored);
    }
  }

  const LoadPlan& plan_;
  asio::io_context io_{1};  // before the sockets: destroyed after them
  asio::steady_timer deadline_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::string host_;
  std::string connect_error_;
  std::size_t connected_ = 0;
  std::size_t alive_ = 0;
  std::size_t next_ = 0;  // the next request to send
  std::size_t done_ = 0;  // requests answered or failed
  std::size_t open_now_ = 0;
  bool finished_ = false;
  Clock::time_point started_{}, ended_{};
  LoadResult result_;
};

}  // namespace

LoadResult run_load(const LoadPlan& plan) {
  if (!plan.body || !plan.check) throw std::invalid_argument("run_load: the plan needs body and check");
  if (plan.requests == 0) return {};
  Load load(plan);
  return load.run();
}

}  // namespace agentd::bench
