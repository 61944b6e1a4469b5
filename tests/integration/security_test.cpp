// Security against real as_server processes: logging in at the Gate with tokens
// (--auth-token-file, --peer-token-file), token file permissions, the protected default
// (no token beyond loopback refuses to start), child mode's own token, TLS and mutual TLS with a
// throw-away CA made by the openssl CLI, plaintext/TLS mismatches, and placeholders and agent
// links between servers that both require tokens (and TLS).
#include "error_of.h"
#include "raw_login.h"
#include "scoped_env.h"
#include "server_process.h"
#include "test_pki.h"

#include "agentd.capnp.h"

#include <agentd/client.h>

#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <capnp/rpc-twoparty.h>
#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

using namespace agentd;
using namespace agentd::test;
namespace wire = agentd::wire;

namespace {

constexpr const char* kToken = "0123456789abcdef0123456789abcdef-first";
constexpr const char* kOtherToken = "fedcba9876543210fedcba9876543210-second";

// Writes text to dir/name with mode and returns its path.
std::string write_file(const TempDir& dir, const std::string& name, const std::string& text,
                       mode_t mode = 0600) {
  auto path = dir.write(name, text);
  REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path;
}

ClientOptions with_token(const std::string& token) {
  ClientOptions o;
  o.token = token;
  o.connect_timeout = std::chrono::seconds(10);
  return o;
}

struct RawConnection {
  explicit RawConnection(std::uint16_t port)
      : stream(io.provider->getNetwork()
                   .parseAddress("127.0.0.1", port)
                   .wait(io.waitScope)
                   ->connect()
                   .wait(io.waitScope)),
        rpc(*stream) {}
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyClient rpc;
};

// One request of every AgentServer method, sent on server; each returns whether it failed.
// server is borrowed and outlives the returned functions.
std::vector<std::pair<std::string, std::function<bool()>>> every_operation(wire::AgentServer::Client& server,
                                                                           kj::WaitScope& ws) {
  auto fails = [&ws](auto promise) {
    try {
      promise.wait(ws);
      return false;
    } catch (const kj::Exception&) {
      return true;
    }
  };
  return {
      {"createAgent",
       [&server, fails]() {
         auto r = server.createAgentRequest();
         r.setClassName("EchoAgent");
         return fails(r.send());
       }},
      {"agent", [&server, fails]() { return fails(server.agentRequest().send()); }},
      {"deleteAgent", [&server, fails]() { return fails(server.deleteAgentRequest().send()); }},
      {"deleteAllAgents", [&server, fails]() { return fails(server.deleteAllAgentsRequest().send()); }},
      {"listAgents", [&server, fails]() { return fails(server.listAgentsRequest().send()); }},
      {"info", [&server, fails]() { return fails(server.infoRequest().send()); }},
      {"fetch", [&server, fails]() { return fails(server.fetchRequest().send()); }},
      {"ping", [&server, fails]() { return fails(server.pingRequest().send()); }},
      {"stop", [&server, fails]() { return fails(server.stopRequest().send()); }},
      {"setModelConfigs", [&server, fails]() { return fails(server.setModelConfigsRequest().send()); }},
      {"traces", [&server, fails]() { return fails(server.tracesRequest().send()); }},
      {"session", [&server, fails]() { return fails(server.sessionRequest().send()); }},
  };
}

ClientOptions tls_options(const std::string& ca, const std::string& cert = {}, const std::string& key = {}) {
  ClientOptions o;
  o.tls_ca = ca;
  o.tls_cert = cert;
  o.tls_key = key;
  o.connect_timeout = std::chrono::seconds(20);
  return o;
}

}  // namespace

