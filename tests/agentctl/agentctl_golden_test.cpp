// Golden tests: a session of agentctl commands against a real as_server, compared (after
// normalising ids, times, ports and durations) with golden/session.txt; each step's exit code
// is also checked on its own. AGENTD_UPDATE_GOLDEN=1 rewrites the golden file.
#include "agentctl_runner.h"
#include "server_process.h"

#include <agentd/version.h>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <cstdio>
#include <optional>
#include <regex>
#include <sstream>

using namespace agentd::test;

namespace {

struct Step {
  std::vector<std::string> args;
  int exit_code;
};

// status prints load figures that change from run to run: keep the keys and the layout of the
// traffic line, hide the figures (and their units, which follow their size).
std::string hide_load_figures(const std::string& text) {
  static const std::regex load_line("(pid|uptime|cpu|rss|workers|traffic)( +)(.*)");
  static const std::regex figure("[0-9]+(\\.[0-9]+)?( (B|KiB|MiB|GiB|TiB))?");
  std::string out;
  std::istringstream lines(text);
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_match(line, m, load_line))
      line = m[1].str() + m[2].str() +
             (m[1] == "traffic" ? std::regex_replace(m[3].str(), figure, "N") : std::string("N"));
    out += line + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE("agentctl session against a real as_server matches the golden transcript", "[agentctl]") {
  // Only the echo plugin: the golden status must not change when other plugins are added.
  auto server = ServerProcess::start({"--port", "0", "--plugin", echo_plugin(), "--log-level", "warn"});
  TempDir tmp;
  auto good_models = tmp.write("models.yaml", "- config_name: my-echo\n  model_type: echo\n");
  auto bad_models = tmp.write("bad.yaml", "- config_name: x\n  model_type: no_such_type\n");
  auto port = std::to_string(server->port());
  std::vector<std::string> at{"--port", port};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), at.begin(), at.end());
    return args;
  };

  std::vector<Step> steps = {
      {with({"ping"}), 0},
      {with({"list"}), 0},
      {with({"create", "EchoAgent", "e1", "--id", "echo-1", "--args", R"({"prefix": "> "})"}), 0},
      {with({"create", "TrailAgent", "t1", "--id", "trail-1"}), 0},
      {with({"create", "FlakyAgent", "f1", "--id", "flaky-1"}), 0},
      {with({"list"}), 0},
      {with({"call", "echo-1", "hello"}), 0},
      {with({"call", "trail-1", "x"}), 0},
      {with({"--json", "call", "trail-1", "y"}), 0},
      // Streamed replies: chunks as they come; an agent that emits none; a failure mid-stream.
      {with({"create", "StreamEchoAgent", "s1", "--id", "stream-1"}), 0},
      {with({"call", "--stream", "stream-1", "the quick brown fox"}), 0},
      {with({"--json", "call", "--stream", "stream-1", "a b"}), 0},
      {with({"call", "--stream", "echo-1", "not streamed"}), 0},
      {with({"call", "--stream", "--content-json", "stream-1", R"({"count": 3, "fail_after": 2})"}), 1},
      {with({"method", "echo-1", "ping"}), 0},
      {with({"method", "echo-1", "add", R"({"a": 1, "b": 2})"}), 0},
      {with({"method", "echo-1", "count"}), 0},
      {with({"memory", "echo-1"}), 0},
      {with({"--json", "list"}), 0},
      // What goes wrong on the server: exit 1, with the server's reason and a hint.
      {with({"call", "no-such-agent", "hi"}), 1},
      {with({"call", "flaky-1", "fail"}), 1},
      {with({"create", "NoSuchClass", "x"}), 1},
      {with({"create", "EchoAgent", "dup", "--id", "echo-1"}), 1},
      {with({"create", "EchoAgent", "e2", "--args", R"({"sleep_ms": "soon"})"}), 1},
      {with({"create", "NoSuchClass", "x", "--count", "2"}), 1},
      {with({"create", "EchoAgent", "b", "--count", "3", "--args", R"({"sleep_ms": "soon"})"}), 1},
      {with({"method", "echo-1", "no_such_method"}), 1},
      {with({"--json", "memory", "no-such-agent"}), 1},
      // What goes wrong on the command line: exit 2, nothing sent.
      {with({"create", "EchoAgent", "e2", "--args", "{bad"}), 2},
      {with({"create", "EchoAgent"}), 2},
      {with({"create", "EchoAgent", "b", "--count", "0"}), 2},
      {with({"create", "EchoAgent", "b", "--count", "2", "--id", "x"}), 2},
      {with({"frobnicate"}), 2},
      {with({"list", "--all"}), 2},
      {with({"delete"}), 2},
      {with({"reload"}), 2},
      {{"--port", "notaport", "list"}, 2},
      {{"create", "--help"}, 0},
      // Model configs, servers, deletion.
      {with({"reload", "--file", good_models}), 0},
      {with({"reload", "--file", bad_models}), 1},
      {with({"status"}), 0},
      {with({"delete", "echo-1"}), 0},
      {with({"--json", "delete", "--all"}), 0},
      {with({"list"}), 0},
      {with({"stop", "--wait"}), 0},
      // Nobody there any more: exit 3.
      {with({"ping"}), 3},
      {with({"--json", "list"}), 3},
  };

  std::vector<std::pair<std::string, std::string>> exact = {
      {tmp.path(), "<TMP>"},          {"127.0.0.1:" + port, "127.0.0.1:PORT"},
      {"port " + port, "port PORT"},  {server->server_id(), "SERVER_ID"},
      {agentd::version(), "VERSION"}, {AGENTD_TEST_PLUGIN_DIR, "<PLUGINS>"},
  };
  std::string transcript;
  for (const auto& step : steps) {
    auto r = run_agentctl(step.args);
    auto shown = step.args;
    if (shown.size() >= 2 && shown[0] == "--port" && shown[1] == port) shown[1] = "PORT";
    std::string block = "$ " + shell_line(shown) + "\n" + r.out;
    std::istringstream err(r.err);
    for (std::string line; std::getline(err, line);) block += "stderr: " + line + "\n";
    block += "[exit " + std::to_string(r.exit_code) + "]\n\n";
    block = normalise(block, exact);
    if (std::find(step.args.begin(), step.args.end(), "status") != step.args.end())
      block = hide_load_figures(block);
    transcript += block;
    INFO(block);
    CHECK(r.exit_code == step.exit_code);
  }
  // `stop --wait` returned after the server closed its connections; it exits cleanly.
  auto exit = server->wait_exit(std::chrono::seconds(30));
  CHECK(exit.exit_code == 0);

  auto problem = check_golden("session.txt", transcript);
  INFO(problem);
  CHECK(problem.empty());
}

