// MetricsEndpoint over real loopback connections: GET /metrics answers 200 with the exposition
// text and closes; other paths and methods get 404 and malformed requests 400, and the endpoint
// keeps serving; a client that hangs is dropped after kRequestTimeout without holding up others;
// destroying the endpoint closes its port and its open connections.
#include "metrics.h"

#include <catch2/catch.hpp>
#include <kj/async-io.h>
#include <kj/timer.h>

#include <cstdint>
#include <memory>
#include <string>

using agentd::detail::MetricsEndpoint;
using agentd::detail::render_metrics;
using agentd::detail::ServerStats;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

constexpr const char* kGet = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n";

ServerStats sample() {
  ServerStats s;
  s.agents = 3;
  s.calls_ok = 7;
  s.calls_error = 1;
  s.calls_by_class["EchoAgent"] = {7, 1};
  s.workers = 2;
  return s;
}

// An endpoint on 127.0.0.1 (a free port) serving render_metrics(s); s and timer outlive it.
std::unique_ptr<MetricsEndpoint> start(kj::AsyncIoContext& io, kj::Timer& timer, const ServerStats& s) {
  auto addr = io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io.waitScope);
  return std::make_unique<MetricsEndpoint>(addr->listen(), timer, [&s] { return render_metrics(s); });
}

kj::Own<kj::AsyncIoStream> connect(kj::AsyncIoContext& io, std::uint16_t port) {
  auto addr = io.provider->getNetwork().parseAddress("127.0.0.1", port).wait(io.waitScope);
  return addr->connect().wait(io.waitScope);
}

// Sends request on a new connection, in two writes (the endpoint must wait for the whole head);
// returns everything the endpoint sent until it closed. half_close ends the client's side after
// the request, for an endpoint whose timer does not run by itself.
std::string exchange(kj::AsyncIoContext& io, std::uint16_t port, const std::string& request,
                     bool half_close = false) {
  auto conn = connect(io, port);
  auto half = request.size() / 2;
  conn->write(request.data(), half).wait(io.waitScope);
  conn->write(request.data() + half, request.size() - half).wait(io.waitScope);
  if (half_close) conn->shutdownWrite();
  auto text = io.provider->getTimer().timeoutAfter(30 * kj::SECONDS, conn->readAllText()).wait(io.waitScope);
  return std::string(text.cStr(), text.size());
}

std::string body_of(const std::string& response) {
  auto end = response.find("\r\n\r\n");
  return end == std::string::npos ? std::string{} : response.substr(end + 4);
}

}  // namespace

