// The Streamable HTTP transport: hand-written JSON-RPC through it to the real server-everything
// (tests/mcp/node_modules, `streamableHttp` mode on a free loopback port), and to a scripted
// one-connection-at-a-time HTTP server in this test for what server-everything cannot show
// (the headers sent, 404 ending a session, the DELETE of shut_down).
#include "async_http.h"
#include "mcp_test_support.h"
#include "mcp_transport.h"
#include "subprocess.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using agentd::Value;
using agentd::detail::AsyncHttp;
using agentd::detail::make_http_transport;
using agentd::detail::McpTransport;
using agentd::detail::SpawnOptions;
using agentd::detail::Subprocess;
using agentd::detail::ToolServerConfig;
using agentd::test::find_node;
using agentd::test::kEverything;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

std::uint16_t unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

bool can_connect(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// server-everything in Streamable HTTP mode on `port`, ready (accepting) when constructed.
struct Everything {
  explicit Everything(std::uint16_t port) {
    SpawnOptions options;
    options.argv = {find_node(), kEverything, "streamableHttp"};
    options.env =
        std::vector<std::string>{"PORT=" + std::to_string(port), "PATH=/usr/local/bin:/usr/bin:/bin"};
    options.in = agentd::detail::Redirect::null();
    options.out = agentd::detail::Redirect::null();
    options.err = agentd::detail::Redirect::null();
    process = Subprocess::spawn(options);
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!can_connect(port)) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      REQUIRE_FALSE(process.try_wait().has_value());
      std::this_thread::sleep_for(20ms);
    }
  }
  Subprocess process;
};

// A loop, AsyncHttp and one transport, with what the transport reported.
struct HttpClient {
  explicit HttpClient(ToolServerConfig c) : config(std::move(c)) {
    transport = make_http_transport(config, http, io.provider->getTimer());
    McpTransport::Events events;
    events.message = [this](Value m) { messages.push_back(std::move(m)); };
    events.closed = [this](std::string why) {
      CHECK_FALSE(closed.has_value());  // at most once
      closed = std::move(why);
    };
    transport->start(std::move(events));
  }

  // Runs the loop until pred holds (failing after `limit`).
  void run_until(const std::function<bool()>& pred, std::chrono::milliseconds limit = 20s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      io.provider->getTimer().afterDelay(2 * kj::MILLISECONDS).wait(io.waitScope);
    }
  }

  // The response to request `id`, once it came.
  const Value& response(int id) {
    const Value* found = nullptr;
    run_until([&] {
      for (const auto& m : messages) {
        if (m.is_object() && m.value("id", Value()) == id && (m.contains("result") || m.contains("error"))) {
          found = &m;
        }
      }
      return found != nullptr || closed.has_value();
    });
    REQUIRE(found != nullptr);
    return *found;
  }

  void initialize() {
    transport->send({{"jsonrpc", "2.0"},
                     {"id", 1},
                     {"method", "initialize"},
                     {"params",
                      {{"protocolVersion", "2025-11-25"},
                       {"capabilities", Value::object()},
                       {"clientInfo", {{"name", "agentd-test"}, {"version", "1"}}}}}});
    const Value& r = response(1);
    REQUIRE(r.contains("result"));
    transport->set_protocol_version(r["result"]["protocolVersion"].get<std::string>());
    transport->send({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}});
  }

  void call_echo(int id, const std::string& text) {
    transport->send({{"jsonrpc", "2.0"},
                     {"id", id},
                     {"method", "tools/call"},
                     {"params", {{"name", "echo"}, {"arguments", {{"message", text}}}}}});
  }

  ToolServerConfig config;
  kj::AsyncIoContext io = kj::setupAsyncIo();
  AsyncHttp http{io};
  kj::Own<McpTransport> transport;
  std::vector<Value> messages;
  std::optional<std::string> closed;
};

ToolServerConfig http_config(std::uint16_t port) {
  ToolServerConfig c;
  c.name = "everything";
  c.transport = ToolServerConfig::Transport::http;
  c.url = "http://127.0.0.1:" + std::to_string(port) + "/mcp";
  c.call_timeout = 20s;
  c.start_timeout = 20s;
  return c;
}

