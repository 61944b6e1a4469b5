// McpSession over the stdio transport, against real processes: tests/mcp/fault_server.py for
// the faults and the reference server-everything (npm) for the happy path.
#include "mcp_session.h"

#include <catch2/catch.hpp>

#include <agentd/error.h>

#include <kj/async-io.h>
#include <kj/vector.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "mcp_test_support.h"
#include "mcp_transport.h"
#include "scoped_env.h"
#include "subprocess.h"

using agentd::Error;
using agentd::ErrorCode;
using agentd::ToolInfo;
using agentd::ToolResult;
using agentd::Value;
using agentd::detail::make_stdio_transport;
using agentd::detail::McpSession;
using agentd::detail::ToolServerConfig;
using namespace agentd::test;

namespace {

constexpr auto kLong = 30 * kj::SECONDS;

struct McpFixture {
  McpFixture() { ignore_sigpipe(); }
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Timer& timer() { return io.provider->getTimer(); }

  // A session on cfg (kept alive by the fixture's caller); initialized unless asked not to.
  std::unique_ptr<McpSession> session(const ToolServerConfig& cfg, bool init = true) {
    auto s = std::make_unique<McpSession>(cfg, make_stdio_transport(cfg, io), timer());
    if (init) s->initialize().wait(io.waitScope);
    return s;
  }
};

std::vector<std::string> names(const std::vector<ToolInfo>& tools) {
  std::vector<std::string> out;
  for (const auto& t : tools) out.push_back(t.name);
  return out;
}

}  // namespace

TEST_CASE("initialize agrees on 2025-11-25 and reads the server's name and version", "[tools][mcp]") {
  McpFixture f;
  auto cfg = fault_config("fault");
  auto s = f.session(cfg);
  CHECK(s->open());
  CHECK(s->protocol_version() == "2025-11-25");
  CHECK(s->server_name() == "fault-server");
  CHECK(s->server_version() == "1.2.3");
  CHECK(s->transport().pid() > 0);
  s->ping(kLong).wait(f.io.waitScope);
  s->shut_down(5 * kj::SECONDS).wait(f.io.waitScope);
  CHECK_FALSE(s->open());
}

TEST_CASE("an older protocol version the server answers with is accepted, and an unknown one is refused",
          "[tools][mcp]") {
  McpFixture f;
  auto old_cfg = fault_config("old", {"--version", "2024-11-05"});
  auto old_session = f.session(old_cfg);
  CHECK(old_session->protocol_version() == "2024-11-05");

  auto bad_cfg = fault_config("future", {"--version", "2099-01-01"});
  auto bad = f.session(bad_cfg, false);
  Error e = rejection_of(bad->initialize(), f.io.waitScope);
  CHECK(e.code() == ErrorCode::tool_error);
  CHECK_THAT(e.message(), Catch::Contains("tool server 'future'") && Catch::Contains("'2099-01-01'") &&
                              Catch::Contains("2025-11-25") && Catch::Contains("2024-11-05"));
}

TEST_CASE("tools/list follows nextCursor through every page and applies allow_tools", "[tools][mcp]") {
  McpFixture f;
  auto cfg = fault_config("paged", {"--page-size", "3", "--extra-tools", "20"});
  auto s = f.session(cfg);
  auto tools = s->list_tools().wait(f.io.waitScope);
  REQUIRE(tools.size() == 32);
  CHECK(tools.front().name == "echo");
  CHECK(tools.back().name == "extra_19");
  CHECK(std::all_of(tools.begin(), tools.end(), [](const ToolInfo& t) { return t.server == "paged"; }));
  auto add = std::find_if(tools.begin(), tools.end(), [](const ToolInfo& t) { return t.name == "add"; });
  REQUIRE(add != tools.end());
  CHECK(add->title == "Add two numbers");
  CHECK(add->output_schema["properties"]["sum"]["type"] == "number");
  CHECK(add->annotations["readOnlyHint"] == true);
  CHECK(add->input_schema["type"] == "object");

  auto filtered_cfg = fault_config("filtered", {"--page-size", "5", "--extra-tools", "3"});
  filtered_cfg.allow_tools = {"e*", "add"};
  auto filtered = f.session(filtered_cfg);
  CHECK(names(filtered->list_tools().wait(f.io.waitScope)) ==
        std::vector<std::string>{"echo", "add", "exit", "env", "extra_0", "extra_1", "extra_2"});
}

