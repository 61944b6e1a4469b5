// Stuck agents and full servers against real as_server processes (issue 29, items 11 and 12):
// calls blocked in agent code fill every worker, yet creation, server operations and other
// agents' calls are answered; call deadlines (--call-timeout, --class-call-timeout) fail calls
// with timeout; calls past --slow-call-warn are logged once and show in info, metrics and
// STATUS=; a full server (--max-agents) fails creations fast; an empty model file on reload is
// refused.
#include "notify_socket.h"
#include "scoped_env.h"
#include "http_get.h"
#include "server_process.h"
#include "test_names.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>
#include <error_of.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

using namespace agentd::test;

namespace {

Msg text(const std::string& t) { return Msg("user", Value(t)); }

std::size_t count_of(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

ClientOptions within(std::chrono::milliseconds timeout) {
  ClientOptions o;
  o.timeout = timeout;
  return o;
}

}  // namespace

TEST_CASE(
    "with every worker blocked in agent code, creation, server operations and other "
    "agents' calls are still answered",
    "[stuck]") {
  TempDir dir;
  const std::string release = dir.path() + "/release";
  // EchoAgent calls get a 1 s deadline; BlockAgent calls none.
  auto server =
      ServerProcess::start(standard_args({"--max-workers", "32", "--class-call-timeout", "EchoAgent=1"}));
  Client c = server->connect(within(10s));
  auto blocked = c.create_agents("BlockAgent", 32, Value{{"release_file", release}});
  AgentRef bystander = c.create_agent("EchoAgent", "bystander");
  std::vector<Placeholder> stuck;
  for (auto& a : blocked) stuck.push_back(a.reply(text("stuck")));
  REQUIRE(wait_until([&] { return c.info().workers_busy == 32; }, 10s));
  const auto full = c.info();
  CHECK(full.workers_max == 32);
  CHECK(full.workers == 32);

  // Constructors and destructors do not wait for a call worker.
  AgentRef made = c.create_agent("EchoAgent", "made-while-stuck");
  CHECK(c.list_agents().size() == 34);
  c.delete_agent(made.id());
  CHECK(c.list_agents().size() == 33);
  c.ping();
  // Another agent's call is answered at its deadline, saying why it did not run.
  const auto asked = std::chrono::steady_clock::now();
  auto waiting = bystander.reply(text("hello"));
  Error e = error_of([&] { waiting.get(); });
  CHECK(e.code() == ErrorCode::timeout);
  CHECK(e.agent_id() == bystander.id());
  CHECK_THAT(e.message(), Contains("--class-call-timeout"));
  CHECK_THAT(e.message(), Contains("every worker thread was busy (--max-workers 32"));
  CHECK_THAT(e.message(), Contains("did not run"));
  CHECK(std::chrono::steady_clock::now() - asked < 5s);
  CHECK(c.info().calls_timed_out == 1);

  // Released: the stuck calls finish, and the bystander runs calls again (the timed-out one
  // never ran: its memory holds only the new call).
  dir.write("release", "");
  for (auto& p : stuck) CHECK(p.get().text() == "stuck");
  CHECK(bystander.reply(text("again")).get().text() == "again");
  std::vector<std::string> heard;
  for (const auto& m : bystander.memory())
    if (m.name == "user") heard.push_back(m.text());
  CHECK(heard == std::vector<std::string>{"again"});
}

TEST_CASE(
    "a call past its --call-timeout fails with timeout, and the agent's next call waits for "
    "the stuck one and its effects stay",
    "[stuck]") {
  TempDir dir;
  const std::string release = dir.path() + "/release";
  auto server = ServerProcess::start(standard_args({"--call-timeout", "0.5"}));
  Client c = server->connect(within(10s));
  AgentRef a = c.create_agent("BlockAgent", "blocker", Value{{"release_file", release}});
  const auto sent = std::chrono::steady_clock::now();
  auto running = a.reply(text("first"));
  auto queued = a.reply(text("second"));
  Error e = error_of([&] { running.get(); });
  CHECK(e.code() == ErrorCode::timeout);
  CHECK_FALSE(e.retryable());
  CHECK(e.agent_id() == a.id());
  CHECK(e.agent_class() == "BlockAgent");
  CHECK_THAT(e.message(), Contains("did not finish within its deadline (0.5 s after it was "
                                   "queued, --call-timeout)"));
  CHECK_THAT(e.message(), Contains("the agent's later calls wait for it"));
  CHECK(std::chrono::steady_clock::now() - sent < 5s);
  // The call behind it did not start: it fails too, without running.
  Error q = error_of([&] { queued.get(); });
  CHECK(q.code() == ErrorCode::timeout);
  CHECK(q.retryable());
  CHECK_THAT(q.message(), Contains("waited behind the agent's earlier calls"));
  CHECK(c.info().calls_timed_out == 2);

  // Released: the stuck call ends (its result discarded); the next call runs after it, and the
  // agent's memory keeps what the timed-out call did (it heard "first", never "second").
  dir.write("release", "");
  CHECK(a.reply(text("third")).get().text() == "third");
  std::vector<std::string> heard;
  for (const auto& m : a.memory())
    if (m.name == "user") heard.push_back(m.text());
  CHECK(heard == std::vector<std::string>{"first", "third"});
  // Finished calls get no deadline trouble; the server counts 2 timed out, none since.
  CHECK(c.info().calls_timed_out == 2);
}

TEST_CASE(
    "a call in progress past --slow-call-warn is logged once and shows in info, metrics "
    "and STATUS",
    "[stuck]") {
  TempDir dir;
  const std::string release = dir.path() + "/release";
  NotifySocket sock("@agentd-test-stuck-" + unique_suffix());
  const auto metrics_port = unused_port();
  std::unique_ptr<ServerProcess> server;
  {
    ScopedEnv env{{"NOTIFY_SOCKET", sock.name()}, {"WATCHDOG_USEC", "400000"}};
    ::unsetenv("WATCHDOG_PID");
    server = ServerProcess::start(standard_args(
        {"--slow-call-warn", "0.3", "--max-workers", "8", "--metrics-port", std::to_string(metrics_port)}));
  }
  Client c = server->connect(within(10s));
  AgentRef a = c.create_agent("BlockAgent", "sleepy", Value{{"release_file", release}});
  auto p = a.reply(text("zzz"));
  const std::string line =
      "slow call: agent=" + a.id() + " class=BlockAgent kind=reply call_id=" + p.call_id();
  REQUIRE(wait_until([&] { return server->stderr_text().find(line) != std::string::npos; }, 10s));
  CHECK_THAT(server->stderr_text(), Contains("(over --slow-call-warn 0.3 s)"));
  const auto i = c.info();
  CHECK(i.calls_slow == 1);
  CHECK(i.calls_slow_total == 1);
  CHECK(i.workers_busy >= 1);
  CHECK(i.workers_max == 8);
  const std::string m = get(metrics_port, "/metrics");
  CHECK_THAT(m, Contains("\nagentd_calls_slow 1\n"));
  CHECK_THAT(m, Contains("\nagentd_calls_slow_total 1\n"));
  CHECK_THAT(m, Contains("\nagentd_workers_max 8\n"));
  CHECK_THAT(m, Contains("\nagentd_workers_busy "));
  std::vector<std::string> seen;
  auto status = sock.receive_until("1 slow call(s)", seen, 10s);
  REQUIRE(status);
  CHECK_THAT(*status, Contains("/8 busy"));

  dir.write("release", "");
  CHECK(p.get().text() == "zzz");
  REQUIRE(wait_until([&] { return c.info().calls_slow == 0; }, 10s));
  CHECK(c.info().calls_slow_total == 1);
  // Logged once, however long it took.
  CHECK(count_of(server->stderr_text(), "slow call: ") == 1);
}

TEST_CASE(
    "a full server (--max-agents) fails a creation within seconds, not after the client's "
    "timeout, while full queues are still retried",
    "[stuck][limits]") {
  auto server = ServerProcess::start(standard_args({"--max-agents", "1"}));
  Client c = server->connect(within(60s));  // retried until this before
  c.create_agent("EchoAgent", "only");
  const auto asked = std::chrono::steady_clock::now();
  Error e = error_of([&] { c.create_agent("EchoAgent", "one-too-many"); });
  const auto took = std::chrono::steady_clock::now() - asked;
  CHECK(e.code() == ErrorCode::overloaded);
  CHECK_THAT(e.message(), Contains("--max-agents 1"));
  CHECK_THAT(e.message(), Contains("ClientOptions::agent_limit_retry"));
  CHECK(took < 10s);
  CHECK(took >= 300ms);  // a short bounded retry (2 s by default), in case a deletion frees a place

  SECTION("agent_limit_retry 0 fails at once") {
    ClientOptions o = within(60s);
    o.agent_limit_retry = std::chrono::milliseconds(0);
    Client h = server->connect(o);
    const auto t0 = std::chrono::steady_clock::now();
    Error now = error_of([&] { h.create_agent("EchoAgent"); });
    CHECK(now.code() == ErrorCode::overloaded);
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  }
}

TEST_CASE(
    "an empty model file on reload is refused and the loaded configs kept, and [] removes "
    "them on purpose",
    "[stuck][models]") {
  TempDir dir;
  auto path = dir.write("models.yaml", "- config_name: m1\n  model_type: echo\n");
  auto server = ServerProcess::start(standard_args({"--model-config-path", path}));
  Client c = server->connect(within(10s));
  auto has_m1 = [&] {
    auto names = c.info().model_configs;
    return std::find(names.begin(), names.end(), "m1") != names.end();
  };
  REQUIRE(has_m1());
  const auto version = c.info().model_config_version;

  // SIGHUP with the file emptied (a deploy that truncated it): refused, logged, kept.
  dir.write("models.yaml", "");
  ::kill(server->pid(), SIGHUP);
  REQUIRE(wait_until(
      [&] { return server->stderr_text().find("kept the previous model configs") != std::string::npos; },
      10s));
  CHECK_THAT(server->stderr_text(), Contains(path + ": holds no model configs"));
  CHECK_THAT(server->stderr_text(), Contains("write `[]`"));
  CHECK(has_m1());
  CHECK(c.info().model_config_version == version);

  // The same over RPC (agentctl reload --file): an error naming what to do.
  Error e = error_of([&] { c.set_model_configs("# nothing yet\n"); });
  CHECK(e.code() == ErrorCode::config_error);
  CHECK_THAT(e.message(), Contains("refusing to drop the 1 loaded (m1)"));
  CHECK(has_m1());

  // Said explicitly, it is done.
  c.set_model_configs("[]\n");
  CHECK_FALSE(has_m1());
}

TEST_CASE("AgentRef::with_timeout gives one reference's calls a deadline of their own", "[stuck]") {
  TempDir dir;
  const std::string release = dir.path() + "/release";
  auto server = ServerProcess::start(standard_args());  // no server deadline
  Client c = server->connect(within(10s));
  AgentRef a = c.create_agent("BlockAgent", "b", Value{{"release_file", release}});
  AgentRef hasty = a.with_timeout(300ms);
  CHECK(hasty.timeout() == 300ms);
  CHECK(a.timeout() == 0ms);
  Error e = error_of([&] { hasty.reply(text("x")).get(); });
  CHECK(e.code() == ErrorCode::timeout);
  CHECK_THAT(e.message(), Contains("0.3 s after it was queued, the caller's AgentRef::with_timeout"));
  Error bad = error_of([&] { a.with_timeout(std::chrono::milliseconds(-1)); });
  CHECK(bad.code() == ErrorCode::bad_args);
  dir.write("release", "");
  // Without a deadline the same agent's call waits as long as it takes.
  CHECK(a.reply(text("y")).get().text() == "y");
}

TEST_CASE("deadline and slow-call options are validated", "[stuck]") {
  auto no_seconds = run_as_server(standard_args({"--class-call-timeout", "EchoAgent"}));
  CHECK(no_seconds.exit_code == 2);
  CHECK_THAT(no_seconds.err, Contains("--class-call-timeout EchoAgent: expected CLASS=SECONDS"));
  auto bad_seconds = run_as_server(standard_args({"--class-call-timeout", "EchoAgent=soon"}));
  CHECK(bad_seconds.exit_code == 2);
  CHECK_THAT(bad_seconds.err, Contains("EchoAgent=soon"));
  auto negative = run_as_server(standard_args({"--call-timeout=-1"}));
  CHECK(negative.exit_code == 2);
  CHECK_THAT(negative.err, Contains("--call-timeout -1"));
}