#define SKIP_WITHOUT_NODE()                                                                   \
  do {                                                                                        \
    if (find_node().empty()) {                                                                \
      WARN("skipped: node is not installed (scripts/setup.sh installs it and tests/mcp)");    \
      return;                                                                                 \
    }                                                                                         \
    REQUIRE(::access(kEverything.c_str(), R_OK) == 0); /* node but no npm ci: run setup.sh */ \
  } while (false)

// A scripted HTTP/1.1 server: for each connection, reads one request and writes the next
// canned answer (with Connection: close). Keeps what it read.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::vector<std::string> answers) : answers_(std::move(answers)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }
  std::uint16_t port = 0;

 private:
  void serve() {
    for (const std::string& answer : answers_) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::string in;
      char buf[4096];
      std::size_t need = std::string::npos;
      while (need == std::string::npos || in.size() < need) {
        ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) break;
        in.append(buf, static_cast<std::size_t>(n));
        if (auto end = in.find("\r\n\r\n"); end != std::string::npos && need == std::string::npos) {
          std::size_t length = 0;
          if (auto cl = in.find("Content-Length: "); cl != std::string::npos && cl < end) {
            length = std::stoul(in.substr(cl + 16));
          }
          need = end + 4 + length;
        }
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        requests_.push_back(in);
      }
      std::string out = answer;
      (void)!::write(c, out.data(), out.size());
      ::close(c);
    }
  }

  std::vector<std::string> answers_;
  int fd_ = -1;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<std::string> requests_;
};

std::string http_answer(const std::string& status, const std::vector<std::string>& headers,
                        const std::string& body) {
  std::string out = "HTTP/1.1 " + status +
                    "\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  for (const auto& h : headers) out += h + "\r\n";
  return out + "\r\n" + body;
}

// A scripted HTTP server for many connections at once: each request read whole goes to `script`,
// whose Reply is written back; the connection then closes, stays open (hold: e.g. an event
// stream the server keeps alive), or gets `flood` more bytes until the client leaves. Counts the
// held connections the client closed.
class LiveServer {
 public:
  struct Reply {
    std::string bytes;
    bool hold = false;
    std::size_t flood = 0;
  };
  using Script = std::function<Reply(const std::string& request)>;

  explicit LiveServer(Script script) : script_(std::move(script)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 512) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    REQUIRE(::pipe2(stop_, O_CLOEXEC) == 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~LiveServer() {
    (void)!::write(stop_[1], "x", 1);
    thread_.join();
    for (auto& c : conns_) ::close(c.fd);
    ::close(fd_);
    ::close(stop_[0]);
    ::close(stop_[1]);
  }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }
  int held() { return held_.load(); }                          // open now, answered, kept open
  int closed_by_client() { return closed_by_client_.load(); }  // held ones the client closed
  std::size_t flooded() { return flooded_.load(); }            // bytes flood wrote in all

  std::uint16_t port = 0;

 private:
  struct Conn {
    int fd;
    std::string in;
    bool answered = false;
  };

  static bool complete(const std::string& in) {
    auto end = in.find("\r\n\r\n");
    if (end == std::string::npos) return false;
    std::size_t length = 0;
    if (auto cl = in.find("Content-Length: "); cl != std::string::npos && cl < end) {
      length = std::stoul(in.substr(cl + 16));
    }
    return in.size() >= end + 4 + length;
  }