TEST_CASE("without the right token no operation of the server is reachable", "[security][auth]") {
  TempDir dir;
  auto tokens = write_file(dir, "tokens", std::string(kToken) + "\n");
  auto s = ServerProcess::start(standard_args({"--auth-token-file", tokens}));
  RawConnection c(s->port());

  SECTION("the bootstrap capability is only a gate: AgentServer's methods are not on it") {
    auto not_a_server = c.rpc.bootstrap().castAs<wire::AgentServer>();
    auto ops = every_operation(not_a_server, c.io.waitScope);
    for (auto& [name, op] : ops) {
      INFO(name);
      CHECK(op());
    }
  }
  SECTION("a wrong token gets unauthenticated and no server") {
    auto req = c.rpc.bootstrap().castAs<wire::Gate>().loginRequest();
    req.setToken("not-the-token");
    auto answer = req.send().wait(c.io.waitScope);
    REQUIRE(answer.hasError());
    CHECK(answer.getError().getCode() == wire::ErrorCode::UNAUTHENTICATED);
    CHECK(std::string(answer.getError().getMessage().cStr()).find("wrong token") != std::string::npos);
    auto refused = raw_login(c.rpc, "still-not-the-token");
    auto ops = every_operation(refused, c.io.waitScope);
    for (auto& [name, op] : ops) {
      INFO(name);
      CHECK(op());
    }
  }
  SECTION("the right token opens every operation (ping as the witness)") {
    auto server = raw_login(c.rpc, kToken);
    server.pingRequest().send().wait(c.io.waitScope);
    auto info = server.infoRequest().send().wait(c.io.waitScope);
    CHECK(info.getInfo().getServerId() == s->server_id());
  }
  // Nothing was stopped, created or deleted by the refused calls.
  Client ok = s->connect(with_token(kToken));
  CHECK(ok.list_agents().empty());
  CHECK(s->running());
}

TEST_CASE("clients log in with ClientOptions::token or $AGENTD_TOKEN, any of the file's tokens",
          "[security][auth]") {
  TempDir dir;
  auto tokens = write_file(dir, "tokens",
                           "# the server's tokens\n" + std::string(kToken) + "\n\n  " + kOtherToken + "  \n");
  auto s = ServerProcess::start(standard_args({"--auth-token-file", tokens}));
  ScopedEnv no_env{{"AGENTD_TOKEN", ""}};

  auto refused = error_of([&] { s->connect(); });
  CHECK(refused.code() == ErrorCode::unauthenticated);
  CHECK_THAT(refused.message(), Catch::Contains("requires a token"));
  auto wrong = error_of([&] { s->connect(with_token("guess")); });
  CHECK(wrong.code() == ErrorCode::unauthenticated);
  CHECK_THAT(wrong.message(), Catch::Contains("wrong token"));

  Client first = s->connect(with_token(kToken));
  Client second = s->connect(with_token(kOtherToken));
  auto echo = first.create_agent("EchoAgent", "e");
  CHECK(echo.reply(Msg("user", "in")).get().text() == "in");
  CHECK(second.list_agents().size() == 1);
  {
    ScopedEnv env{{"AGENTD_TOKEN", kOtherToken}};
    Client from_env = s->connect();
    CHECK(from_env.info().server_id == s->server_id());
  }
  // Refusals are logged with the peer's address, never with the token presented.
  CHECK(wait_until(
      [&] { return s->stderr_text().find("login refused from 127.0.0.1:") != std::string::npos; }, 10s));
  CHECK(s->stderr_text().find("guess") == std::string::npos);
}

TEST_CASE("token files other users could read, or without a token, are refused at start",
          "[security][auth]") {
  TempDir dir;
  SECTION("readable by others") {
    auto open_file = write_file(dir, "tokens", std::string(kToken) + "\n", 0644);
    auto r = run_as_server(standard_args({"--auth-token-file", open_file}));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("--auth-token-file " + open_file) && Catch::Contains("0644") &&
                          Catch::Contains("chmod 600"));
    CHECK(r.err.find(kToken) == std::string::npos);
  }
  SECTION("readable by the group, as the peer token file") {
    auto good = write_file(dir, "tokens", std::string(kToken) + "\n");
    auto group = write_file(dir, "peer", std::string(kToken) + "\n", 0640);
    auto r = run_as_server(standard_args({"--auth-token-file", good, "--peer-token-file", group}));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("--peer-token-file") && Catch::Contains("chmod 600"));
  }
  SECTION("no token in it") {
    auto empty = write_file(dir, "tokens", "# nothing yet\n\n");
    auto r = run_as_server(standard_args({"--auth-token-file", empty}));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("no token in the file"));
  }
  SECTION("missing") {
    auto r = run_as_server(standard_args({"--auth-token-file", dir.path() + "/none"}));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("cannot read the token file"));
  }
}

