// Before login, against real as_server processes over real sockets: what an unauthenticated
// connection may send (a small budget, so no huge frame is ever allocated), for how long
// (--login-timeout), how many may wait at once (--max-unauthenticated-connections), the rate of
// failed logins per source address and overall, and rotating tokens with SIGHUP.
#include "loopback.h"
#include "raw_login.h"
#include "server_process.h"

#include "agentd.capnp.h"

#include <agentd/client.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <capnp/rpc-twoparty.h>
#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

using namespace agentd;
using namespace agentd::test;
namespace wire = agentd::wire;

namespace {

constexpr const char* kLoginToken = "0123456789abcdef0123456789abcdef-first";
constexpr const char* kOtherLoginToken = "fedcba9876543210fedcba9876543210-second";
constexpr const char* kNewToken = "00112233445566778899aabbccddeeff-third";

std::string write_tokens(const TempDir& dir, const std::string& text, mode_t mode = 0600) {
  auto path = dir.write("tokens", text);
  REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path;
}

std::string le32(std::uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A Cap'n Proto RPC connection from source, logging in with nothing but the generated code.
// io (the test thread's one event loop) is borrowed and outlives it.
struct RawLogin {
  RawLogin(kj::AsyncIoContext& io, std::uint16_t port, const std::string& source = "127.0.0.1")
      : io(io),
        stream(io.lowLevelProvider->wrapSocketFd(connect_loopback(port, source),
                                                 kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP)),
        rpc(*stream) {}
  kj::AsyncIoContext& io;
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyClient rpc;

  // The refusal's message, or "" when the login was accepted.
  std::string login(const std::string& token) {
    auto req = rpc.bootstrap().castAs<wire::Gate>().loginRequest();
    req.setToken(token);
    auto answer = req.send().wait(io.waitScope);
    if (!answer.hasError()) {
      server = answer.getServer();
      return "";
    }
    return answer.getError().getMessage().cStr();
  }
  // Whether the server logged in with answers a ping.
  bool pings() {
    try {
      server.pingRequest().send().wait(io.waitScope);
      return true;
    } catch (const kj::Exception&) {
      return false;
    }
  }
  wire::AgentServer::Client server = nullptr;
};

ClientOptions login_options(const std::string& token) {
  ClientOptions o;
  o.token = token;
  o.connect_timeout = std::chrono::seconds(10);
  return o;
}

std::uint64_t rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  std::uint64_t kib = 0;
  while (in >> key) {
    if (key == "VmRSS:" && in >> kib) return kib;
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

}  // namespace

TEST_CASE("before login a frame bigger than the pre-login budget is refused at its header",
          "[security][prelogin]") {
  TempDir dir;
  auto s = ServerProcess::start(standard_args({"--auth-token-file", write_tokens(dir, kLoginToken)}));
  Client steady = s->connect(login_options(kLoginToken));
  const auto before = rss_kib(s->pid());
  // 20 connections announce a 61 MiB frame and send 1 MiB of it: each is closed at once.
  std::vector<std::unique_ptr<RawSocket>> hostile;
  const std::string body(1 << 20, '\0');
  for (int i = 0; i < 20; ++i) {
    hostile.push_back(std::make_unique<RawSocket>(s->port()));
    hostile.back()->send_all(le32(0) + le32((61u << 20) / 8) + body);
  }
  for (auto& h : hostile) CHECK(h->wait_closed(5s));
  const std::string who = "closing connection from " + hostile.front()->peer_name() + ": ";
  CHECK(wait_until([&] { return s->stderr_text().find(who) != std::string::npos; }, 5s));
  auto log = s->stderr_text();
  auto line = log.substr(log.find(who), log.find('\n', log.find(who)) - log.find(who));
  CHECK_THAT(line, Catch::Contains("before logging in") && Catch::Contains("64 KiB") &&
                       Catch::Contains("log in first"));
  // Nothing the frames claimed was kept (each would pin 61 MiB).
  CHECK(rss_kib(s->pid()) < before + 64 * 1024);
  // After login, frames up to --max-message-bytes are read as before.
  auto echo = steady.create_agent("EchoAgent", "e");
  const std::string big(2 << 20, 'x');
  CHECK(echo.reply(Msg("user", big)).get().text() == big);
}

TEST_CASE("calls pipelined on the login are read with the normal limits", "[security][prelogin]") {
  TempDir dir;
  auto s = ServerProcess::start(standard_args({"--auth-token-file", write_tokens(dir, kLoginToken)}));
  auto io = kj::setupAsyncIo();
  RawLogin c(io, s->port());
  // The login and, pipelined on the server it returns, a 256 KiB call (beyond the pre-login
  // budget) sent at once, as a client in another language may.
  auto login = c.rpc.bootstrap().castAs<wire::Gate>().loginRequest();
  login.setToken(kLoginToken);
  auto logged_in = login.send();
  auto create = logged_in.getServer().createAgentRequest();
  create.setClassName(std::string(256 * 1024, 'x'));
  create.initArgs().initObject(0);
  auto created = create.send();
  CHECK_FALSE(logged_in.wait(io.waitScope).hasError());
  auto answer = created.wait(io.waitScope);  // answered (no such class), not disconnected
  REQUIRE(answer.hasError());
  CHECK(answer.getError().getCode() != wire::ErrorCode::UNAUTHENTICATED);
  CHECK(s->stderr_text().find("closing connection from") == std::string::npos);
}

TEST_CASE("a connection that has not logged in within --login-timeout is closed, and logged-in ones stay",
          "[security][prelogin]") {
  TempDir dir;
  auto s = ServerProcess::start(
      standard_args({"--auth-token-file", write_tokens(dir, kLoginToken), "--login-timeout", "1"}));
  auto io = kj::setupAsyncIo();
  RawLogin logged_in(io, s->port());
  REQUIRE(logged_in.login(kLoginToken).empty());
  // One sends half a frame and stops; one sends one byte; one a byte, then a byte every 100 ms.
  RawSocket half(s->port()), one_byte(s->port()), trickle(s->port());
  half.send_all(le32(0) + le32(100) + std::string(200, '\0'));
  one_byte.send_all(std::string(1, '\0'));
  const auto t0 = std::chrono::steady_clock::now();
  bool trickle_closed = false;
  trickle.send_all(le32(0) + le32(1000));
  while (!trickle_closed && std::chrono::steady_clock::now() - t0 < 5s) {
    trickle_closed = !trickle.send_all(std::string(1, '\0')) || trickle.wait_closed(100ms);
  }
  CHECK(trickle_closed);
  CHECK(half.wait_closed(5s));
  CHECK(one_byte.wait_closed(5s));
  CHECK(std::chrono::steady_clock::now() - t0 >= 900ms);
  CHECK(wait_until([&] { return s->stderr_text().find("did not log in within 1 s") != std::string::npos; },
                   5s));
  // The connection that logged in before the deadline is served after it.
  CHECK(logged_in.pings());
  CHECK(s->connect(login_options(kLoginToken)).info().server_id == s->server_id());
}

TEST_CASE("past --max-unauthenticated-connections the one waiting longest is closed, and clients get in",
          "[security][prelogin]") {
  TempDir dir;
  auto s = ServerProcess::start(standard_args(
      {"--auth-token-file", write_tokens(dir, kLoginToken), "--max-unauthenticated-connections", "8"}));
  std::vector<std::unique_ptr<RawSocket>> idle;
  for (int i = 0; i < 12; ++i) {
    idle.push_back(std::make_unique<RawSocket>(s->port()));
    idle.back()->send_all(std::string(1, '\0'));  // said something: not merely connected
  }
  // The four oldest make room for the newer ones.
  for (int i = 0; i < 4; ++i) CHECK(idle[static_cast<std::size_t>(i)]->wait_closed(5s));
  CHECK(wait_until(
      [&] { return s->stderr_text().find("--max-unauthenticated-connections") != std::string::npos; }, 5s));
  // A client still gets in (taking the place of the oldest that wait), and is served.
  Client c = s->connect(login_options(kLoginToken));
  CHECK(c.create_agent("EchoAgent", "e").reply(Msg("user", "in")).get().text() == "in");
  CHECK(idle[4]->wait_closed(5s));
  for (std::size_t i = 8; i < idle.size(); ++i) CHECK_FALSE(idle[i]->wait_closed(0ms));
}

TEST_CASE("an address over its budget of failed logins is refused at once, unchecked, and others are not",
          "[security][auth][throttle]") {
  TempDir dir;
  auto s = ServerProcess::start(standard_args({"--auth-token-file", write_tokens(dir, kLoginToken)}));
  auto io = kj::setupAsyncIo();
  RawLogin attacker(io, s->port(), "127.0.0.5");
  for (int i = 0; i < 10; ++i) CHECK_THAT(attacker.login("guess"), Catch::Contains("wrong token"));
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THAT(attacker.login("guess"), Catch::Contains("too many failed logins from 127.0.0.5; try again in"));
  // Even the right token from there is refused, unchecked, without a wait.
  CHECK_THAT(attacker.login(kLoginToken), Catch::Contains("too many failed logins from 127.0.0.5"));
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  // Another address logs in at once.
  t0 = std::chrono::steady_clock::now();
  RawLogin user(io, s->port(), "127.0.0.6");
  CHECK(user.login(kLoginToken).empty());
  CHECK(user.pings());
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  CHECK(wait_until(
      [&] {
        return s->stderr_text().find(
                   "further logins from 127.0.0.5 are refused "
                   "unchecked") != std::string::npos;
      },
      5s));
  CHECK(s->stderr_text().find("guess") == std::string::npos);
}

TEST_CASE("failed logins from many addresses are limited overall, and an address that never failed gets in",
          "[security][auth][throttle]") {
  TempDir dir;
  auto s = ServerProcess::start(standard_args({"--auth-token-file", write_tokens(dir, kLoginToken)}));
  auto io = kj::setupAsyncIo();
  int overall = 0;
  for (int a = 10; a < 40 && overall == 0; ++a) {
    RawLogin attacker(io, s->port(), "127.0.0." + std::to_string(a));
    for (int i = 0; i < 10; ++i) {
      auto why = attacker.login("guess");
      if (why.find("too many failed logins on this server") != std::string::npos) ++overall;
    }
  }
  CHECK(overall > 0);
  RawLogin clean(io, s->port(), "127.0.0.99");
  CHECK(clean.login(kLoginToken).empty());
  CHECK(clean.pings());
}

TEST_CASE(
    "SIGHUP re-reads the token file: a removed token's connections are cut, a bad file "
    "keeps the old tokens",
    "[security][auth][reload]") {
  TempDir dir;
  auto tokens = write_tokens(dir, std::string(kLoginToken) + "\n" + kOtherLoginToken + "\n");
  auto s = ServerProcess::start(standard_args({"--auth-token-file", tokens}));
  auto io = kj::setupAsyncIo();
  RawLogin first(io, s->port()), second(io, s->port());
  REQUIRE(first.login(kLoginToken).empty());
  REQUIRE(second.login(kOtherLoginToken).empty());
  REQUIRE(first.pings());

  write_tokens(dir, std::string(kOtherLoginToken) + "\n" + kNewToken + "\n");
  REQUIRE(::kill(s->pid(), SIGHUP) == 0);
  CHECK(wait_until([&] { return !first.pings(); }, 5s));
  CHECK(second.pings());
  CHECK_THAT(s->stderr_text(), Catch::Contains("no longer in --auth-token-file"));
  RawLogin again(io, s->port());
  CHECK_THAT(again.login(kLoginToken), Catch::Contains("wrong token"));
  CHECK(again.login(kNewToken).empty());

  // A file others may read is refused on reload: the tokens there were stay, nobody is cut.
  write_tokens(dir, std::string(kLoginToken) + "\n", 0644);
  REQUIRE(::kill(s->pid(), SIGHUP) == 0);
  CHECK(wait_until(
      [&] { return s->stderr_text().find("SIGHUP: kept the previous tokens") != std::string::npos; }, 5s));
  CHECK_THAT(s->stderr_text(), Catch::Contains("chmod 600"));
  CHECK(second.pings());
  CHECK(again.pings());
  RawLogin after(io, s->port());
  CHECK(after.login(kNewToken).empty());
  CHECK(s->running());

  // `agentctl reload` (setModelConfigs) re-reads the token file the same way.
  write_tokens(dir, std::string(kNewToken) + "\n");
  ClientOptions o;
  o.token = kNewToken;
  Client c = s->connect(o);
  c.set_model_configs("[]");
  CHECK(wait_until([&] { return !second.pings(); }, 5s));  // kOtherLoginToken is gone
  CHECK_NOTHROW(c.ping());
}