  void serve() {
    for (;;) {
      std::vector<pollfd> fds{{stop_[0], POLLIN, 0}, {fd_, POLLIN, 0}};
      for (auto& c : conns_) fds.push_back({c.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 100) < 0) continue;
      if (fds[0].revents != 0) return;
      if (fds[1].revents != 0) {
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) conns_.push_back(Conn{c, {}});
      }
      std::vector<Conn> kept;
      for (std::size_t i = 0; i < conns_.size(); ++i) {
        Conn& c = conns_[i];
        if (i + 2 >= fds.size() || fds[i + 2].revents == 0) {  // accepted just now, or quiet
          kept.push_back(std::move(c));
          continue;
        }
        char buf[8192];
        ssize_t n = ::read(c.fd, buf, sizeof buf);
        if (n <= 0) {
          if (c.answered) {
            --held_;
            ++closed_by_client_;
          }
          ::close(c.fd);
          continue;
        }
        if (c.answered) {
          kept.push_back(std::move(c));
          continue;
        }
        c.in.append(buf, static_cast<std::size_t>(n));
        if (!complete(c.in)) {
          kept.push_back(std::move(c));
          continue;
        }
        {
          std::lock_guard<std::mutex> lock(mutex_);
          requests_.push_back(c.in);
        }
        Reply reply = script_(c.in);
        (void)!::send(c.fd, reply.bytes.data(), reply.bytes.size(), MSG_NOSIGNAL);
        if (reply.flood > 0) {
          std::string chunk(64 * 1024, 'z');
          for (std::size_t sent = 0; sent < reply.flood;) {
            ssize_t w = ::send(c.fd, chunk.data(), std::min(chunk.size(), reply.flood - sent), MSG_NOSIGNAL);
            if (w <= 0) break;
            sent += static_cast<std::size_t>(w);
            flooded_ += static_cast<std::size_t>(w);
          }
        }
        if (reply.hold) {
          c.answered = true;
          ++held_;
          kept.push_back(std::move(c));
        } else {
          ::close(c.fd);
        }
      }
      conns_ = std::move(kept);
    }
  }

  Script script_;
  int fd_ = -1;
  int stop_[2] = {-1, -1};
  std::vector<Conn> conns_;  // server thread only
  std::thread thread_;
  std::mutex mutex_;
  std::vector<std::string> requests_;
  std::atomic<int> held_{0};
  std::atomic<int> closed_by_client_{0};
  std::atomic<std::size_t> flooded_{0};
};

// The JSON-RPC method of an HTTP request's body ("GET" for a GET, "DELETE" for a DELETE).
std::string method_of(const std::string& request) {
  if (request.rfind("GET ", 0) == 0) return "GET";
  if (request.rfind("DELETE ", 0) == 0) return "DELETE";
  Value body = Value::parse(request.substr(request.find("\r\n\r\n") + 4), nullptr, false);
  return body.is_object() && body.contains("method") ? body["method"].get<std::string>() : "";
}

const std::string kInitAnswer =
    http_answer("200 OK", {"Content-Type: application/json", "Mcp-Session-Id: s-1"},
                R"({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25"}})");

// A stream the server keeps open without answering (a call that never ends).
const std::string kHeldStream =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n: still "
    "working\n\n";

void send_initialize(HttpClient& client) {
  client.transport->send(
      {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "initialize"}, {"params", Value::object()}});
  client.response(1);
}

Value tools_call(int id) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"method", "tools/call"}, {"params", {{"name", "slow"}}}};
}

}  // namespace

TEST_CASE("HTTP transport: initialize, tools/list and tools/call echo with server-everything",
          "[tools][http]") {
  SKIP_WITHOUT_NODE();
  const std::uint16_t port = unused_port();
  Everything server(port);
  HttpClient client(http_config(port));
  client.initialize();
  const Value& init = client.response(1);
  CHECK(init["result"]["protocolVersion"] == "2025-11-25");
  CHECK(init["result"]["serverInfo"]["name"].get<std::string>().find("everything") != std::string::npos);

  // tools/list works only in the session: the Mcp-Session-Id of the initialize answer went back.
  client.transport->send({{"jsonrpc", "2.0"}, {"id", 2}, {"method", "tools/list"}});
  const Value& list = client.response(2);
  REQUIRE(list.contains("result"));
  bool has_echo = false;
  for (const auto& tool : list["result"]["tools"]) has_echo |= tool["name"] == "echo";
  CHECK(has_echo);

  client.call_echo(3, "hello over HTTP");
  const Value& echo = client.response(3);
  REQUIRE(echo.contains("result"));
  CHECK(echo["result"]["content"][0]["text"] == "Echo: hello over HTTP");
  CHECK_FALSE(client.closed.has_value());

  // shut_down DELETEs the session: the same session id is unknown afterwards.
  client.transport->shut_down(5 * kj::SECONDS).wait(client.io.waitScope);
  CHECK_FALSE(client.closed.has_value());
}

