// The synchronous lane (as_server --lane-threads; schemas/agentd.capnp LaneHello) against real
// as_server processes over real sockets: a lane's calls run the agent and land in the result
// pool as RPC calls do, keep an agent's order beside the RPC connection's calls, are committed
// before they are answered with --state-dir, and a lane is refused (never half-served) without
// the right token, past --lane-threads, to a server that serves none, or after a bad hello.
#include "loopback.h"
#include "server_process.h"

#include "lane_client.h"

#include <agentd/client.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

using namespace agentd;
using namespace agentd::test;
using Catch::Contains;
using detail::LaneClient;
using detail::Outcome;

namespace {

Msg lane_text(const std::string& t) { return Msg("user", Value(t)); }

std::vector<std::string> lane_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--lane-threads", "2"};
  args.insert(args.end(), extra.begin(), extra.end());
  return standard_args(args);
}

std::string reply_text(const Outcome& o) {
  if (const auto* e = std::get_if<Error>(&o)) FAIL("the lane call failed: " << e->message());
  return std::get<Msg>(o).text();
}

Error lane_error(const Outcome& o) {
  REQUIRE(std::holds_alternative<Error>(o));
  return std::get<Error>(o);
}

Error refusal(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected an agentd::Error");
  return Error(ErrorCode::internal, "");
}