TEST_CASE("listening beyond loopback without a token refuses to start, naming both ways out",
          "[security][auth]") {
  auto r = run_as_server(standard_args({"--host", "0.0.0.0"}));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--auth-token-file") && Catch::Contains("--allow-unauthenticated") &&
                        Catch::Contains("other machines can reach"));
  // Either way out starts it.
  TempDir dir;
  auto tokens = write_file(dir, "tokens", std::string(kToken) + "\n");
  auto with_tokens = ServerProcess::start(standard_args({"--host", "0.0.0.0", "--auth-token-file", tokens}));
  CHECK(with_tokens->connect(with_token(kToken)).info().server_id == with_tokens->server_id());
  auto open = ServerProcess::start(standard_args({"--host", "0.0.0.0", "--allow-unauthenticated"}));
  CHECK(open->connect().info().server_id == open->server_id());
}

TEST_CASE("a child gets a random token of its own: other clients on this machine are refused",
          "[security][auth][child]") {
  ScopedEnv no_env{{"AGENTD_TOKEN", ""}};
  ChildOptions o;
  o.plugins = {echo_plugin()};
  o.server_path = as_server_path();
  Client child = Client::spawn_child(o);
  CHECK(child.create_agent("EchoAgent", "e").reply(Msg("user", "hi")).get().text() == "hi");
  auto refused = error_of([&] { Client::connect("127.0.0.1", child.port()); });
  CHECK(refused.code() == ErrorCode::unauthenticated);

  // The child's command line names a token file already removed, and the private Unix socket
  // its parent talks to it over, in a directory only this user could enter; once the parent is
  // connected, the socket's name and the directory are gone too (nothing is left in $TMPDIR
  // if the parent is killed, and nobody else can reach the child by that name).
  std::ifstream cmdline("/proc/" + std::to_string(child.info().pid) + "/cmdline");
  std::vector<std::string> argv;
  for (std::string arg; std::getline(cmdline, arg, '\0');) argv.push_back(arg);
  auto value_of = [&](const std::string& option) {
    auto it = std::find(argv.begin(), argv.end(), option);
    return it != argv.end() && it + 1 != argv.end() ? *(it + 1) : std::string{};
  };
  const std::string token_file = value_of("--auth-token-file");
  const std::string socket = value_of("--unix-socket");
  REQUIRE_FALSE(token_file.empty());
  REQUIRE_FALSE(socket.empty());
  struct stat st {};
  CHECK(::stat(token_file.c_str(), &st) != 0);
  CHECK(::stat(socket.c_str(), &st) != 0);
  CHECK(::stat(socket.substr(0, socket.rfind('/')).c_str(), &st) != 0);
  CHECK(child.address() == "127.0.0.1:" + std::to_string(child.port()));

  // Children of one process share its child token: they fetch each other's placeholders.
  Client sibling = Client::spawn_child(o);
  auto a = child.create_agent("EchoAgent", "a", Value{{"prefix", "a:"}});
  auto b = sibling.create_agent("EchoAgent", "b", Value{{"prefix", "b:"}});
  CHECK(b.reply(a.reply(Msg("user", "x"))).get().text() == "b:a:x");

  // A child given a token accepts an independent server that logs in with it as peer token.
  TempDir dir;
  auto peer = write_file(dir, "peer", std::string(kToken) + "\n");
  auto independent = ServerProcess::start(standard_args({"--peer-token-file", peer}));
  ChildOptions given = o;
  given.client.token = kToken;
  Client tokened = Client::spawn_child(given);
  Client open = independent->connect();
  auto made = tokened.create_agent("EchoAgent", "m", Value{{"prefix", "m:"}});
  auto used = open.create_agent("EchoAgent", "u", Value{{"prefix", "u:"}});
  CHECK(used.reply(made.reply(Msg("user", "y"))).get().text() == "u:m:y");
  CHECK(Client::connect("127.0.0.1", tokened.port(), with_token(kToken)).info().server_id ==
        tokened.info().server_id);
}