TEST_CASE("HTTP transport: many calls in flight at once, each answered", "[tools][http]") {
  SKIP_WITHOUT_NODE();
  const std::uint16_t port = unused_port();
  Everything server(port);
  HttpClient client(http_config(port));
  client.initialize();
  constexpr int kCalls = 24;
  for (int i = 0; i < kCalls; ++i) client.call_echo(100 + i, "call " + std::to_string(i));
  for (int i = 0; i < kCalls; ++i) {
    const Value& r = client.response(100 + i);
    REQUIRE(r.contains("result"));
    CHECK(r["result"]["content"][0]["text"] == "Echo: call " + std::to_string(i));
  }
  // Every POST finished (the 202s of notifications too); the GET stream may stay open.
  CHECK(client.http.transfers() <= 1);
}

TEST_CASE("HTTP transport: an answer over max_message_bytes fails that call, not the session",
          "[tools][http]") {
  SKIP_WITHOUT_NODE();
  const std::uint16_t port = unused_port();
  Everything server(port);
  ToolServerConfig config = http_config(port);
  config.max_message_bytes = 2048;
  HttpClient client(config);
  client.initialize();
  client.call_echo(7, std::string(4000, 'x'));
  const Value& big = client.response(7);
  REQUIRE(big.contains("error"));
  CHECK_THAT(big["error"]["message"].get<std::string>(),
             Contains("tool server 'everything'") && Contains("larger than max_message_bytes (2048 bytes)"));
  client.call_echo(8, "small");
  const Value& small = client.response(8);
  REQUIRE(small.contains("result"));
  CHECK(small["result"]["content"][0]["text"] == "Echo: small");
  CHECK_FALSE(client.closed.has_value());
}

TEST_CASE("HTTP transport: a server restarted without the session closes the transport", "[tools][http]") {
  SKIP_WITHOUT_NODE();
  const std::uint16_t port = unused_port();
  auto server = std::make_unique<Everything>(port);
  HttpClient client(http_config(port));
  client.initialize();
  server.reset();  // SIGKILL
  server = std::make_unique<Everything>(port);
  client.call_echo(5, "anyone there?");
  client.run_until([&] { return client.closed.has_value(); });
  CHECK_THAT(*client.closed, Contains("the server ended the session (HTTP 400"));
}

TEST_CASE("HTTP transport: a request before initialize gets the server's refusal as its error",
          "[tools][http]") {
  SKIP_WITHOUT_NODE();
  const std::uint16_t port = unused_port();
  Everything server(port);
  HttpClient client(http_config(port));
  client.transport->send({{"jsonrpc", "2.0"}, {"id", 9}, {"method", "tools/list"}});
  const Value& r = client.response(9);
  REQUIRE(r.contains("error"));
  CHECK_THAT(r["error"]["message"].get<std::string>(),
             Contains("the server answered HTTP 400") && Contains("Bad Request"));
  CHECK_FALSE(client.closed.has_value());
}

TEST_CASE("HTTP transport: nobody listening closes it, naming the URL", "[tools][http]") {
  HttpClient client(http_config(unused_port()));
  client.transport->send(
      {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "initialize"}, {"params", Value::object()}});
  client.run_until([&] { return client.closed.has_value(); });
  CHECK_THAT(*client.closed, Contains("cannot connect to http://127.0.0.1:"));
  CHECK(client.messages.empty());
}

