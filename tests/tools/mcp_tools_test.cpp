// MCP tools end to end: real as_server processes with --tool-config-path, the reference MCP
// servers from npm (tests/mcp/node_modules, pinned by tests/mcp/package-lock.json) and the
// project's fault server (tests/mcp/fault_server.py), a ReActAgent on the fake
// OpenAI-compatible model server, agentctl, /metrics and the trace spans.
// Cases that need node skip with a message when it is missing (CI installs it).
#include "agentctl_runner.h"
#include "child_processes.h"
#include "fake_model_server.h"
#include "http_get.h"
#include "scoped_env.h"
#include "server_process.h"
#include "test_names.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>
#include <error_of.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

using namespace agentd::test;
using Catch::Matchers::Contains;

namespace {

const std::string kMcpModules =
    std::string(AGENTD_SOURCE_DIR) + "/tests/mcp/node_modules/@modelcontextprotocol";
const std::string kFilesystem = kMcpModules + "/server-filesystem/dist/index.js";
const std::string kEverything = kMcpModules + "/server-everything/dist/index.js";
const std::string kFaultServer = std::string(AGENTD_SOURCE_DIR) + "/tests/mcp/fault_server.py";

// node's full path, or empty when there is none on PATH.
std::string node_path() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/node";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

// True (after a WARN saying why) when the npm servers cannot run here.
bool skip_without_node() {
  if (node_path().empty()) {
    WARN("skipped: `node` is not on PATH (scripts/setup.sh installs nodejs and the MCP servers)");
    return true;
  }
  if (!std::filesystem::exists(kFilesystem) || !std::filesystem::exists(kEverything)) {
    WARN(
        "skipped: the MCP servers are not installed in tests/mcp/node_modules (run scripts/setup.sh, "
        "or `npm ci --prefix tests/mcp`)");
    return true;
  }
  return false;
}

std::string openai_config(const std::string& key, const std::string& scenario) {
  return fake_model_server().openai_config("fake", key, scenario);
}

// A server with the dialog and asynchronous agents' plugins (and standard_args' test agents), models.yaml and
// tools.yaml as given.
struct Served {
  Served(const std::string& tools_yaml, const std::string& models_yaml = "",
         std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--plugin", AGENTD_DIALOG_PLUGIN, "--plugin", AGENTD_ASYNC_PLUGIN};
    if (!tools_yaml.empty()) {
      tools = dir.write("tools.yaml", tools_yaml);
      args.insert(args.end(), {"--tool-config-path", tools});
    }
    if (!models_yaml.empty())
      args.insert(args.end(), {"--model-config-path", dir.write("models.yaml", models_yaml)});
    args.insert(args.end(), extra.begin(), extra.end());
    server = ServerProcess::start(standard_args(args));
    client = std::make_unique<Client>(server->connect());
  }
  TempDir dir;
  std::string tools;
  std::unique_ptr<ServerProcess> server;
  std::unique_ptr<Client> client;
};

// The README's filesystem config: one folder shared with the tool server.
std::string filesystem_config(const std::string& folder) {
  return "mcpServers:\n"
         "  fs:\n"
         "    command: " +
         node_path() + "\n    args: [" + kFilesystem + ", " + folder + "]\n";
}

const agentd::ToolServerInfo* find_server(const std::vector<agentd::ToolServerInfo>& all,
                                          const std::string& name) {
  for (const auto& s : all)
    if (s.name == name) return &s;
  return nullptr;
}

bool has_tool(const agentd::ToolServerInfo& s, const std::string& name) {
  for (const auto& t : s.tools)
    if (t.name == name) return true;
  return false;
}

}  // namespace