TEST_CASE("tools/call passes every content kind, structuredContent and isError through", "[tools][mcp]") {
  McpFixture f;
  auto cfg = fault_config("fault");
  auto s = f.session(cfg);
  auto& ws = f.io.waitScope;

  ToolResult echo = s->call_tool("echo", {{"text", "hi"}}, kLong).wait(ws);
  CHECK(echo.text() == "echo: hi");
  CHECK_FALSE(echo.is_error);

  ToolResult add = s->call_tool("add", {{"a", 2}, {"b", 3}}, kLong).wait(ws);
  CHECK(add.structured_content == Value{{"sum", 5}});
  CHECK(add.text() == "5");

  ToolResult fail = s->call_tool("fail", Value::object(), kLong).wait(ws);
  CHECK(fail.is_error);
  CHECK(fail.text() == "it went wrong");

  ToolResult media = s->call_tool("media", Value::object(), kLong).wait(ws);
  REQUIRE(media.content.size() == 4);
  CHECK(media.content[0] == Value{{"type", "image"}, {"data", "iVBORw0KGgo="}, {"mimeType", "image/png"}});
  CHECK(media.content[1]["type"] == "audio");
  CHECK(media.content[2]["type"] == "resource_link");
  CHECK(media.content[3]["resource"]["text"] == "embedded");

  // A JSON-RPC error answer (an unknown tool) is an Error(tool_error) with its message; the
  // session goes on.
  Error unknown = rejection_of(s->call_tool("nope", Value::object(), kLong), ws);
  CHECK(unknown.code() == ErrorCode::tool_error);
  CHECK_FALSE(unknown.retryable());
  CHECK_THAT(unknown.message(), Catch::Contains("Unknown tool: nope") && Catch::Contains("-32602"));
  CHECK(s->call_tool("echo", {{"text", "again"}}, kLong).wait(ws).text() == "echo: again");
}

