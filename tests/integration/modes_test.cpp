// Child mode (the client starts and stops its own as_server, which also stops when the parent
// dies) and local mode (same API, agents in this process) give what independent mode gives.
#include "server_process.h"
#include "test_names.h"

#include <agentd/agentd.h>

#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <thread>

using namespace agentd::test;

// A class compiled into this program: local mode hosts it without a plugin.
class ShoutAgent : public agentd::Agent {
 public:
  using Agent::Agent;
  Msg reply(const Msg& x) override { return Msg(name(), x.text() + "!"); }
};
AGENTD_REGISTER_AGENT(ShoutAgent);

namespace {

agentd::ChildOptions child_options() {
  agentd::ChildOptions o;
  o.plugins = {echo_plugin()};
  o.server_path = as_server_path();
  o.extra_args = {"--log-level", "warn"};
  return o;
}

// One orchestration program; its observable results as text lines.
std::vector<std::string> run_program(Client& c) {
  std::vector<std::string> out;
  auto e = c.create_agent("EchoAgent", "E", Value{{"prefix", "re: "}}, "e");
  auto t1 = c.create_agent("TrailAgent", "T1", Value::object(), "t1");
  auto t2 = c.create_agent("TrailAgent", "T2", Value::object(), "t2");
  auto f = c.create_agent("FlakyAgent", "F", Value::object(), "f");

  Placeholder p = t1.reply(Msg("user", "x", "user"));
  Placeholder q = t2.reply(p);
  Placeholder r = e.reply(q);
  Placeholder s = t1.reply(r);
  e.observe(Msg("user", Value{{"k", {1, 2.5, "three", nullptr, true}}}, "user"));
  Placeholder failed = t2.reply(f.reply(Msg("user", "fail")));
  Placeholder after = t2.reply(Msg("user", "y"));
  Placeholder count = e.call_async("count");

  out.push_back(s.get().text());
  out.push_back(q.get().text());
  out.push_back(after.get().text());
  out.push_back(count.get().text());
  try {
    failed.get();
    out.push_back("no error");
  } catch (const Error& err) {
    out.push_back(std::string(agentd::to_string(err.code())) + " " + err.agent_id() + " " +
                  err.agent_class());
  }
  out.push_back(e.call("add", Value{{"a", 1}, {"b", 2}}).dump());
  for (const auto& a : {e, t1, t2, f})
    for (const auto& m : a.memory()) out.push_back(a.id() + ": " + m.name + "/" + m.role + " " + m.text());
  for (const auto& info : c.list_agents())
    out.push_back(info.id + " " + info.class_name + " " + std::to_string(info.completed_calls));
  return out;
}

}  // namespace

TEST_CASE("child mode starts its own as_server and stops it with the client", "[modes][child]") {
  pid_t server_pid = 0;
  {
    auto c = Client::spawn_child(child_options());
    auto info = c.info();
    server_pid = static_cast<pid_t>(info.pid);
    CHECK(server_pid != ::getpid());
    CHECK(process_alive(server_pid));
    CHECK(c.port() != 0);
    CHECK(c.address() == "127.0.0.1:" + std::to_string(c.port()));
    auto e = c.create_agent("EchoAgent", "E");
    CHECK(e.reply(Msg("user", "child")).get().content == "child");
  }
  CHECK_FALSE(process_alive(server_pid));
  CHECK(::kill(server_pid, 0) != 0);  // gone and reaped
}

TEST_CASE("child mode reports a child that cannot start", "[modes][child]") {
  auto o = child_options();
  o.plugins.push_back("/nonexistent/libmissing.so");
  auto e = [&] {
    try {
      Client::spawn_child(o);
    } catch (const Error& err) {
      return err;
    }
    FAIL("expected an error");
    return Error(ErrorCode::internal, "unreachable");
  }();
  CHECK_THAT(e.message(), Contains("status 4"));

  auto o2 = child_options();
  o2.server_path = "/nonexistent/bin/as_server";
  CHECK_THROWS_AS(Client::spawn_child(o2), Error);
}

TEST_CASE("a child server stops when its parent is killed with SIGKILL", "[modes][child]") {
  // Become the subreaper, so the orphaned grandchild is reparented to us and can be reaped.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t helper = ::fork();
  REQUIRE(helper >= 0);
  if (helper == 0) {
    // The helper: a main process in child mode, then it waits to be killed.
    ::close(fds[0]);
    long pid = -1;
    try {
      auto c = Client::spawn_child(child_options());
      pid = static_cast<long>(c.info().pid);
      (void)!::write(fds[1], &pid, sizeof pid);
      for (;;) ::pause();
    } catch (...) {
      (void)!::write(fds[1], &pid, sizeof pid);
    }
    ::_exit(1);
  }
  ::close(fds[1]);
  long server_pid = -1;
  pollfd pfd{fds[0], POLLIN, 0};
  REQUIRE(::poll(&pfd, 1, 30000) == 1);
  REQUIRE(::read(fds[0], &server_pid, sizeof server_pid) == sizeof server_pid);
  ::close(fds[0]);
  REQUIRE(server_pid > 0);
  REQUIRE(process_alive(static_cast<pid_t>(server_pid)));

  ::kill(helper, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(helper, &status, 0) == helper);
  CHECK(WIFSIGNALED(status));

  // The orphaned server notices and exits on its own (we reap it as the subreaper).
  bool gone = wait_until(
      [&] {
        int st = 0;
        pid_t r = ::waitpid(static_cast<pid_t>(server_pid), &st, WNOHANG);
        return r == server_pid || !process_alive(static_cast<pid_t>(server_pid));
      },
      20s);
  if (!gone) ::kill(static_cast<pid_t>(server_pid), SIGKILL);
  CHECK(gone);
}