TEST_CASE("placeholders and agent links cross servers that both require tokens", "[security][auth][peer]") {
  TempDir dir;
  auto tokens = write_file(dir, "tokens", std::string(kToken) + "\n" + kOtherToken + "\n");
  auto a = ServerProcess::start(standard_args({"--auth-token-file", tokens}));

  SECTION("with the first token of the shared file as the peer token") {
    auto b = ServerProcess::start(standard_args({"--auth-token-file", tokens}));
    Client ca = a->connect(with_token(kToken));
    Client cb = b->connect(with_token(kOtherToken));
    auto on_a = ca.create_agent("EchoAgent", "a", Value{{"prefix", "a:"}});
    auto on_b = cb.create_agent("EchoAgent", "b", Value{{"prefix", "b:"}});
    CHECK(on_b.reply(on_a.reply(Msg("user", "x"))).get().text() == "b:a:x");
    auto relay = cb.create_agent("RelayAgent", "relay", Value{{"target", on_a.to_value()}});
    CHECK(relay.reply(Msg("user", "y")).get().text() == "relayed: a:y");
  }
  SECTION("with --peer-token-file naming a token the origin accepts") {
    auto own = write_file(dir, "b-tokens", "b-only-token-0123456789\n");
    auto peer = write_file(dir, "b-peer", std::string(kOtherToken) + "\n");
    auto b = ServerProcess::start(standard_args({"--auth-token-file", own, "--peer-token-file", peer}));
    Client ca = a->connect(with_token(kToken));
    Client cb = b->connect(with_token("b-only-token-0123456789"));
    auto on_a = ca.create_agent("EchoAgent", "a");
    auto on_b = cb.create_agent("EchoAgent", "b");
    CHECK(on_b.reply(on_a.reply(Msg("user", "x"))).get().text() == "x");
  }
  SECTION("a peer token the origin refuses fails the consumer with unauthenticated") {
    auto own = write_file(dir, "b-tokens", "b-only-token-0123456789\n");
    auto b = ServerProcess::start(standard_args({"--auth-token-file", own}));
    Client ca = a->connect(with_token(kToken));
    Client cb = b->connect(with_token("b-only-token-0123456789"));
    auto on_a = ca.create_agent("EchoAgent", "a");
    auto on_b = cb.create_agent("EchoAgent", "b");
    auto failed = error_of([&] { on_b.reply(on_a.reply(Msg("user", "x"))).get(); });
    CHECK(failed.code() == ErrorCode::unauthenticated);
    CHECK_THAT(failed.message(), Catch::Contains("--peer-token-file"));
    CHECK(b->running());
  }
}

TEST_CASE("TLS: clients trusting the server's CA get in, and another CA or another name is refused",
          "[security][tls]") {
  TestPki pki;
  auto s = ServerProcess::start(standard_args({"--tls-cert", pki.server_cert, "--tls-key", pki.server_key}));
  Client c = s->connect(tls_options(pki.ca));
  CHECK(c.create_agent("EchoAgent", "e").reply(Msg("user", "sealed")).get().text() == "sealed");

  auto wrong_ca = error_of([&] { s->connect(tls_options(pki.other_ca)); });
  CHECK(wrong_ca.code() == ErrorCode::disconnected);
  CHECK_THAT(wrong_ca.message(), Catch::Contains("TLS handshake with as_server at 127.0.0.1:"));

  // The same CA, but a certificate for another host: the name check refuses it.
  auto elsewhere =
      ServerProcess::start(standard_args({"--tls-cert", pki.elsewhere_cert, "--tls-key", pki.elsewhere_key}));
  auto wrong_name = error_of([&] { elsewhere->connect(tls_options(pki.ca)); });
  CHECK_THAT(wrong_name.message(), Catch::Contains("TLS handshake") && Catch::Contains("name 127.0.0.1"));
  CHECK(s->running());
}