TEST_CASE("a ReActAgent on a model reads a file through the filesystem MCP server", "[tools][react]") {
  if (skip_without_node()) return;
  TempDir docs;
  const std::string file = docs.write("notes.txt", "The launch code is 4417.\n");
  const std::string key = unique_key("mcp");
  Served s(filesystem_config(docs.path()), openai_config(key, "usetool"));

  auto agent = s.client->create_agent(
      "ReActAgent", "Reader",
      Value{{"model_config_name", "fake"}, {"tools", Value::array({"calculator", "fs/read_text_file"})}});
  // The scripted model asks for the tool named in the message, then answers with its result.
  const std::string script = Value{{"tool", "fs__read_text_file"}, {"arguments", {{"path", file}}}}.dump();
  Msg answer = agent.reply(Msg("user", script, "user")).get(60s);
  CHECK_THAT(answer.text(), Contains("final: ") && Contains("The launch code is 4417."));
  REQUIRE(answer.metadata["tool_results"].size() == 1);
  CHECK(answer.metadata["tool_results"][0]["name"] == "fs__read_text_file");

  // The model was offered the MCP tool beside the built-in one, in OpenAI's function shape, and
  // got its result back as a tool message.
  Value reqs = fake_model_server().requests(key);
  REQUIRE(reqs.size() == 2);
  std::vector<std::string> offered;
  for (const auto& t : reqs[0]["body"]["tools"]) offered.push_back(t["function"]["name"].get<std::string>());
  CHECK(offered == std::vector<std::string>{"calculator", "fs__read_text_file"});
  CHECK(reqs[0]["body"]["tools"][1]["function"]["parameters"]["properties"].contains("path"));
  Value msgs = reqs[1]["body"]["messages"];
  CHECK(msgs.back()["role"] == "tool");
  CHECK_THAT(msgs.back()["content"].get<std::string>(), Contains("4417"));

  // The agent call's span records the tool call.
  auto spans = s.client->traces();
  REQUIRE_FALSE(spans.empty());
  const auto& span = spans.back();
  CHECK(span.agent_id == agent.id());
  REQUIRE(span.tool_calls.size() == 1);
  CHECK(span.tool_calls[0].tool == "fs/read_text_file");
  CHECK(span.tool_calls[0].outcome == "ok");
  CHECK(span.tool_calls[0].duration_ns > 0);
  CHECK(span.model_calls == 2);

  // A pattern that names no tool (a typo, a server that is down) does not cost the answer: the
  // model goes without it, the answer names it, and the model's call of it is an error it reads.
  auto wrong = s.client->create_agent(
      "ReActAgent", "Wrong",
      Value{{"model_config_name", "fake"}, {"tools", Value::array({"fs/nope", "calculator"})}});
  Msg partial = wrong.reply(Msg("user", script, "user")).get(60s);
  CHECK(partial.metadata["missing_tools"] == Value::array({"fs/nope"}));
  CHECK_THAT(partial.text(), Contains("error: no tool named 'fs__read_text_file'"));
}

TEST_CASE("operators list the tool servers and call a tool, and metrics count the calls", "[tools]") {
  if (skip_without_node()) return;
  TempDir docs;
  docs.write("a.txt", "alpha");
  const auto metrics_port = unused_port();
  Served s(filesystem_config(docs.path()) +
               "  everything:\n"
               "    command: " +
               node_path() + "\n    args: [" + kEverything + ", stdio]\n    tools: [echo, get-sum]\n",
           "", {"--metrics-port", std::to_string(metrics_port)});

  // Not started before someone needs them.
  auto idle = s.client->tools(/*start=*/false);
  REQUIRE(idle.size() == 2);
  CHECK(idle[0].name == "fs");
  CHECK(idle[0].state == "idle");
  CHECK(idle[0].transport == "stdio");

  auto all = s.client->tools();
  const auto* fs = find_server(all, "fs");
  const auto* everything = find_server(all, "everything");
  REQUIRE(fs != nullptr);
  REQUIRE(everything != nullptr);
  CHECK(fs->state == "running");
  CHECK_FALSE(fs->protocol_version.empty());
  CHECK(has_tool(*fs, "read_text_file"));
  CHECK(has_tool(*fs, "list_directory"));
  // The allow-list: only the two tools asked for.
  REQUIRE(everything->tools.size() == 2);
  CHECK(has_tool(*everything, "echo"));
  CHECK(has_tool(*everything, "get-sum"));

  agentd::ToolResult listing = s.client->call_tool("fs", "list_directory", Value{{"path", docs.path()}});
  CHECK_FALSE(listing.is_error);
  CHECK_THAT(listing.text(), Contains("a.txt"));
  agentd::ToolResult echoed = s.client->call_tool("everything", "echo", Value{{"message", "hi there"}});
  CHECK_THAT(echoed.text(), Contains("hi there"));

  // A tool the allow-list hides, an unknown server: tool_error naming what there is.
  auto hidden = error_of([&] { s.client->call_tool("everything", "get-env", Value::object()); });
  CHECK(hidden.code() == ErrorCode::tool_error);
  CHECK_THAT(hidden.message(), Contains("get-env") && Contains("echo"));
  auto unknown = error_of([&] { s.client->call_tool("nope", "x", Value::object()); });
  CHECK(unknown.code() == ErrorCode::tool_error);
  CHECK_THAT(unknown.message(), Contains("nope") && Contains("everything") && Contains("fs"));
  // A file outside the folder given to the filesystem server: the tool's own error (isError).
  agentd::ToolResult outside = s.client->call_tool("fs", "read_text_file", Value{{"path", "/etc/hostname"}});
  CHECK(outside.is_error);

  all = s.client->tools(false);
  fs = find_server(all, "fs");
  REQUIRE(fs != nullptr);
  CHECK(fs->usage.calls == 2);
  CHECK(fs->usage.failures == 1);

  const std::string metrics = body_of(get(metrics_port, "/metrics"));
  CHECK_THAT(metrics, Contains("agentd_tool_calls_total{server=\"fs\",tool=\"list_directory\"} 1"));
  CHECK_THAT(metrics, Contains("agentd_tool_failures_total{server=\"fs\",tool=\"read_text_file\"} 1"));
  CHECK_THAT(metrics,
             Contains("agentd_tool_call_duration_seconds_count{server=\"everything\",tool=\"echo\"} 1"));
}