TEST_CASE("HTTP transport: headers, session id, protocol version, SSE, 404 and DELETE on the wire",
          "[tools][http]") {
  const std::string init_sse =
      ": a comment\r\n"
      "id: 1\r\ndata:\r\n\r\n"  // the priming event: empty data
      "event: message\r\ndata: "
      "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\r\n\r\n"
      "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\n"
      "data: \"result\":{\"protocolVersion\":\"2025-11-25\"}}\n\n";
  ScriptedServer server({
      http_answer("200 OK", {"Content-Type: text/event-stream", "Mcp-Session-Id: sess-42"}, init_sse),
      http_answer("202 Accepted", {}, ""),
      http_answer("405 Method Not Allowed", {}, ""),  // the GET stream: none offered
      http_answer("200 OK", {"Content-Type: application/json"},
                  R"({"jsonrpc":"2.0","id":2,"result":{"tools":[]}})"),
      http_answer("404 Not Found", {"Content-Type: application/json"}, R"({"error":"Session not found"})"),
      http_answer("200 OK", {}, ""),
  });
  ToolServerConfig config = http_config(server.port);
  config.headers = {{"Authorization", "Bearer sekrit-token"}, {"X-Tenant", "t1"}};
  HttpClient client(config);

  client.transport->send(
      {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "initialize"}, {"params", Value::object()}});
  const Value& init = client.response(1);
  CHECK(init["result"]["protocolVersion"] == "2025-11-25");
  REQUIRE(client.messages.size() == 2);  // the notification first, in the stream's order
  CHECK(client.messages[0]["method"] == "notifications/message");
  client.transport->set_protocol_version("2025-11-25");
  client.transport->send({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}});
  client.run_until([&] { return server.requests().size() == 3; });  // the GET after the 202
  client.transport->send({{"jsonrpc", "2.0"}, {"id", 2}, {"method", "tools/list"}});
  CHECK(client.response(2)["result"]["tools"].empty());
  client.transport->send({{"jsonrpc", "2.0"}, {"id", 3}, {"method", "tools/list"}});
  client.run_until([&] { return client.closed.has_value(); });
  CHECK_THAT(*client.closed, Contains("the server ended the session (HTTP 404"));
  client.transport->send({{"jsonrpc", "2.0"}, {"id", 4}, {"method", "tools/list"}});  // dropped: closed

  auto requests = server.requests();
  REQUIRE(requests.size() == 5);
  CHECK_THAT(requests[2], Contains("GET /mcp HTTP/1.1\r\n") && Contains("Accept: text/event-stream\r\n") &&
                              Contains("Authorization: Bearer sekrit-token\r\n"));
  requests.erase(requests.begin() + 2);
  for (const auto& r : requests) {
    CHECK_THAT(r, Contains("POST /mcp HTTP/1.1\r\n") && Contains("Authorization: Bearer sekrit-token\r\n") &&
                      Contains("X-Tenant: t1\r\n") &&
                      Contains("Accept: application/json, text/event-stream\r\n") &&
                      Contains("Content-Type: application/json\r\n"));
  }
  CHECK(requests[0].find("Mcp-Session-Id") == std::string::npos);
  CHECK(requests[0].find("MCP-Protocol-Version") == std::string::npos);
  for (std::size_t i = 1; i < requests.size(); ++i) {
    CHECK_THAT(requests[i],
               Contains("Mcp-Session-Id: sess-42\r\n") && Contains("MCP-Protocol-Version: 2025-11-25\r\n"));
  }
  CHECK_THAT(requests[1], Contains("\"method\":\"notifications/initialized\""));

  // After a 404 the session is gone: shut_down has nothing to DELETE.
  client.transport->shut_down(2 * kj::SECONDS).wait(client.io.waitScope);
  CHECK(server.requests().size() == 5);
}

TEST_CASE("HTTP transport: shut_down DELETEs the session with its id", "[tools][http]") {
  ScriptedServer server({
      http_answer("200 OK", {"Content-Type: application/json", "Mcp-Session-Id: sess-7"},
                  R"({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25"}})"),
      http_answer("405 Method Not Allowed", {}, ""),
  });
  HttpClient client(http_config(server.port));
  client.transport->send(
      {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "initialize"}, {"params", Value::object()}});
  client.response(1);
  client.transport->shut_down(5 * kj::SECONDS).wait(client.io.waitScope);
  auto requests = server.requests();
  REQUIRE(requests.size() == 2);
  CHECK_THAT(requests[1], Contains("DELETE /mcp HTTP/1.1\r\n") && Contains("Mcp-Session-Id: sess-7\r\n"));
  CHECK(requests[1].find("Content-Length") == std::string::npos);
  CHECK_FALSE(client.closed.has_value());
}