TEST_CASE(
    "a plaintext client on a TLS server and a TLS client on a plaintext server are told which "
    "side expects TLS, at once",
    "[security][tls]") {
  TestPki pki;
  auto tls_server =
      ServerProcess::start(standard_args({"--tls-cert", pki.server_cert, "--tls-key", pki.server_key}));
  auto plain_server = ServerProcess::start(standard_args());
  ClientOptions plain;
  plain.connect_timeout = std::chrono::seconds(20);

  auto t0 = std::chrono::steady_clock::now();
  auto plaintext_client = error_of([&] { tls_server->connect(plain); });
  CHECK(plaintext_client.code() == ErrorCode::unauthenticated);
  CHECK_THAT(plaintext_client.message(), Catch::Contains("serves TLS only") && Catch::Contains("tls_ca"));
  auto tls_client = error_of([&] { plain_server->connect(tls_options(pki.ca)); });
  CHECK(tls_client.code() == ErrorCode::disconnected);
  CHECK_THAT(tls_client.message(), Catch::Contains("TLS handshake") && Catch::Contains("without --tls-cert"));
  // Neither waited for the 20 s connect timeout.
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(wait_until(
      [&] { return plain_server->stderr_text().find("does not serve TLS") != std::string::npos; }, 10s));
  CHECK(wait_until(
      [&] { return tls_server->stderr_text().find("connected without TLS") != std::string::npos; }, 10s));
  // Both still serve the right clients.
  CHECK(tls_server->connect(tls_options(pki.ca)).info().server_id == tls_server->server_id());
  CHECK(plain_server->connect(plain).info().server_id == plain_server->server_id());
}

TEST_CASE("mutual TLS: only clients with a certificate from --tls-client-ca get in", "[security][tls]") {
  TestPki pki;
  auto s = ServerProcess::start(
      standard_args({"--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--tls-client-ca", pki.ca}));
  Client c = s->connect(tls_options(pki.ca, pki.client_cert, pki.client_key));
  CHECK(c.info().server_id == s->server_id());

  auto no_cert = error_of([&] { s->connect(tls_options(pki.ca)); });
  CHECK(no_cert.code() == ErrorCode::disconnected);
  CHECK_THAT(no_cert.message(), Catch::Contains("certificate"));
  auto foreign =
      error_of([&] { s->connect(tls_options(pki.ca, pki.other_client_cert, pki.other_client_key)); });
  CHECK(foreign.code() == ErrorCode::disconnected);
  CHECK(s->running());
}

TEST_CASE("TLS options are checked at start", "[security][tls]") {
  TestPki pki;
  auto only_cert = run_as_server(standard_args({"--tls-cert", pki.server_cert}));
  CHECK(only_cert.exit_code == 2);
  CHECK_THAT(only_cert.err, Catch::Contains("--tls-cert and --tls-key"));
  auto not_pem =
      run_as_server(standard_args({"--tls-cert", pki.path("server.csr.none"), "--tls-key", pki.server_key}));
  CHECK(not_pem.exit_code == 2);
  CHECK_THAT(not_pem.err, Catch::Contains("--tls-cert " + pki.path("server.csr.none")));
  auto mismatched =
      run_as_server(standard_args({"--tls-cert", pki.server_cert, "--tls-key", pki.client_key}));
  CHECK(mismatched.exit_code == 2);
  CHECK_THAT(mismatched.err, Catch::Contains("the key does not belong to the certificate"));
}

TEST_CASE("a placeholder made on one server is consumed on another, both with tokens and mutual TLS",
          "[security][tls][auth][peer]") {
  TestPki pki;
  TempDir dir;
  auto tokens = write_file(dir, "tokens", std::string(kToken) + "\n");
  auto secured = standard_args({"--auth-token-file", tokens, "--tls-cert", pki.server_cert, "--tls-key",
                                pki.server_key, "--tls-client-ca", pki.ca});
  auto a = ServerProcess::start(secured);
  auto b = ServerProcess::start(secured);
  auto options = tls_options(pki.ca, pki.client_cert, pki.client_key);
  options.token = kToken;
  Client ca = a->connect(options);
  Client cb = b->connect(options);
  auto on_a = ca.create_agent("EchoAgent", "a", Value{{"prefix", "a:"}});
  auto on_b = cb.create_agent("EchoAgent", "b", Value{{"prefix", "b:"}});
  CHECK(on_b.reply(on_a.reply(Msg("user", "x"))).get().text() == "b:a:x");
  CHECK(cb.info().bytes_peer_in > 0);
  auto relay = cb.create_agent("RelayAgent", "relay", Value{{"target", on_a.to_value()}});
  CHECK(relay.reply(Msg("user", "y")).get().text() == "relayed: a:y");
  // The peer connection is the TLS one: a plaintext peer would have been refused and logged.
  CHECK(a->stderr_text().find("without TLS") == std::string::npos);
  CHECK(a->stderr_text().find("login refused") == std::string::npos);
}