TEST_CASE("agentctl tools lists the tool servers and agentctl tool calls one", "[tools][agentctl]") {
  if (skip_without_node()) return;
  TempDir docs;
  docs.write("b.txt", "bravo");
  Served s(filesystem_config(docs.path()));
  const std::vector<std::string> at = {"--host", "127.0.0.1", "--port", std::to_string(s.server->port())};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = at;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  auto listed = run_agentctl(with({"tools"}));
  CHECK(listed.exit_code == 0);
  CHECK_THAT(listed.out, Contains("fs (stdio): running") && Contains("fs/read_text_file") &&
                             Contains("secure-filesystem-server"));
  auto json = run_agentctl(with({"--json", "tools"}));
  REQUIRE(json.exit_code == 0);
  Value servers = Value::parse(json.out);
  CHECK(servers[0]["name"] == "fs");
  CHECK(servers[0]["tools"].size() > 5);

  auto read =
      run_agentctl(with({"tool", "fs", "read_text_file", "{\"path\": \"" + docs.path() + "/b.txt\"}"}));
  CHECK(read.exit_code == 0);
  CHECK(read.out == "bravo\n");
  auto refused = run_agentctl(with({"tool", "fs", "read_text_file", "{\"path\": \"/etc/passwd\"}"}));
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Contains("denied") || Contains("outside"));
  auto bad_json = run_agentctl(with({"tool", "fs", "read_text_file", "[1]"}));
  CHECK(bad_json.exit_code == 2);
  CHECK_THAT(bad_json.err, Contains("object"));
}

TEST_CASE("agents call tools blocking and asynchronously, many at once", "[tools]") {
  if (skip_without_node()) return;
  Served s("mcpServers:\n  everything:\n    command: " + node_path() + "\n    args: [" + kEverything + "]\n");
  auto blocking = s.client->create_agent("ToolAgent", "b");
  CHECK(blocking.call("list", Value::array({"everything/get-su*"})) == Value::array({"everything/get-sum"}));
  Msg sum = blocking
                .reply(Msg("user", Value{{"tool", "everything/get-sum"}, {"arguments", {{"a", 2}, {"b", 3}}}},
                           "user"))
                .get(60s);
  CHECK_THAT(agentd::ToolResult::from_value(sum.content).text(), Contains("5"));

  // 50 asynchronous agents, each with a call in flight at once on the one tool server.
  std::vector<AgentRef> agents;
  std::vector<Placeholder> calls;
  for (int i = 0; i < 50; ++i) {
    agents.push_back(s.client->create_agent("AsyncToolAgent", "a" + std::to_string(i)));
    calls.push_back(agents.back().reply(
        Msg("user", Value{{"tool", "everything/echo"}, {"arguments", {{"message", "m" + std::to_string(i)}}}},
            "user")));
  }
  for (int i = 0; i < 50; ++i)
    CHECK_THAT(agentd::ToolResult::from_value(calls[i].get(60s).content).text(),
               Contains("m" + std::to_string(i)));
  auto spans = s.client->traces();
  int with_tool = 0;
  for (const auto& span : spans)
    if (span.agent_class == "AsyncToolAgent" && span.tool_calls.size() == 1 &&
        span.tool_calls[0].tool == "everything/echo")
      ++with_tool;
  CHECK(with_tool == 50);

  // A tool error fails the agent's call with the typed error.
  auto e = error_of([&] {
    blocking.reply(Msg("user", Value{{"tool", "everything/no-such-tool"}}, "user")).get(60s);
  });
  CHECK_THAT(e.message(), Contains("tool_error") || Contains("no-such-tool"));
}

TEST_CASE("a server without tool servers lists none and refuses tool calls clearly", "[tools]") {
  Served s("");
  CHECK(s.client->tools().empty());
  auto e = error_of([&] { s.client->call_tool("fs", "read_text_file", Value::object()); });
  CHECK(e.code() == ErrorCode::tool_error);
  CHECK_THAT(e.message(), Contains("--tool-config-path"));
  auto agent = s.client->create_agent("ToolAgent", "t");
  CHECK(agent.call("list", Value::array()) == Value::array());
}