TEST_CASE("local mode runs the same program to the same results as independent and child mode",
          "[modes][local]") {
  auto s = ServerProcess::start(standard_args());
  auto independent = s->connect();
  auto want = run_program(independent);

  agentd::LocalOptions lo;
  lo.plugins = {echo_plugin()};
  auto local = Client::local(lo);
  CHECK(local.address() == "local");
  CHECK(local.port() == 0);
  CHECK(run_program(local) == want);

  auto child = Client::spawn_child(child_options());
  CHECK(run_program(child) == want);

  // And what it computes is right, not merely the same.
  REQUIRE(want.size() > 6);
  CHECK(want[0] == "re: x>T1>T2>T1");
  CHECK(want[1] == "x>T1>T2");
  CHECK(want[2] == "y>T2");
  CHECK(want[3] == "1");
  CHECK(want[4] == "agent_failed f FlakyAgent");
  CHECK(want[5] == "3.0");
}

TEST_CASE("local mode hosts the program's own agent classes and reports plugin errors", "[modes][local]") {
  auto local = Client::local();
  auto shout = local.create_agent("ShoutAgent", "S");
  CHECK(shout.reply(Msg("user", "hey")).get().content == "hey!");
  CHECK(local.info().classes == std::vector<std::string>{"ShoutAgent"});

  agentd::LocalOptions bad;
  bad.plugins = {"/nonexistent/libnope.so"};
  try {
    Client::local(bad);
    FAIL("expected plugin_error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::plugin_error);
    CHECK_THAT(e.message(), Contains("/nonexistent/libnope.so"));
  }
}

TEST_CASE("a single-thread client runs the same program to the same results", "[modes][single_thread]") {
  auto s = ServerProcess::start(standard_args());
  auto threaded = s->connect();
  auto want = run_program(threaded);

  agentd::ClientOptions one;
  one.single_thread = true;
  {
    auto fresh = ServerProcess::start(standard_args());  // the program's agent ids are fixed
    auto single = fresh->connect(one);
    CHECK(run_program(single) == want);
  }
  auto o = child_options();
  o.client.single_thread = true;
  auto child = Client::spawn_child(o);
  CHECK(run_program(child) == want);

  // A streamed reply's chunks come one by one while the thread waits for them.
  auto stream = child.create_agent("StreamEchoAgent", "S");
  auto p = stream.reply_stream(Msg("user", Value{{"count", 5}, {"gap_ms", 10}}));
  for (int i = 0; i < 5; ++i) {
    auto chunk = p.next_chunk();
    REQUIRE(chunk.has_value());
    CHECK(*chunk == std::to_string(i) + " ");
  }
  CHECK_FALSE(p.next_chunk().has_value());
  CHECK(p.get().text() == "0 1 2 3 4 ");
}

TEST_CASE("a single-thread client sends a call when it is made, and is used from its own thread only",
          "[modes][single_thread]") {
  auto s = ServerProcess::start(standard_args());
  auto observer = s->connect();
  agentd::ClientOptions one;
  one.single_thread = true;
  auto single = s->connect(one);
  auto e = single.create_agent("EchoAgent", "E", Value::object(), "e");

  // Not waited for: the call still reaches the server and runs while this thread does something
  // else that does not run its connection (here: joins a thread that watches the agent through
  // another client).
  auto remote = observer.agent("e");
  Placeholder p = e.reply(Msg("user", "sent at once"));
  bool ran = false;
  std::thread watcher([&] { ran = wait_until([&] { return remote.memory().size() == 2; }, 10s); });
  watcher.join();
  CHECK(ran);
  CHECK(p.get().text() == "sent at once");

  // Another thread may not wait on it: that thread cannot run its connection. q's agent sleeps,
  // so its result cannot be there yet (issuing a call runs the loop, which may take in a quick
  // answer, and a result that is there is returned on any thread).
  auto slow = single.create_agent("EchoAgent", "S", Value{{"sleep_ms", 500}});
  Placeholder q = slow.reply(Msg("user", "q"));
  std::optional<Error> from_get, from_call;
  std::thread other([&] {
    try {
      q.get();
    } catch (const Error& err) {
      from_get = err;
    }
    try {
      e.call("ping");
    } catch (const Error& err) {
      from_call = err;
    }
  });
  other.join();
  REQUIRE(from_get);
  CHECK(from_get->code() == ErrorCode::bad_request);
  CHECK_THAT(from_get->message(), Contains("Placeholder::get()") && Contains("single_thread"));
  REQUIRE(from_call);
  CHECK(from_call->code() == ErrorCode::bad_request);
  CHECK(q.get().text() == "q");  // on its own thread it still works

  // Two single-thread clients share this thread's loop; a threaded client beside them still
  // answers (its loop thread wakes this thread's loop).
  auto second = s->connect(one);
  auto e2 = second.create_agent("EchoAgent", "E2");
  Placeholder a = e.reply(Msg("user", "a"));
  Placeholder b = e2.reply(a);
  Placeholder c = remote.reply(Msg("user", "c"));
  CHECK(b.get().text() == "a");
  CHECK(c.get().text() == "c");
  second.close();
  CHECK(e.reply(Msg("user", "after")).get().text() == "after");

  agentd::LocalOptions lo;
  lo.client.single_thread = true;
  try {
    Client::local(lo);
    FAIL("expected bad_args");
  } catch (const Error& err) {
    CHECK(err.code() == ErrorCode::bad_args);
    CHECK_THAT(err.message(), Contains("single_thread"));
  }
}