TEST_CASE("HTTP transport: abandon closes a request's POST, and shut_down closes every one",
          "[tools][http]") {
  LiveServer server([](const std::string& request) -> LiveServer::Reply {
    const std::string method = method_of(request);
    if (method == "initialize") return {kInitAnswer};
    if (method == "tools/call") return {kHeldStream, /*hold=*/true};
    return {http_answer("200 OK", {}, "")};  // the DELETE
  });
  HttpClient client(http_config(server.port));
  send_initialize(client);

  client.transport->send(tools_call(5));
  client.run_until([&] { return server.held() == 1; });
  client.transport->abandon(5);  // as the session does when the call times out or is cancelled
  client.run_until([&] { return server.closed_by_client() == 1; });
  client.run_until([&] { return client.http.transfers() == 0; });

  client.transport->send(tools_call(6));
  client.transport->send(tools_call(7));
  client.run_until([&] { return server.held() == 2; });
  client.transport->shut_down(5 * kj::SECONDS).wait(client.io.waitScope);
  client.run_until([&] { return server.closed_by_client() == 3; });
  auto requests = server.requests();
  REQUIRE(requests.size() == 5);
  CHECK(method_of(requests[4]) == "DELETE");
  // Nothing is reported for an abandoned request, nor after shut_down.
  client.io.provider->getTimer().afterDelay(50 * kj::MILLISECONDS).wait(client.io.waitScope);
  CHECK(client.messages.size() == 1);
  CHECK_FALSE(client.closed.has_value());
  CHECK(client.http.transfers() == 0);
}

TEST_CASE("HTTP transport: at most 256 POSTs at once, the rest wait their turn", "[tools][http]") {
  LiveServer server([](const std::string& request) -> LiveServer::Reply {
    if (method_of(request) == "initialize") return {kInitAnswer};
    if (method_of(request) == "DELETE") return {http_answer("200 OK", {}, "")};
    return {kHeldStream, /*hold=*/true};
  });
  HttpClient client(http_config(server.port));
  send_initialize(client);
  constexpr int kCalls = 300;
  for (int i = 0; i < kCalls; ++i) client.transport->send(tools_call(100 + i));
  client.run_until([&] { return server.held() == 256; });
  client.io.provider->getTimer().afterDelay(100 * kj::MILLISECONDS).wait(client.io.waitScope);
  CHECK(server.held() == 256);
  CHECK(server.requests().size() == 1 + 256);
  CHECK(client.http.transfers() == 256);

  client.transport->abandon(100 + kCalls - 1);                      // still waiting: never POSTed
  for (int i = 0; i < 10; ++i) client.transport->abandon(100 + i);  // their places go to the next
  client.run_until([&] { return server.requests().size() == 1 + 266; });
  client.io.provider->getTimer().afterDelay(100 * kj::MILLISECONDS).wait(client.io.waitScope);
  CHECK(server.held() == 256);
  auto requests = server.requests();
  CHECK(requests.size() == 1 + 266);
  for (const auto& r : requests) CHECK(r.find("\"id\":399") == std::string::npos);
  client.transport->shut_down(1 * kj::SECONDS).wait(client.io.waitScope);
  CHECK(client.http.transfers() == 0);
}