// Waits (up to 10 s) until the server's stderr says text.
bool lanes_wait_for_log(const ServerProcess& server, const std::string& text) {
  for (int i = 0; i < 1000; ++i) {
    if (server.stderr_text().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::vector<std::string> memory_texts(const AgentRef& a) {
  std::vector<std::string> out;
  for (const auto& m : a.memory()) out.push_back(m.text());
  return out;
}

}  // namespace

TEST_CASE("a lane's calls run the agent and are results like any other", "[lanes]") {
  auto server = ServerProcess::start(lane_args());
  Client c = server->connect();
  AgentRef a = c.create_agent("EchoAgent", "lane-echo", Value{{"prefix", "a:"}});
  LaneClient lane = LaneClient::connect("127.0.0.1", server->port(), "");
  CHECK(lane.server_id() == server->server_id());

  const std::string id = new_id();
  Msg one = lane_text("one");
  CHECK(reply_text(lane.reply(a.id(), id, &one)) == "a:one");
  Msg two = lane_text("two");
  CHECK(reply_text(lane.reply(a.id(), new_id(), &two)) == "a:two");
  // Announced in the result pool: the id cannot be used again, on the lane or by anyone.
  CHECK(lane_error(lane.reply(a.id(), id, &two)).code() == ErrorCode::duplicate_call_id);
  // What the agent remembers is the lane's calls, as the RPC connection sees it.
  CHECK(memory_texts(a) == std::vector<std::string>{"one", "a:one", "two", "a:two"});
  CHECK(a.call("count").get<int>() == 2);

  // A call that fails answers its error, and the lane goes on.
  CHECK(lane_error(lane.reply("no-such-agent", new_id(), &two)).code() == ErrorCode::unknown_agent);
  CHECK(lane_error(lane.reply(a.id(), "", &two)).code() == ErrorCode::bad_request);
  CHECK(reply_text(lane.reply(a.id(), new_id(), &two)) == "a:two");
}

TEST_CASE("a lane keeps an agent's order beside the RPC connection", "[lanes]") {
  TempDir dir;
  const std::string release = dir.path() + "/release";
  auto server = ServerProcess::start(lane_args());
  Client c = server->connect();
  AgentRef b = c.create_agent("BlockAgent", "lane-block", Value{{"release_file", release}});
  // The agent is busy with an RPC call: the lane's call waits in its mailbox behind it, and its
  // lane thread waits for it (the answer comes from the worker that runs it).
  Placeholder first = b.reply(lane_text("rpc"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::ofstream(release) << "go";
  });
  LaneClient lane = LaneClient::connect("127.0.0.1", server->port(), "");
  Msg second = lane_text("lane");
  const auto answered = lane.reply(b.id(), new_id(), &second);
  releaser.join();
  CHECK(first.get().text() == "rpc");
  CHECK(reply_text(answered) == "lane");
  CHECK(memory_texts(b) == std::vector<std::string>{"rpc", "lane"});
}

TEST_CASE("a lane's call is committed before it is answered", "[lanes][durability]") {
  TempDir dir;
  auto server = ServerProcess::start(lane_args({"--state-dir", dir.path() + "/state"}));
  const std::uint16_t port = server->port();
  std::string agent_id;
  {
    Client c = server->connect();
    AgentRef a = c.create_agent("EchoAgent", "lane-durable", Value{{"prefix", "d:"}});
    agent_id = a.id();
  }
  LaneClient lane = LaneClient::connect("127.0.0.1", port, "");
  for (int i = 0; i < 3; ++i) {
    Msg m = lane_text("m" + std::to_string(i));
    CHECK(reply_text(lane.reply(agent_id, new_id(), &m)) == "d:m" + std::to_string(i));
  }
  server->kill_now();  // at once after the last answer: nothing answered may be lost
  server = restart_on(port, {"--lane-threads", "2", "--state-dir", dir.path() + "/state"});
  Client c = server->connect();
  AgentRef a = c.agent(agent_id);
  CHECK(memory_texts(a) == std::vector<std::string>{"m0", "d:m0", "m1", "d:m1", "m2", "d:m2"});
  CHECK(a.call("count").get<int>() == 3);
}

TEST_CASE("lanes are refused, never half-served", "[lanes][security]") {
  SECTION("a server with --lane-threads 0 closes them and serves RPC as before") {
    auto server = ServerProcess::start(standard_args({"--lane-threads", "0"}));
    auto e = refusal([&] { LaneClient::connect("127.0.0.1", server->port(), ""); });
    CHECK(e.code() == ErrorCode::disconnected);
    Client c = server->connect();
    CHECK(c.create_agent("EchoAgent", "after-lane").reply(lane_text("x")).get().text() == "x");
    CHECK_THAT(server->stderr_text(), Contains("--lane-threads"));
  }
  SECTION("without the token, or with a wrong one") {
    TempDir dir;
    const std::string tokens = dir.write("tokens", "0123456789abcdef0123456789abcdef-lane\n");
    REQUIRE(::chmod(tokens.c_str(), 0600) == 0);
    auto server = ServerProcess::start(lane_args({"--auth-token-file", tokens}));
    auto none = refusal([&] { LaneClient::connect("127.0.0.1", server->port(), ""); });
    CHECK(none.code() == ErrorCode::unauthenticated);
    CHECK_THAT(none.message(), Contains("requires a token"));
    auto wrong = refusal([&] { LaneClient::connect("127.0.0.1", server->port(), "not-the-token"); });
    CHECK(wrong.code() == ErrorCode::unauthenticated);
    LaneClient lane =
        LaneClient::connect("127.0.0.1", server->port(), "0123456789abcdef0123456789abcdef-lane");
    ClientOptions o;
    o.token = "0123456789abcdef0123456789abcdef-lane";
    Client c = server->connect(o);
    AgentRef a = c.create_agent("EchoAgent", "lane-token");
    Msg m = lane_text("ok");
    CHECK(reply_text(lane.reply(a.id(), new_id(), &m)) == "ok");
  }
  SECTION("past --lane-threads: overloaded, and the lanes there are keep working") {
    auto server = ServerProcess::start(standard_args({"--lane-threads", "1"}));
    Client c = server->connect();
    AgentRef a = c.create_agent("EchoAgent", "lane-cap");
    LaneClient first = LaneClient::connect("127.0.0.1", server->port(), "");
    auto busy = refusal([&] { LaneClient::connect("127.0.0.1", server->port(), ""); });
    CHECK(busy.code() == ErrorCode::overloaded);
    CHECK(busy.retryable());
    CHECK_THAT(busy.message(), Contains("--lane-threads 1"));
    Msg m = lane_text("still");
    CHECK(reply_text(first.reply(a.id(), new_id(), &m)) == "still");
    // A lane closed frees its thread for the next (once that thread has seen it close).
    { LaneClient closing = std::move(first); }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool reopened = false;
    while (!reopened && std::chrono::steady_clock::now() < deadline) {
      try {
        LaneClient again = LaneClient::connect("127.0.0.1", server->port(), "");
        reopened = reply_text(again.reply(a.id(), new_id(), &m)) == "still";
      } catch (const Error& e) {
        REQUIRE(e.code() == ErrorCode::overloaded);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    CHECK(reopened);
  }
  SECTION("a hello trickled in is cut off at --login-timeout, however it trickles") {
    auto server = ServerProcess::start(lane_args({"--login-timeout", "1"}));
    const int fd = connect_loopback(server->port());
    // The magic, then a hello announcing one segment of 16 words, whose bytes then come one every
    // 100 ms (each within any per-read timeout, the whole far past the deadline).
    const std::string head = std::string("agdLANE1") + std::string("\0\0\0\0\x10\0\0\0", 8);
    REQUIRE(::send(fd, head.data(), head.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(head.size()));
    const auto start = std::chrono::steady_clock::now();
    bool closed = false;
    for (int i = 0; i < 100 && !closed; ++i) {
      const char zero = 0;
      char byte;
      const ssize_t got = ::recv(fd, &byte, 1, MSG_DONTWAIT);
      closed = got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
               ::send(fd, &zero, 1, MSG_NOSIGNAL) != 1;
      if (!closed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::close(fd);
    CHECK(closed);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    CHECK(lanes_wait_for_log(*server, "closed before its hello was answered"));
  }
  SECTION("a bad hello closes the lane alone") {
    auto server = ServerProcess::start(lane_args());
    const int fd = connect_loopback(server->port());
    const std::string junk = std::string("agdLANE1") + std::string(8, '\xff') + "garbage";
    REQUIRE(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(junk.size()));
    char byte;
    // Closed, nothing answered (a reset, when it closed with the rest of the bytes unread).
    const ssize_t got = ::recv(fd, &byte, 1, 0);
    CHECK((got == 0 || (got < 0 && errno == ECONNRESET)));
    ::close(fd);
    Client c = server->connect();
    AgentRef a = c.create_agent("EchoAgent", "after-bad-hello");
    LaneClient lane = LaneClient::connect("127.0.0.1", server->port(), "");
    Msg m = lane_text("fine");
    CHECK(reply_text(lane.reply(a.id(), new_id(), &m)) == "fine");
  }
}

namespace {

ClientOptions lanes_on() {
  ClientOptions o;
  o.lanes = LaneUse::on;
  return o;
}

// Waits (up to 10 s) until pred holds.
bool lanes_eventually(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace

TEST_CASE("ClientOptions::lanes: a reply whose get() follows takes the thread's lane", "[lanes]") {
  auto server = ServerProcess::start(lane_args());
  Client c = server->connect(lanes_on());
  AgentRef a = c.create_agent("EchoAgent", "client-lane", Value{{"prefix", "a:"}});
  for (int i = 0; i < 5; ++i)
    CHECK(a.reply(lane_text("m" + std::to_string(i))).get().text() == "a:m" + std::to_string(i));
  ServerInfo info = c.info();
  CHECK(info.lane_calls == 5);
  CHECK(info.lanes_open == 1);
  CHECK(info.lane_threads == 2);
  // Another thread gets a lane of its own, closed when the thread ends.
  std::string other;
  std::thread([&] { other = a.reply(lane_text("t")).get().text(); }).join();
  CHECK(other == "a:t");
  CHECK(c.info().lane_calls == 6);
  CHECK(lanes_eventually([&] { return c.info().lanes_open == 1; }));
  CHECK(memory_texts(a).size() == 12);
  CHECK(c.stats().requests > 0);
}

namespace {

// CPU time the calling thread has run so far.
std::chrono::nanoseconds thread_cpu() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

}  // namespace

TEST_CASE("a lane polls for its answer only while its answers come within the spin", "[lanes]") {
  auto server = ServerProcess::start(lane_args());
  Client c = server->connect();
  AgentRef fast = c.create_agent("EchoAgent", "spin-fast");
  AgentRef slow = c.create_agent("EchoAgent", "spin-slow", Value{{"sleep_ms", 600}});
  LaneClient lane = LaneClient::connect("127.0.0.1", server->port(), "");
  CHECK_FALSE(lane.polls_next());  // no spin set: it sleeps in read() at once
  // Far longer than any echo takes here, even sanitized on busy cores; far shorter than a slow call.
  lane.set_spin(std::chrono::milliseconds(200));
  CHECK(lane.polls_next());
  Msg x = lane_text("x");
  CHECK(reply_text(lane.reply(fast.id(), new_id(), &x)) == "x");
  CHECK(lane.polls_next());

  // A slow answer: polled for up to the spin, then slept for; the next call sleeps at once.
  CHECK(reply_text(lane.reply(slow.id(), new_id(), &x)) == "x");
  CHECK_FALSE(lane.polls_next());
  const auto cpu0 = thread_cpu();
  CHECK(reply_text(lane.reply(slow.id(), new_id(), &x)) == "x");
  // Polling would have run this thread for most of the 200 ms spin.
  CHECK(thread_cpu() - cpu0 < std::chrono::milliseconds(50));
  CHECK_FALSE(lane.polls_next());

  // One quick answer turns polling back on.
  CHECK(reply_text(lane.reply(fast.id(), new_id(), &x)) == "x");
  CHECK(lane.polls_next());

  // An answer of many reads while polling arrives whole.
  const std::string big(300 * 1000, 'b');
  Msg large = lane_text(big);
  CHECK(reply_text(lane.reply(fast.id(), new_id(), &large)) == big);
  CHECK(lane.polls_next());

  // The caller's wait still bounds a polled-for answer: polling for 200 ms, then read() times out.
  lane.set_spin(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  auto e = refusal([&] {
    lane.reply(slow.id(), new_id(), &x, std::chrono::milliseconds(0), std::chrono::milliseconds(150));
  });
  CHECK(e.code() == ErrorCode::timeout);
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(150));
}

TEST_CASE("a lane's server thread polls for the next call only while calls come within --lane-spin",
          "[lanes]") {
  // 10 ms of polling after each answer, against calls 60 ms apart: the thread polls after the
  // first answer, sees the next call come later, and from then on sleeps at once. Polling after
  // every answer would cost the server about 10 ms of CPU a call.
  auto server = ServerProcess::start(lane_args({"--lane-spin", "10000"}));
  Client c = server->connect();
  AgentRef a = c.create_agent("EchoAgent", "server-spin");
  LaneClient lane = LaneClient::connect("127.0.0.1", server->port(), "");
  Msg x = lane_text("x");
  CHECK(reply_text(lane.reply(a.id(), new_id(), &x)) == "x");
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  CHECK(reply_text(lane.reply(a.id(), new_id(), &x)) == "x");
  const double cpu0 = c.info().cpu_seconds;
  constexpr int kCalls = 20;
  for (int i = 0; i < kCalls; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    CHECK(reply_text(lane.reply(a.id(), new_id(), &x)) == "x");
  }
  CHECK(c.info().cpu_seconds - cpu0 < kCalls * 0.010 / 2);
  // Calls back to back: polled for, and answered as before.
  for (int i = 0; i < 200; ++i) CHECK(reply_text(lane.reply(a.id(), new_id(), &x)) == "x");
  CHECK(c.info().lane_calls == kCalls + 202);
}

TEST_CASE("ClientOptions::lane_spin out of range is refused, naming the option", "[lanes]") {
  auto server = ServerProcess::start(lane_args());
  for (auto bad :
       {std::chrono::microseconds(-1), ClientOptions::kMaxLaneSpin + std::chrono::microseconds(1)}) {
    ClientOptions o;
    o.lane_spin = bad;
    auto e = refusal([&] { server->connect(o); });
    CHECK(e.code() == ErrorCode::bad_args);
    CHECK_THAT(e.message(), Contains("ClientOptions::lane_spin"));
  }
  // lane_spin 0: lanes still carry calls, the thread sleeping for each answer.
  ClientOptions o = lanes_on();
  o.lane_spin = std::chrono::microseconds(0);
  Client c = server->connect(o);
  AgentRef a = c.create_agent("EchoAgent", "spin-off");
  for (int i = 0; i < 3; ++i) CHECK(a.reply(lane_text("x")).get().text() == "x");
  CHECK(c.info().lane_calls == 3);
}

TEST_CASE("a lane answers before the host's bookkeeping, yet what the caller asks next includes the call",
          "[lanes]") {
  // The lane thread writes the answer as soon as the call is counted; the result pool and the
  // agent's mailbox learn of it after. A caller that reads the answer and at once asks the server
  // about the call, or uses its result, must not see the difference.
  auto server = ServerProcess::start(lane_args());
  Client c = server->connect(lanes_on());
  AgentRef a = c.create_agent("EchoAgent", "early-a");
  AgentRef b = c.create_agent("EchoAgent", "early-b", Value{{"prefix", "b:"}});
  const auto lane_calls0 = c.info().lane_calls;
  constexpr int kRounds = 40;
  for (int i = 0; i < kRounds; ++i) {
    const std::string text = "m" + std::to_string(i);
    Placeholder p = a.reply(lane_text(text));
    REQUIRE(p.get().text() == text);
    // Counted before the answer: the agent's and the server's counts include it (the agent's
    // count, its "count" calls below too; a reply with a placeholder input takes no lane).
    CHECK(a.info().completed_calls == 2 * static_cast<std::uint64_t>(i) + 1);
    CHECK(c.info().lane_calls == lane_calls0 + static_cast<std::uint64_t>(i) + 1);
    // Its result by call id, as another agent's input: found (waited for if still being published).
    CHECK(b.reply(p).get().text() == "b:" + text);
    // The agent's next call, on the RPC connection, runs after this one finished.
    CHECK(a.call("count").get<int>() == i + 1);
  }
  CHECK(memory_texts(a).size() == 2 * kRounds);
}

TEST_CASE("ClientOptions::lanes: replies not waited for at once still run side by side and in order",
          "[lanes]") {
  TempDir dir;
  const std::string release = dir.path() + "/release";
  auto server = ServerProcess::start(lane_args());
  Client c = server->connect(lanes_on());
  AgentRef a = c.create_agent("EchoAgent", "lane-order");
  SECTION("two replies to one agent, read in the other order") {
    Placeholder p1 = a.reply(lane_text("one"));
    Placeholder p2 = a.reply(lane_text("two"));
    CHECK(p2.get().text() == "two");
    CHECK(p1.get().text() == "one");
    CHECK(memory_texts(a) == std::vector<std::string>{"one", "one", "two", "two"});
  }
  SECTION("two blocking agents run at once without get() (a held reply leaves within a millisecond)") {
    AgentRef b1 = c.create_agent("BlockAgent", "lane-b1", Value{{"release_file", release}});
    AgentRef b2 = c.create_agent("BlockAgent", "lane-b2", Value{{"release_file", release}});
    Placeholder p1 = b1.reply(lane_text("x"));
    Placeholder p2 = b2.reply(lane_text("y"));
    CHECK(lanes_eventually([&] { return c.info().calls_running == 2; }));
    std::ofstream(release) << "go";
    CHECK(p1.get().text() == "x");
    CHECK(p2.get().text() == "y");
  }
  SECTION("a reply held on one client keeps its place when the thread turns to another") {
    Client other = server->connect(lanes_on());
    AgentRef b = other.create_agent("EchoAgent", "lane-other-client");
    Placeholder p1 = a.reply(lane_text("one"));  // held for this thread's lane
    Placeholder q = b.reply(lane_text("b"));     // held in its place: "one" goes first
    Placeholder p2 = a.reply(lane_text("two"));
    CHECK(p2.get().text() == "two");
    CHECK(q.get().text() == "b");
    CHECK(p1.get().text() == "one");
    CHECK(memory_texts(a) == std::vector<std::string>{"one", "one", "two", "two"});
  }
  SECTION("a placeholder dropped unread, passed on, or read on another thread") {
    { a.reply(lane_text("dropped")); }
    AgentRef b = c.create_agent("EchoAgent", "lane-consumer", Value{{"prefix", "b:"}});
    Placeholder p = a.reply(lane_text("passed"));
    CHECK(b.reply(p).get().text() == "b:passed");
    Placeholder q = a.reply(lane_text("elsewhere"));
    std::string got;
    std::thread([&] { got = q.get().text(); }).join();
    CHECK(got == "elsewhere");
    CHECK(memory_texts(a) ==
          std::vector<std::string>{"dropped", "dropped", "passed", "passed", "elsewhere", "elsewhere"});
  }
}

TEST_CASE("ClientOptions::lanes: without lanes on the server, or where they cannot be used", "[lanes]") {
  SECTION("a server that serves none: the RPC connection carries everything") {
    auto server = ServerProcess::start(standard_args({"--lane-threads", "0"}));
    Client c = server->connect(lanes_on());
    AgentRef a = c.create_agent("EchoAgent", "no-lanes");
    for (int i = 0; i < 3; ++i) CHECK(a.reply(lane_text("x")).get().text() == "x");
    CHECK(c.info().lane_calls == 0);
  }
  SECTION("a child serves lanes, and a client with the default options takes them") {
    ChildOptions o;
    o.plugins = {echo_plugin()};
    o.server_path = as_server_path();
    Client c = Client::spawn_child(o);
    AgentRef a = c.create_agent("EchoAgent", "child-lane");
    CHECK(a.reply(lane_text("x")).get().text() == "x");
    CHECK(c.info().lane_calls == 1);
  }
  SECTION("single_thread clients refuse them, saying so") {
    auto server = ServerProcess::start(lane_args());
    ClientOptions o = lanes_on();
    o.single_thread = true;
    auto e = refusal([&] { server->connect(o); });
    CHECK(e.code() == ErrorCode::bad_args);
    CHECK_THAT(e.message(), Contains("ClientOptions::lanes"));
    // LaneUse::automatic (the default): the RPC connection, silently.
    o.lanes = LaneUse::automatic;
    Client c = server->connect(o);
    CHECK(c.create_agent("EchoAgent", "single-thread-lane").reply(lane_text("x")).get().text() == "x");
    CHECK(c.info().lane_calls == 0);
  }
  SECTION("LaneUse::off: the RPC connection, on a server that serves lanes") {
    auto server = ServerProcess::start(lane_args());
    ClientOptions o;
    o.lanes = LaneUse::off;
    Client c = server->connect(o);
    CHECK(c.create_agent("EchoAgent", "lanes-off").reply(lane_text("x")).get().text() == "x");
    CHECK(c.info().lane_calls == 0);
  }
}

TEST_CASE("a lane idle past --lane-idle-timeout closes its thread, and the client opens a new one",
          "[lanes]") {
  auto server = ServerProcess::start(lane_args({"--lane-idle-timeout", "1"}));
  Client c = server->connect();  // the default options: LaneUse::automatic
  AgentRef a = c.create_agent("EchoAgent", "lane-idle");
  CHECK(a.reply(lane_text("first")).get().text() == "first");
  CHECK(c.info().lanes_open == 1);
  // Past half the idle time the client opens a new lane rather than write to one the server may
  // be closing; past all of it the server has closed the old one (and its thread has ended).
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  CHECK(a.reply(lane_text("second")).get().text() == "second");
  CHECK(lanes_eventually([&] { return c.info().lanes_open == 0; }));
  CHECK(a.reply(lane_text("third")).get().text() == "third");
  ServerInfo info = c.info();
  CHECK(info.lane_calls == 3);
  CHECK(info.lanes_open == 1);
  CHECK(memory_texts(a) == std::vector<std::string>{"first", "first", "second", "second", "third", "third"});
}

TEST_CASE("ClientOptions::lanes: a lane lost with its server is reported as the connection's calls are",
          "[lanes]") {
  auto server = ServerProcess::start(lane_args());
  const std::uint16_t port = server->port();
  Client c = server->connect(lanes_on());
  AgentRef b =
      c.create_agent("BlockAgent", "lane-lost", Value{{"release_file", "/nonexistent"}, {"max_ms", 20000}});
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    server->kill_now();
    server = restart_on(port, {"--lane-threads", "2"});
  });
  // On the lane when the server dies: the client asks the restarted server about it by call id.
  auto e = refusal([&] { b.reply(lane_text("x")).get(); });
  killer.join();
  CHECK(e.code() == ErrorCode::interrupted);
}

TEST_CASE("ClientOptions::lanes: get(timeout) on a lane's call times out, and its result still comes",
          "[lanes]") {
  TempDir dir;
  const std::string release = dir.path() + "/release";
  auto server = ServerProcess::start(lane_args());
  Client c = server->connect();
  AgentRef b1 = c.create_agent("BlockAgent", "lane-timeout-1", Value{{"release_file", release}});
  AgentRef b2 = c.create_agent("BlockAgent", "lane-timeout-2", Value{{"release_file", release}});
  // get(0) asks without waiting: the held call goes on the connection, not the lane.
  Placeholder p = b1.reply(lane_text("x"));
  CHECK(refusal([&] { p.get(std::chrono::milliseconds(0)); }).code() == ErrorCode::timeout);
  // On the lane: its answer is not there in time; the call goes on and is looked up.
  Placeholder q = b2.reply(lane_text("y"));
  const auto start = std::chrono::steady_clock::now();
  CHECK(refusal([&] { q.get(std::chrono::milliseconds(300)); }).code() == ErrorCode::timeout);
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(300));
  std::ofstream(release) << "go";
  CHECK(p.get().text() == "x");
  CHECK(q.get().text() == "y");
}

TEST_CASE("a --lane-idle-timeout out of range stops the server at start, naming the option", "[lanes]") {
  for (const char* bad : {"0", "0.5", "86401", "soon"}) {
    INFO("--lane-idle-timeout " << bad);
    auto r = run_as_server(standard_args({"--lane-idle-timeout", bad}));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("--lane-idle-timeout"));
  }
}

TEST_CASE("a --lane-spin out of range stops the server at start, naming the option", "[lanes]") {
  for (const char* bad : {"-1", "10001", "soon"}) {
    INFO("--lane-spin " << bad);
    auto r = run_as_server(standard_args({"--lane-spin", bad}));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("--lane-spin"));
  }
}