TEST_CASE("GET /metrics answers 200 with the exposition text, then closes", "[metrics]") {
  auto io = kj::setupAsyncIo();
  auto snapshot = sample();
  auto endpoint = start(io, io.provider->getTimer(), snapshot);
  auto response = exchange(io, endpoint->port(), kGet);  // returns once the endpoint closed
  CHECK_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  CHECK_THAT(response, Contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  CHECK_THAT(response, Contains("\r\nConnection: close\r\n"));
  CHECK(body_of(response) == render_metrics(snapshot));
  CHECK_THAT(body_of(response), Contains("agentd_calls_total{outcome=\"ok\"} 7\n"));
  // A query string does not change the path; the snapshot is read at each request.
  snapshot.calls_ok = 8;
  auto again = exchange(io, endpoint->port(), "GET /metrics?x=1 HTTP/1.1\r\nHost: h\r\n\r\n");
  CHECK_THAT(again, StartsWith("HTTP/1.1 200 OK\r\n"));
  CHECK_THAT(body_of(again), Contains("agentd_calls_total{outcome=\"ok\"} 8\n"));
}

TEST_CASE("anything but GET /metrics answers 404", "[metrics]") {
  auto io = kj::setupAsyncIo();
  auto snapshot = sample();
  auto endpoint = start(io, io.provider->getTimer(), snapshot);
  auto port = endpoint->port();
  auto root = exchange(io, port, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  CHECK_THAT(root, StartsWith("HTTP/1.1 404 Not Found\r\n"));
  CHECK_THAT(root, Contains("\r\nContent-Type: text/plain; charset=utf-8\r\n"));
  CHECK(body_of(root) == "not found: metrics are at GET /metrics\n");
  CHECK_THAT(exchange(io, port, "GET /metrics/x HTTP/1.1\r\nHost: h\r\n\r\n"),
             StartsWith("HTTP/1.1 404 Not Found\r\n"));
  // Other methods too, a request body (unread) included.
  CHECK_THAT(exchange(io, port, "POST /metrics HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"),
             StartsWith("HTTP/1.1 404 Not Found\r\n"));
  CHECK_THAT(exchange(io, port, "PUT /metrics HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"),
             StartsWith("HTTP/1.1 404 Not Found\r\n"));
  CHECK_THAT(exchange(io, port, kGet), StartsWith("HTTP/1.1 200 OK\r\n"));
}

TEST_CASE("a malformed request gets a 4xx/5xx from kj-http and the endpoint keeps serving", "[metrics]") {
  auto io = kj::setupAsyncIo();
  auto snapshot = sample();
  auto endpoint = start(io, io.provider->getTimer(), snapshot);
  auto port = endpoint->port();
  auto bad_header = exchange(io, port, "GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n");
  CHECK_THAT(bad_header, StartsWith("HTTP/1.1 400 Bad Request\r\n"));
  CHECK_THAT(bad_header, Contains("\r\nConnection: close\r\n"));
  CHECK_THAT(exchange(io, port, "garbage\r\n\r\n"),
             StartsWith("HTTP/1.1 501 Not Implemented\r\n"));  // no such method
  CHECK_THAT(exchange(io, port, "\x01\x02\xff\r\n\r\n"), StartsWith("HTTP/1.1 501 Not Implemented\r\n"));
  // kj-http answers a bad Content-Length as an application error.
  CHECK_THAT(exchange(io, port, "GET /metrics HTTP/1.1\r\nContent-Length: nope\r\n\r\n"),
             StartsWith("HTTP/1.1 500 Internal Server Error\r\n"));
  CHECK_THAT(exchange(io, port, kGet), StartsWith("HTTP/1.1 200 OK\r\n"));
}

TEST_CASE("a request head too large for kj-http closes the connection without a response", "[metrics]") {
  auto io = kj::setupAsyncIo();
  auto snapshot = sample();
  auto endpoint = start(io, io.provider->getTimer(), snapshot);
  auto big = connect(io, endpoint->port());
  std::string head = "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(256 * 1024, 'a') + "\r\n\r\n";
  // The endpoint stops reading at 128 KiB: the rest of the write may fail, and the read may end
  // in a reset rather than an orderly close.
  auto written = big->write(head.data(), head.size()).catch_([](kj::Exception&&) {});
  auto reply = io.provider->getTimer()
                   .timeoutAfter(30 * kj::SECONDS, big->readAllText())
                   .catch_([](kj::Exception&& e) {
                     CHECK(e.getType() == kj::Exception::Type::DISCONNECTED);
                     return kj::String();
                   })
                   .wait(io.waitScope);
  written.wait(io.waitScope);
  CHECK(reply == "");
  CHECK_THAT(exchange(io, endpoint->port(), kGet), StartsWith("HTTP/1.1 200 OK\r\n"));
}

TEST_CASE("a client that hangs is dropped after kRequestTimeout and holds up no one", "[metrics]") {
  auto io = kj::setupAsyncIo();
  kj::TimerImpl timer(kj::origin<kj::TimePoint>());  // moves only when the test says so
  auto snapshot = sample();
  auto endpoint = start(io, timer, snapshot);
  auto port = endpoint->port();
  // Half a request head, and bytes that are no HTTP at all with no line end; then nothing.
  auto half = connect(io, port);
  half->write("GET /metr", 9).wait(io.waitScope);
  auto junk = connect(io, port);
  junk->write("\x01\x02\xff\xfe", 4).wait(io.waitScope);
  auto half_reply = half->readAllText();
  auto junk_reply = junk->readAllText();
  // Accepted after them, so served after they were taken in: both are waiting now.
  CHECK_THAT(exchange(io, port, kGet, /*half_close=*/true), StartsWith("HTTP/1.1 200 OK\r\n"));
  CHECK_FALSE(half_reply.poll(io.waitScope));
  CHECK_FALSE(junk_reply.poll(io.waitScope));
  timer.advanceTo(timer.now() + MetricsEndpoint::kRequestTimeout - 1 * kj::MILLISECONDS);
  CHECK_FALSE(half_reply.poll(io.waitScope));
  timer.advanceTo(timer.now() + 1 * kj::MILLISECONDS);
  CHECK(half_reply.wait(io.waitScope) == "");  // closed, no response
  CHECK(junk_reply.wait(io.waitScope) == "");
}

TEST_CASE("destroying the endpoint closes its port and drops open connections", "[metrics]") {
  auto io = kj::setupAsyncIo();
  auto snapshot = sample();
  auto endpoint = start(io, io.provider->getTimer(), snapshot);
  auto port = endpoint->port();
  auto open = connect(io, port);
  open->write("GET /metrics HTTP/1.1\r\n", 23).wait(io.waitScope);
  auto reply = open->readAllText();
  CHECK_THAT(exchange(io, port, kGet), StartsWith("HTTP/1.1 200 OK\r\n"));  // open is taken in
  CHECK_FALSE(reply.poll(io.waitScope));
  endpoint.reset();
  CHECK(reply.wait(io.waitScope) == "");
  CHECK_THROWS(connect(io, port));
}