TEST_CASE("a bad tool config refuses start-up naming the file, line and column", "[tools]") {
  TempDir dir;
  const std::string path = dir.write("tools.yaml",
                                     "mcpServers:\n"
                                     "  fs:\n"
                                     "    command: node\n"
                                     "    argz: [x]\n");
  auto r = run_as_server(standard_args({"--tool-config-path", path}));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Contains(path + ":4:") && Contains("argz"));

  const std::string missing =
      dir.write("env.yaml",
                "mcpServers:\n"
                "  web:\n"
                "    url: https://example.invalid/mcp\n"
                "    headers: {Authorization: \"Bearer ${AGENTD_TEST_UNSET_TOKEN}\"}\n");
  r = run_as_server(standard_args({"--tool-config-path", missing}));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Contains(missing + ":4:") && Contains("AGENTD_TEST_UNSET_TOKEN"));
}

TEST_CASE("SIGHUP re-reads the tool config, and a bad one keeps the servers there are", "[tools]") {
  if (skip_without_node()) return;
  TempDir docs;
  Served s(filesystem_config(docs.path()));
  REQUIRE(s.client->tools(false).size() == 1);
  s.dir.write("tools.yaml", filesystem_config(docs.path()) + "  more:\n    command: " + node_path() +
                                "\n    args: [" + kEverything + "]\n");
  ::kill(s.server->pid(), SIGHUP);
  REQUIRE(wait_until([&] { return s.client->tools(false).size() == 2; }, 20s));
  CHECK(find_server(s.client->tools(), "more")->state == "running");

  s.dir.write("tools.yaml", "mcpServers: [not, a, map]\n");
  ::kill(s.server->pid(), SIGHUP);
  REQUIRE(wait_until(
      [&] { return s.server->stderr_text().find("kept the previous tool servers") != std::string::npos; },
      20s));
  CHECK(s.client->tools(false).size() == 2);
}

namespace {

// The pid of as_server's child running tests/mcp/fault_server.py, or 0.
pid_t fault_server_child(pid_t server) {
  auto children = agentd::test::child_pids(server, "fault_server.py");
  return children.empty() ? 0 : children.front();
}

}  // namespace

TEST_CASE("a tool server killed mid-call fails that call (retryable) and serves again after a restart",
          "[tools][faults]") {
  // A secret in as_server's environment: the tool server must not see it.
  ScopedEnv secret({{"AGENTD_TEST_TOOL_SECRET", "hunter2-do-not-leak"}});
  Served s("mcpServers:\n  faults:\n    command: python3\n    args: [" + kFaultServer +
           "]\n    env: {GREETING: hello}\n");
  auto agent = s.client->create_agent("ToolAgent", "t");
  auto env_of = [&] {
    Msg m = agent.reply(Msg("user", Value{{"tool", "faults/env"}}, "user")).get(60s);
    return Value::parse(agentd::ToolResult::from_value(m.content).text());
  };
  Value env = env_of();
  CHECK_FALSE(env.contains("AGENTD_TEST_TOOL_SECRET"));
  CHECK(env["GREETING"] == "hello");
  CHECK(env["PATH"] == "/usr/local/bin:/usr/bin:/bin");

  // A call in progress when its tool server is killed: a retryable tool_error, not a hang.
  Placeholder slow = agent.reply(Msg(
      "user", Value{{"tool", "faults/slow"}, {"arguments", {{"seconds", 60}, {"text", "late"}}}}, "user"));
  pid_t child = 0;
  REQUIRE(wait_until([&] { return (child = fault_server_child(s.server->pid())) != 0; }, 20s));
  std::this_thread::sleep_for(200ms);  // the call is sent (the agent is past list/start)
  REQUIRE(::kill(child, SIGKILL) == 0);
  auto e = error_of([&] { slow.get(30s); });
  CHECK(e.code() == ErrorCode::tool_error);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Contains("faults"));
  auto info = s.client->tools(false);
  REQUIRE(info.size() == 1);
  CHECK(info[0].state == "restarting");
  CHECK_THAT(info[0].error, Contains("signal 9"));
  // The server and its other agents are unharmed; after the backoff the tool server runs again.
  CHECK(s.client->info().agent_count == 1);
  REQUIRE(wait_until(
      [&] {
        try {
          return env_of()["GREETING"] == "hello";
        } catch (const agentd::Error&) {
          return false;  // still inside the backoff
        }
      },
      20s));
  info = s.client->tools(false);
  CHECK(info[0].state == "running");
  CHECK(info[0].restarts == 1);
}
