// Agents written in Python (as_server --agent-dir), driven from C++: the same calls, placeholders
// across servers both ways, errors, start-up refusals and a blocked asyncio loop. The agents are
// in tests/integration/python_agents/chain_agents.py.
#include "error_of.h"
#include "http_get.h"
#include "server_process.h"
#include "test_names.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <string>
#include <vector>

using namespace agentd::test;
using agentd::test::error_of;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> python_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"--agent-dir", AGENTD_TEST_PYTHON_AGENTS};
  a.insert(a.end(), extra.begin(), extra.end());
  return standard_args(a);
}

}  // namespace

TEST_CASE("a C++ client creates and calls a Python agent like any other", "[python]") {
  auto s = ServerProcess::start(python_args());
  Client c = s->connect();
  auto classes = c.info().classes;
  CHECK(std::find(classes.begin(), classes.end(), "Upper") != classes.end());
  CHECK(std::find(classes.begin(), classes.end(), "EchoAgent") != classes.end());  // C++ beside it

  AgentRef a = c.create_agent("Upper", "u", Value{{"suffix", "!"}});
  CHECK(a.class_name() == "Upper");
  CHECK(a.reply(Msg("user", "hello", "user")).get().text() == "HELLO!");
  a.observe(Msg("user", "seen", "user"));
  // Its memory is the server's: the C++ client reads what the Python code added.
  auto memory = a.memory();
  REQUIRE(memory.size() == 2);
  CHECK(memory[0].text() == "hello");
  CHECK(memory[1].text() == "seen");
  CHECK(a.call("stats") == Value{{"calls", 1}, {"memory", 2}});

  // Per-agent order: calls made one after another are answered in that order.
  std::vector<Placeholder> ps;
  for (int i = 0; i < 50; ++i) ps.push_back(a.reply(Msg("user", "m" + std::to_string(i), "user")));
  for (int i = 0; i < 50; ++i) CHECK(ps[i].get().text() == "M" + std::to_string(i) + "!");
  CHECK(a.call("stats").at("calls") == 51);

  AgentRef copy = c.clone_agent(a.id(), "u2");
  CHECK(copy.call("stats").at("calls") == 51);  // save_state/load_state through Python
  CHECK(copy.memory().size() == memory.size() + 50 * 2 - 50);
  c.delete_agent(copy.id());
  CHECK(c.list_agents().size() == 1);
}

TEST_CASE("placeholders flow C++ -> Python -> C++ across two servers without waiting", "[python]") {
  auto cpp = ServerProcess::start(standard_args());
  auto py = ServerProcess::start(python_args());
  Client cc = cpp->connect();
  Client pc = py->connect();
  AgentRef echo = cc.create_agent("EchoAgent", "echo");
  AgentRef upper = pc.create_agent("Upper", "upper");
  Placeholder p1 = echo.reply(Msg("user", "chain", "user"));
  Placeholder p2 = upper.reply(p1);  // a placeholder of the other server, unresolved here
  Placeholder p3 = echo.reply(p2);   // and back
  std::string first = p1.get().text();
  CHECK(p2.get().text() == [&] {
    std::string up = first;
    for (auto& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return up;
  }());
  CHECK_THAT(p3.get().text(), Contains(p2.get().text()));
}

TEST_CASE("an async Python agent calls a C++ agent on another server by reference", "[python]") {
  auto cpp = ServerProcess::start(standard_args());
  auto py = ServerProcess::start(python_args());
  Client cc = cpp->connect();
  Client pc = py->connect();
  AgentRef echo = cc.create_agent("EchoAgent", "echo");
  AgentRef relay = pc.create_agent("Relay", "relay", Value{{"peer", echo.to_value()}});
  std::vector<Placeholder> ps;
  for (int i = 0; i < 20; ++i) ps.push_back(relay.reply(Msg("user", "r" + std::to_string(i), "user")));
  for (int i = 0; i < 20; ++i) {
    std::string t = ps[i].get(60s).text();
    CHECK_THAT(t, Contains("relayed(") && Contains("r" + std::to_string(i)));
  }
  CHECK(echo.info().completed_calls == 20);
}

TEST_CASE("a Python exception fails that call with agent_failed and its traceback, and the agent goes on",
          "[python]") {
  auto s = ServerProcess::start(python_args());
  Client c = s->connect();
  AgentRef b = c.create_agent("Broken", "b");
  Error e = error_of([&] { b.reply(Msg("user", "page9", "user")).get(60s); });
  CHECK(e.code() == ErrorCode::agent_failed);
  CHECK(e.agent_id() == b.id());
  CHECK(e.agent_class() == "Broken");
  CHECK_THAT(e.message(), Contains("KeyError") && Contains("no such page: page9") &&
                              Contains("chain_agents.py") && Contains("in reply"));
  CHECK(b.reply(Msg("user", "ok", "user")).get().text() == "fine");
  // An unknown method names the ones there are.
  Error m = error_of([&] { c.create_agent("Upper", "u").call_async("nope").get(60s); });
  CHECK(m.code() == ErrorCode::unknown_method);
  CHECK_THAT(m.message(), Contains("stats"));
}

TEST_CASE("a module that fails to import refuses start-up (exit 4) naming its file and line", "[python]") {
  auto r = run_as_server(standard_args({"--agent-dir", AGENTD_TEST_PYTHON_AGENTS_BAD}));
  CHECK(r.exit_code == 4);  // as a C++ plugin that fails to load
  CHECK_THAT(r.err, Contains("broken_module.py:9") && Contains("configuration missing"));
  CHECK_THAT(r.out, !Contains("as_server ready"));
}

TEST_CASE("a Python class named like a C++ plugin's class is refused naming both", "[python]") {
  TempDir dir;
  dir.write("dup.py",
            "import agentd\n\nclass EchoAgent(agentd.Agent):\n    def reply(self, x):\n        return x\n");
  auto r = run_as_server(standard_args({"--agent-dir", dir.path()}));
  CHECK(r.exit_code == 4);
  CHECK_THAT(r.err, Contains("EchoAgent") && Contains("dup.py") && Contains("libecho_agent.so"));
}

TEST_CASE("an async agent that blocks the asyncio loop is reported, and the server keeps answering",
          "[python]") {
  auto metrics_port = unused_port();
  auto s = ServerProcess::start(python_args({"--metrics-port", std::to_string(metrics_port)}));
  Client c = s->connect();
  CHECK_THAT(body_of(get(metrics_port, "/metrics")), Contains("agentd_python_loop_stalls_total 0"));
  AgentRef hog = c.create_agent("Hog", "hog");
  AgentRef nap = c.create_agent("Nap", "nap");
  auto t0 = std::chrono::steady_clock::now();
  Placeholder blocked = hog.reply(Msg("user", "3", "user"));
  // The server's own loop is not Python's: it answers at once while the asyncio loop is stuck.
  REQUIRE(wait_until([&] { return s->stderr_text().find("asyncio loop has not run") != std::string::npos; },
                     20s));
  auto during = std::chrono::steady_clock::now();
  CHECK(c.info().agent_count == 2);
  CHECK(std::chrono::steady_clock::now() - during < 2s);
  CHECK_THAT(s->stderr_text(), Contains("chain_agents.py") && Contains("in reply"));
  // Other async agents wait for the loop, then run.
  CHECK(nap.reply(Msg("user", "x", "user")).get(60s).text() == "napped");
  CHECK(blocked.get(60s).text() == "done");
  CHECK(std::chrono::steady_clock::now() - t0 >= 3s);
  CHECK_THAT(body_of(get(metrics_port, "/metrics")), Contains("agentd_python_loop_stalls_total 1"));
}