TEST_CASE("a Unix socket: local clients connect by path to a 0660 socket, a token still required",
          "[security][unix]") {
  TempDir dir;
  auto tokens = write_file(dir, "tokens", std::string(kToken) + "\n");
  const std::string path = dir.path() + "/agentd.sock";
  struct group* own = ::getgrgid(::getgid());
  REQUIRE(own != nullptr);
  const std::string group = own->gr_name;
  auto s = ServerProcess::start(
      standard_args({"--auth-token-file", tokens, "--unix-socket", path, "--unix-socket-group", group}));

  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0660);
  CHECK(st.st_gid == ::getgid());

  Client c = Client::connect("unix:" + path, 0, with_token(kToken));
  auto echo = c.create_agent("EchoAgent", "e");
  auto p = echo.reply(Msg("user", "local"));
  CHECK(p.get().text() == "local");
  // Placeholders still name the server's TCP address, which peers can reach.
  CHECK(p.origin() == "127.0.0.1:" + std::to_string(s->port()));
  auto refused = error_of([&] { Client::connect("unix:" + path, 0); });
  CHECK(refused.code() == ErrorCode::unauthenticated);

  // The path is taken while the server runs; it is gone once it stops.
  auto second = run_as_server(standard_args({"--auth-token-file", tokens, "--unix-socket", path}));
  CHECK(second.exit_code == 3);  // cannot listen
  CHECK_THAT(second.err, Catch::Contains("another server is listening there"));
  auto bad_group = run_as_server(standard_args(
      {"--unix-socket", dir.path() + "/other.sock", "--unix-socket-group", "no-such-group-xyz"}));
  CHECK(bad_group.exit_code == 3);
  CHECK_THAT(bad_group.err, Catch::Contains("no such group"));
  CHECK(s->signal_and_wait(SIGTERM).exit_code == 0);
  CHECK(::stat(path.c_str(), &st) != 0);
}

TEST_CASE("the Unix socket of a TLS server stays plaintext", "[security][unix][tls]") {
  TestPki pki;
  const std::string path = pki.path("tls-server.sock");
  auto s = ServerProcess::start(
      standard_args({"--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--unix-socket", path}));
  CHECK(Client::connect("unix:" + path, 0).info().server_id == s->server_id());
  CHECK(s->connect(tls_options(pki.ca)).info().server_id == s->server_id());
}

TEST_CASE("a refused login on a TLS server is logged as what it was, not as a bad frame",
          "[security][tls][auth]") {
  TestPki pki;
  TempDir dir;
  auto tokens = write_file(dir, "tokens", std::string(kToken) + "\n");
  // Debug logs: the server says when each connection has ended, which the test waits on.
  auto s = ServerProcess::start({"--port", "0", "--plugin", echo_plugin(), "--log-level", "debug",
                                 "--auth-token-file", tokens, "--tls-cert", pki.server_cert, "--tls-key",
                                 pki.server_key});
  auto options = tls_options(pki.ca);
  options.token = "not-the-token";
  auto refused = error_of([&] { s->connect(options); });
  CHECK(refused.code() == ErrorCode::unauthenticated);
  CHECK(wait_until(
      [&] { return s->stderr_text().find("login refused from 127.0.0.1:") != std::string::npos; }, 10s));
  // The refused client went away (its last frame cut short, as kj-tls clients leave).
  CHECK(wait_until([&] { return s->stderr_text().find(" ended\n") != std::string::npos; }, 10s));
  CHECK(s->stderr_text().find("bad frame:") == std::string::npos);
  CHECK(s->stderr_text().find("closing connection from") == std::string::npos);
  options.token = kToken;
  CHECK(s->connect(options).info().server_id == s->server_id());
}