TEST_CASE("HTTP transport: a 500 with a huge body is refused after its first KiB", "[tools][http]") {
  constexpr std::size_t kHuge = std::size_t{1} << 30;
  LiveServer server([&](const std::string&) -> LiveServer::Reply {
    return {"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: " +
                std::to_string(kHuge) + "\r\n\r\n",
            false, kHuge};
  });
  HttpClient client(http_config(server.port));
  client.transport->send(tools_call(3));
  const Value& r = client.response(3);
  REQUIRE(r.contains("error"));
  const std::string message = r["error"]["message"].get<std::string>();
  CHECK_THAT(message, Contains("tool server 'everything': the server answered HTTP 500: zzzz"));
  CHECK(message.size() < 400);
  CHECK(server.flooded() < (std::size_t{64} << 20));  // it stopped reading long before the end
  CHECK_FALSE(client.closed.has_value());
}

TEST_CASE("HTTP transport: a token echoed by a 401 body, or in the URL, never reaches a message",
          "[tools][http]") {
  const std::string token = "tok-5f8a1c9e2b7d4a60";
  LiveServer server([&](const std::string& request) -> LiveServer::Reply {
    const int id = Value::parse(request.substr(request.find("\r\n\r\n") + 4))["id"].get<int>();
    // The token alone (the header's value is "Bearer TOKEN"), and where a cut at 200 would split it.
    std::string body = id == 1 ? "invalid token " + token : std::string(190, '.') + token + " rejected";
    return {http_answer("401 Unauthorized", {"Content-Type: text/plain"}, body)};
  });
  {  // one loop per thread: each HttpClient in its own scope
    ToolServerConfig config = http_config(server.port);
    config.headers = {{"Authorization", "Bearer " + token}};
    HttpClient client(config);
    for (int id : {1, 2}) {
      client.transport->send(tools_call(id));
      const std::string message = client.response(id)["error"]["message"].get<std::string>();
      CHECK_THAT(message, Contains("HTTP 401") && Contains("***") && Contains("check the headers"));
      CHECK(message.find("tok-5f8a") == std::string::npos);
      CHECK(message.find("1c9e2b7d4a60") == std::string::npos);
    }
  }
  ToolServerConfig dead = http_config(unused_port());
  dead.url = "http://agent:pa55w0rd-x@127.0.0.1:" + std::to_string(unused_port()) + "/mcp?key=k3y-secret";
  HttpClient nobody(dead);
  nobody.transport->send(tools_call(1));
  nobody.run_until([&] { return nobody.closed.has_value(); });
  CHECK_THAT(*nobody.closed, Contains("cannot connect to http://127.0.0.1:"));
  CHECK(nobody.closed->find("pa55w0rd") == std::string::npos);
  CHECK(nobody.closed->find("k3y-secret") == std::string::npos);
}

TEST_CASE("HTTP transport: the GET stream delivers a list_changed sent outside any request",
          "[tools][http]") {
  std::atomic<int> gets{0};
  LiveServer server([&](const std::string& request) -> LiveServer::Reply {
    const std::string method = method_of(request);
    if (method == "initialize") return {kInitAnswer};
    if (method == "notifications/initialized") return {http_answer("202 Accepted", {}, "")};
    if (method == "GET" && ++gets == 1) {
      return {http_answer("200 OK", {"Content-Type: text/event-stream"},
                          "event: message\ndata: "
                          "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n")};
    }
    return {http_answer("405 Method Not Allowed", {}, "")};  // the second GET: none offered now
  });
  HttpClient client(http_config(server.port));
  client.initialize();
  client.run_until([&] {
    for (const auto& m : client.messages) {
      if (m.value("method", "") == "notifications/tools/list_changed") return true;
    }
    return false;
  });
  client.run_until([&] { return gets.load() == 2; });  // reconnected after the stream ended
  client.io.provider->getTimer().afterDelay(1500 * kj::MILLISECONDS).wait(client.io.waitScope);
  CHECK(gets.load() == 2);  // 405: not again
  auto requests = server.requests();
  REQUIRE(requests.size() == 4);
  CHECK_THAT(requests[2], Contains("GET /mcp HTTP/1.1\r\n") && Contains("Accept: text/event-stream\r\n") &&
                              Contains("Mcp-Session-Id: s-1\r\n") &&
                              Contains("MCP-Protocol-Version: 2025-11-25\r\n"));
  CHECK_FALSE(client.closed.has_value());
}