TEST_CASE("many calls are in flight on one server at once, without a thread each", "[tools][mcp]") {
  McpFixture f;
  auto cfg = fault_config("fault");
  auto s = f.session(cfg);
  const std::size_t threads_before = agentd::detail::thread_count();
  kj::Vector<kj::Promise<ToolResult>> calls;
  for (int i = 0; i < 50; ++i)
    calls.add(s->call_tool("slow", {{"seconds", 0.5}, {"text", std::to_string(i)}}, kLong));
  CHECK(s->in_flight() == 50);
  CHECK(agentd::detail::thread_count() == threads_before);
  auto results = kj::joinPromises(calls.releaseAsArray()).wait(f.io.waitScope);
  REQUIRE(results.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(results[i].text() == "slow: " + std::to_string(i));
  CHECK(s->in_flight() == 0);
}

TEST_CASE("a call without an answer times out with Error(timeout) and the server is told to cancel it",
          "[tools][mcp]") {
  McpFixture f;
  ScopedFile log("mcp-cancel-log");
  auto cfg = fault_config("fault", {"--cancel-log", log.path});
  auto s = f.session(cfg);
  Error e = rejection_of(s->call_tool("never", Value::object(), 200 * kj::MILLISECONDS), f.io.waitScope);
  CHECK(e.code() == ErrorCode::timeout);
  CHECK_THAT(e.message(), Catch::Contains("tool server 'fault'") && Catch::Contains("tools/call 'never'"));
  run_until(f.io, [&] { return !read_lines(log.path).empty(); });
  Value cancelled = Value::parse(read_lines(log.path).at(0));
  CHECK(cancelled["requestId"].is_number_integer());
  CHECK(cancelled["reason"].get<std::string>().find("no answer within") != std::string::npos);
  CHECK(s->in_flight() == 0);
  // The session is fine after that.
  CHECK(s->call_tool("echo", {{"text", "x"}}, kLong).wait(f.io.waitScope).text() == "echo: x");
}

TEST_CASE("dropping a call's promise sends notifications/cancelled for it", "[tools][mcp]") {
  McpFixture f;
  ScopedFile log("mcp-cancel-log");
  auto cfg = fault_config("fault", {"--cancel-log", log.path});
  auto s = f.session(cfg);
  {
    auto call = s->call_tool("never", Value::object(), kLong);
    CHECK(s->in_flight() == 1);
  }
  CHECK(s->in_flight() == 0);
  run_until(f.io, [&] { return read_lines(log.path).size() == 1; });
  CHECK(Value::parse(read_lines(log.path)[0])["requestId"].is_number_integer());
}

TEST_CASE("a server that exits mid-call fails every call in flight with a retryable tool_error",
          "[tools][mcp]") {
  McpFixture f;
  auto cfg = fault_config("dying");
  auto s = f.session(cfg);
  std::optional<std::string> closed_why;
  s->on_closed([&](std::string why) { closed_why = why; });
  auto slow = s->call_tool("slow", {{"seconds", 20}}, kLong);
  Error e = rejection_of(s->call_tool("exit", {{"status", 3}}, kLong), f.io.waitScope);
  CHECK(e.code() == ErrorCode::tool_error);
  CHECK(e.retryable());
  CHECK_THAT(e.message(), Catch::Contains("tool server 'dying'") && Catch::Contains("exited with status 3") &&
                              Catch::Contains("exiting mid-call"));
  Error other = rejection_of(kj::mv(slow), f.io.waitScope);
  CHECK(other.code() == ErrorCode::tool_error);
  CHECK(other.retryable());
  CHECK_FALSE(s->open());
  REQUIRE(closed_why);
  CHECK_THAT(*closed_why, Catch::Contains("exited with status 3"));
  Error after = rejection_of(s->call_tool("echo", Value::object(), kLong), f.io.waitScope);
  CHECK(after.code() == ErrorCode::tool_error);
}

TEST_CASE("a line on stdout that is not JSON closes the transport with the reason", "[tools][mcp]") {
  McpFixture f;
  auto cfg = fault_config("garbled");
  auto s = f.session(cfg);
  Error e = rejection_of(s->call_tool("garbage", Value::object(), kLong), f.io.waitScope);
  CHECK(e.code() == ErrorCode::tool_error);
  CHECK_THAT(e.message(),
             Catch::Contains("not a JSON-RPC message") && Catch::Contains("<html>not json</html>"));
  CHECK_FALSE(s->open());

  auto early_cfg = fault_config("early", {"--garbage-at-start"});
  auto early = f.session(early_cfg, false);
  Error init = rejection_of(early->initialize(), f.io.waitScope);
  CHECK(init.code() == ErrorCode::tool_error);
  CHECK_THAT(init.message(), Catch::Contains("this is not json"));
}

TEST_CASE("a 100 MiB answer is refused at max_message_bytes without buffering it", "[tools][mcp]") {
  McpFixture f;
  auto cfg = fault_config("huge");
  cfg.max_message_bytes = 1 << 20;
  auto s = f.session(cfg);
  Error e = rejection_of(s->call_tool("big", {{"mib", 100}}, kLong), f.io.waitScope);
  CHECK(e.code() == ErrorCode::tool_error);
  CHECK_THAT(e.message(), Catch::Contains("longer than max_message_bytes (1048576 bytes)"));
  CHECK_FALSE(s->open());
}

TEST_CASE("the child's environment is only its config's env plus PATH", "[tools][mcp]") {
  McpFixture f;
  ScopedEnv secret{{"AGENTD_SECRET_TEST", "do-not-leak"}};
  auto cfg = fault_config("envy");
  cfg.env = {{"FOO", "bar"}};
  auto s = f.session(cfg);
  Value env = Value::parse(s->call_tool("env", Value::object(), kLong).wait(f.io.waitScope).text());
  CHECK_FALSE(env.contains("AGENTD_SECRET_TEST"));
  CHECK(env["FOO"] == "bar");
  CHECK(env["PATH"] == "/usr/local/bin:/usr/bin:/bin");

  auto own_path = fault_config("own-path");
  own_path.env = {{"PATH", "/usr/bin:/bin"}};
  auto s2 = f.session(own_path);
  Value env2 = Value::parse(s2->call_tool("env", Value::object(), kLong).wait(f.io.waitScope).text());
  CHECK(env2["PATH"] == "/usr/bin:/bin");
}

TEST_CASE("the server's stderr lines go to the log under its name", "[tools][mcp]") {
  McpFixture f;
  CapturedLog log;
  auto cfg = fault_config("noisy", {"--stderr-lines", "3"});
  auto s = f.session(cfg);
  run_until(f.io, [&] { return log.contains("tool server 'noisy': fault_server stderr line 2"); });
  CHECK(log.contains("tool server 'noisy': fault_server stderr line 0"));
}

TEST_CASE("a server that cannot start fails initialize with tool_error naming why", "[tools][mcp]") {
  McpFixture f;
  ToolServerConfig missing;
  missing.name = "missing";
  missing.argv = {"no-such-mcp-server-program"};
  auto s = f.session(missing, false);
  Error e = rejection_of(s->initialize(), f.io.waitScope);
  CHECK(e.code() == ErrorCode::tool_error);
  CHECK_THAT(e.message(), Catch::Contains("no-such-mcp-server-program") &&
                              Catch::Contains("/usr/local/bin:/usr/bin:/bin"));

  auto quits = fault_config("quits", {"--exit-at-start", "2"});
  auto q = f.session(quits, false);
  Error qe = rejection_of(q->initialize(), f.io.waitScope);
  CHECK(qe.code() == ErrorCode::tool_error);
  CHECK_THAT(qe.message(),
             Catch::Contains("exited with status 2") && Catch::Contains("told to exit at start"));
}

TEST_CASE("notifications/tools/list_changed reaches on_tools_changed, and the list then has the new tool",
          "[tools][mcp]") {
  McpFixture f;
  auto cfg = fault_config("changing");
  auto s = f.session(cfg);
  int changed = 0;
  s->on_tools_changed([&] { ++changed; });
  CHECK(s->list_tools().wait(f.io.waitScope).size() == 12);
  s->call_tool("change_tools", Value::object(), kLong).wait(f.io.waitScope);
  run_until(f.io, [&] { return changed == 1; });
  auto tools = names(s->list_tools().wait(f.io.waitScope));
  CHECK(std::find(tools.begin(), tools.end(), "added") != tools.end());
}

TEST_CASE("the client answers a server's ping and refuses its other requests with -32601", "[tools][mcp]") {
  McpFixture f;
  auto cfg = fault_config("asking");
  auto s = f.session(cfg);
  Value answers =
      Value::parse(s->call_tool("ask_client", Value::object(), kLong).wait(f.io.waitScope).text());
  CHECK(answers["ping"]["result"] == Value::object());
  CHECK(answers["sampling"]["error"]["code"] == -32601);
}

TEST_CASE("the reference server-everything over stdio: initialize, list, call", "[tools][mcp][npm]") {
  const std::string node = find_node();
  if (node.empty()) {
    WARN("skipped: `node` is not on PATH (the reference MCP servers need Node.js)");
    return;
  }
  McpFixture f;
  auto cfg = everything_config(node);
  auto s = f.session(cfg);
  CHECK(s->protocol_version() == "2025-11-25");
  CHECK_FALSE(s->server_name().empty());
  auto tools = s->list_tools().wait(f.io.waitScope);
  auto echo = std::find_if(tools.begin(), tools.end(), [](const ToolInfo& t) { return t.name == "echo"; });
  REQUIRE(echo != tools.end());
  CHECK(echo->input_schema["properties"].contains("message"));

  kj::Vector<kj::Promise<ToolResult>> calls;
  for (int i = 0; i < 20; ++i) calls.add(s->call_tool("echo", {{"message", std::to_string(i)}}, kLong));
  auto results = kj::joinPromises(calls.releaseAsArray()).wait(f.io.waitScope);
  for (int i = 0; i < 20; ++i) CHECK(results[i].text() == "Echo: " + std::to_string(i));

  // An unknown tool: server-everything answers with an isError result (others with a JSON-RPC
  // error, which is Error(tool_error)).
  try {
    CHECK(s->call_tool("no-such-tool", Value::object(), kLong).wait(f.io.waitScope).is_error);
  } catch (const kj::Exception& e) {
    CHECK(agentd::detail::error_from_kj(e).code() == ErrorCode::tool_error);
  }
  s->shut_down(5 * kj::SECONDS).wait(f.io.waitScope);
}

TEST_CASE("a server that stops reading its stdin: the write queue is capped, and shut_down during a write",
          "[tools][mcp]") {
  McpFixture f;
  std::string big(1 << 20, 'x');
  {
    auto cfg = fault_config("deaf");
    auto s = f.session(cfg);
    s->call_tool("stop_reading", Value::object(), kLong).wait(f.io.waitScope);
    // 1 MiB each: the pipe fills at once; past the cap (16 MiB + max_message_bytes) it closes.
    kj::Vector<kj::Promise<ToolResult>> calls;
    const std::size_t n = (16u << 20) / big.size() + cfg.max_message_bytes / big.size() + 4;
    for (std::size_t i = 0; i < n; ++i) calls.add(s->call_tool("echo", {{"text", big}}, kLong));
    run_until(f.io, [&] { return !s->open(); });
    CHECK_THAT(s->close_reason(), Catch::Contains("does not read its stdin"));
    for (auto& c : calls) CHECK(rejection_of(kj::mv(c), f.io.waitScope).retryable());
  }
  {
    auto cfg = fault_config("deaf2");
    auto s = f.session(cfg);
    s->call_tool("stop_reading", Value::object(), kLong).wait(f.io.waitScope);
    auto call = s->call_tool("echo", {{"text", big}}, kLong);  // its write stays under way
    f.timer().afterDelay(50 * kj::MILLISECONDS).wait(f.io.waitScope);
    s->shut_down(1 * kj::SECONDS).wait(f.io.waitScope);  // the writer goes before its stream
    CHECK(rejection_of(kj::mv(call), f.io.waitScope).retryable());
    CHECK(s->transport().pid() == 0);
  }
}

TEST_CASE("a server's stderr lines and log notifications are rate-limited in the log", "[tools][mcp]") {
  McpFixture f;
  CapturedLog log;
  auto cfg = fault_config("chatty");
  auto s = f.session(cfg);
  s->call_tool("spam_stderr", {{"lines", 300}}, kLong).wait(f.io.waitScope);
  s->call_tool("spam_log", {{"count", 300}}, kLong).wait(f.io.waitScope);
  run_until(f.io, [&] { return log.contains("spam line 0"); });
  f.timer().afterDelay(300 * kj::MILLISECONDS).wait(f.io.waitScope);
  CHECK_FALSE(log.contains("spam line 299"));
  CHECK_FALSE(log.contains("log 299"));
  // A second later the next line says how many were left out.
  f.timer().afterDelay(1100 * kj::MILLISECONDS).wait(f.io.waitScope);
  s->call_tool("spam_stderr", {{"lines", 1}}, kLong).wait(f.io.waitScope);
  s->call_tool("spam_log", {{"count", 1}}, kLong).wait(f.io.waitScope);
  run_until(f.io, [&] { return log.contains("suppressed"); });
}

TEST_CASE("every list_changed of a flood reaches on_tools_changed", "[tools][mcp]") {
  // The registry's side (see tool_registry_test): here, that the session reports each one.
  McpFixture f;
  auto cfg = fault_config("flood");
  auto s = f.session(cfg);
  int changed = 0;
  s->on_tools_changed([&] { ++changed; });
  s->call_tool("spam_changed", {{"count", 50}}, kLong).wait(f.io.waitScope);
  run_until(f.io, [&] { return changed == 50; });
}