TEST_CASE("agentctl call --stream prints each chunk when it comes, not at the end", "[agentctl]") {
  auto server = ServerProcess::start({"--port", "0", "--plugin", echo_plugin(), "--log-level", "warn"});
  auto c = server->connect();
  auto a = c.create_agent("StreamEchoAgent", "s");
  // Two chunks with 3 s after each: the first must be on agentctl's stdout long before it exits.
  const std::string cmd = agentctl_path() + " --port " + std::to_string(server->port()) +
                          " call --stream --content-json " + a.id() +
                          " '{\"count\": 2, \"gap_ms\": 3000}' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  std::optional<std::chrono::steady_clock::time_point> first_seen;
  char buf[256];
  for (ssize_t n; (n = ::read(::fileno(p), buf, sizeof buf)) > 0;) {
    out.append(buf, static_cast<std::size_t>(n));
    if (!first_seen && out.find("0 ") != std::string::npos) first_seen = std::chrono::steady_clock::now();
  }
  const auto ended = std::chrono::steady_clock::now();
  const int status = ::pclose(p);
  INFO(out);
  CHECK(status == 0);
  CHECK(out == "0 1 \n");
  REQUIRE(first_seen.has_value());
  CHECK(ended - *first_seen > std::chrono::milliseconds(1500));
}

TEST_CASE("agentctl trace --chrome writes a trace-event file Perfetto opens, with dataflow arrows",
          "[agentctl]") {
  auto server = ServerProcess::start({"--port", "0", "--plugin", echo_plugin(), "--log-level", "warn"});
  auto c = server->connect();
  auto a = c.create_agent("EchoAgent", "a");
  auto b = c.create_agent("EchoAgent", "b");
  b.reply(a.reply(agentd::Msg("user", "hi", "user"))).get();  // b consumes a's placeholder
  TempDir tmp;
  const std::string file = tmp.path() + "/trace.json";
  const std::string port = std::to_string(server->port());
  auto r = run_agentctl({"--port", port, "trace", "--chrome", file});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Matchers::Contains("wrote 2 span(s)") && Catch::Matchers::Contains(file));
  std::ifstream in(file);
  const agentd::Value trace = agentd::Value::parse(in);
  int calls = 0, arrows = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "X" && e.at("name") == "reply") ++calls;
    if (e.at("ph") == "s") ++arrows;
  }
  CHECK(calls == 2);
  CHECK(arrows == 1);
  // '-' writes to standard output; a missing name is a usage error.
  auto out = run_agentctl({"--port", port, "trace", "--chrome", "-"});
  CHECK(out.exit_code == 0);
  CHECK(agentd::Value::parse(out.out).contains("traceEvents"));
  auto bad = run_agentctl({"--port", port, "trace", "--chrome", ""});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Matchers::Contains("--chrome needs a file name"));
}

TEST_CASE("agentctl --help documents every command and the exit codes", "[agentctl]") {
  auto r = run_agentctl({"--help"});
  CHECK(r.exit_code == 0);
  for (const char* cmd : {"status", "list", "create", "call", "method", "memory", "delete", "reload", "stop",
                          "ping", "up", "down", "ps"})
    CHECK(r.out.find("\n  " + std::string(cmd)) != std::string::npos);
  CHECK(r.out.find("Exit codes:") != std::string::npos);
  for (const char* cmd : {"status", "list", "create", "call", "method", "memory", "delete", "reload", "stop",
                          "ping", "up", "down", "ps"}) {
    auto h = run_agentctl({cmd, "--help"});
    INFO(cmd);
    CHECK(h.exit_code == 0);
    CHECK(h.out.find(std::string("agentctl [GLOBAL OPTIONS] ") + cmd) != std::string::npos);
  }
}
