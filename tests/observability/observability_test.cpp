// Logs and metrics of a real as_server: --log-format json (every stderr line a JSON object),
// per-call debug lines, a bad --log-format, and the Prometheus /metrics endpoint on
// --metrics-port (counters, the latency histogram, 404s, a malformed request, a busy port).
#include "http_get.h"
#include "server_process.h"
#include "test_names.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>
#include <error_of.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>

using namespace agentd::test;

namespace {

// standard_args() with another --log-level (it sets "warn").
std::vector<std::string> args_at_level(const std::string& level, std::vector<std::string> extra = {}) {
  auto args = standard_args(std::move(extra));
  auto it = std::find(args.begin(), args.end(), "--log-level");
  REQUIRE(it != args.end());
  *std::next(it) = level;
  return args;
}

// The samples of a Prometheus text body: "name{labels}" -> value.
std::map<std::string, double> parse_samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

}  // namespace

TEST_CASE("the metrics port serves Prometheus text with call counters and latency", "[metrics]") {
  auto metrics_port = unused_port();
  auto server = ServerProcess::start(standard_args({"--metrics-port", std::to_string(metrics_port)}));
  auto client = server->connect();
  auto echo = client.create_agent("EchoAgent", "", Value::object(), "echo");
  auto flaky = client.create_agent("FlakyAgent", "", Value::object(), "flaky");
  for (int i = 0; i < 5; ++i) CHECK(echo.reply(Msg("user", "hi")).get().content == "hi");
  auto e = error_of([&] { flaky.reply(Msg("user", "fail")).get(); });
  CHECK(e.code() == agentd::ErrorCode::agent_failed);
  // Reading an agent's memory (agentctl memory, the console) is not one of its calls.
  CHECK_FALSE(echo.memory().empty());

  auto response = get(metrics_port, "/metrics");
  REQUIRE_THAT(response, Contains("HTTP/1.1 200 OK\r\n"));
  CHECK_THAT(response, Contains("Content-Type: text/plain; version=0.0.4"));
  auto body = body_of(response);
  CHECK_THAT(response, Contains("Content-Length: " + std::to_string(body.size()) + "\r\n"));
  CHECK_THAT(body, Contains("# TYPE agentd_calls_total counter"));
  CHECK_THAT(body, Contains("# TYPE agentd_call_duration_seconds histogram"));

  auto m = parse_samples(body);
  CHECK(m["agentd_agents"] == 2);
  CHECK(m["agentd_calls_total{outcome=\"ok\"}"] == 5);
  CHECK(m["agentd_calls_total{outcome=\"error\"}"] == 1);
  CHECK(m["agentd_class_calls_total{class=\"EchoAgent\",outcome=\"ok\"}"] == 5);
  CHECK(m["agentd_class_calls_total{class=\"FlakyAgent\",outcome=\"error\"}"] == 1);
  CHECK(m["agentd_calls_queued"] == 0);
  CHECK(m["agentd_calls_running"] == 0);
  CHECK(m["agentd_result_pool_size"] == 6);
  CHECK(m["agentd_result_pool_evictions_total"] == 0);
  CHECK(m["agentd_peer_fetches_total"] == 0);
  CHECK(m["agentd_model_calls_total"] == 0);
  CHECK(m.count("agentd_model_errors_total") == 1);
  CHECK(m.count("agentd_model_tokens_total{kind=\"prompt\"}") == 1);
  CHECK(m.count("agentd_model_tokens_total{kind=\"completion\"}") == 1);
  CHECK(m["agentd_bytes_total{conn=\"client\",dir=\"in\"}"] > 0);
  CHECK(m["agentd_bytes_total{conn=\"client\",dir=\"out\"}"] > 0);
  CHECK(m["agentd_bytes_total{conn=\"peer\",dir=\"in\"}"] == 0);
  CHECK(m["agentd_workers"] >= 1);
  // Every call that ran (the failed one too) is one observation; buckets are cumulative.
  CHECK(m["agentd_call_duration_seconds_count"] == 6);
  CHECK(m["agentd_call_duration_seconds_bucket{le=\"+Inf\"}"] == 6);
  CHECK(m["agentd_call_duration_seconds_bucket{le=\"0.0001\"}"] <=
        m["agentd_call_duration_seconds_bucket{le=\"10\"}"]);
  CHECK(m["agentd_call_duration_seconds_sum"] >= 0);

  // More calls move the counters.
  echo.reply(Msg("user", "again")).get();
  auto m2 = parse_samples(body_of(get(metrics_port, "/metrics")));
  CHECK(m2["agentd_calls_total{outcome=\"ok\"}"] == 6);
  CHECK(m2["agentd_call_duration_seconds_count"] == 7);
}

TEST_CASE("the metrics port answers 404 for anything but GET /metrics", "[metrics]") {
  auto metrics_port = unused_port();
  auto server = ServerProcess::start(standard_args({"--metrics-port", std::to_string(metrics_port)}));
  CHECK_THAT(get(metrics_port, "/"), Contains("HTTP/1.1 404 Not Found\r\n"));
  CHECK_THAT(http(metrics_port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
             Contains("HTTP/1.1 404"));
  // A malformed request gets kj-http's 400.
  CHECK_THAT(http(metrics_port, "GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n"),
             Contains("HTTP/1.1 400 Bad Request\r\n"));
  // The server still serves after them.
  CHECK_THAT(get(metrics_port, "/metrics?x=1"), Contains("HTTP/1.1 200 OK"));
  CHECK(server->running());
}

TEST_CASE("as_server --help documents --log-format and --metrics-port", "[metrics]") {
  auto r = run_as_server({"--help"});
  CHECK_THAT(r.out, Contains("--metrics-port") && Contains("--log-format"));
}

TEST_CASE("a busy metrics port fails start-up with exit 3", "[metrics]") {
  auto metrics_port = unused_port();
  auto first = ServerProcess::start(standard_args({"--metrics-port", std::to_string(metrics_port)}));
  auto r = run_as_server(standard_args({"--metrics-port", std::to_string(metrics_port)}));
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.out, !Contains("ready"));
  CHECK_THAT(r.err, Contains("--metrics-port") && Contains(std::to_string(metrics_port)));
  CHECK(first->running());
}

TEST_CASE("a bad --log-format or --metrics-port value exits 2 with a message", "[logs]") {
  auto r = run_as_server(standard_args({"--log-format", "xml"}));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--log-format xml") && Contains("json"));
  CHECK_THAT(r.out, !Contains("ready"));
  auto r2 = run_as_server(standard_args({"--metrics-port", "70000"}));
  CHECK(r2.exit_code == 2);
  CHECK_THAT(r2.err, Contains("70000"));
}

TEST_CASE("json logs are one JSON object per line, with per-call debug lines", "[logs]") {
  auto server = ServerProcess::start(args_at_level("debug", {"--log-format", "json"}));
  auto client = server->connect();
  auto echo = client.create_agent("EchoAgent", "", Value::object(), "echo-json");
  echo.reply(Msg("user", "say \"hi\"\n")).get();
  auto flaky = client.create_agent("FlakyAgent", "", Value::object(), "flaky-json");
  error_of([&] { flaky.reply(Msg("user", "fail")).get(); });
  // The debug lines are written by the worker that finished the call.
  REQUIRE(wait_until([&] { return server->stderr_text().find("flaky-json") != std::string::npos; }, 10s));
  auto result = server->signal_and_wait(SIGTERM);
  CHECK(result.exit_code == 0);

  std::istringstream in(result.err);
  std::string line;
  int lines = 0, ok_calls = 0, failed_calls = 0;
  while (std::getline(in, line)) {
    INFO(line);
    auto j = nlohmann::json::parse(line);  // throws (failing the test) on anything else
    ++lines;
    REQUIRE(j.is_object());
    CHECK(j.at("time").is_string());
    CHECK(j.at("level").is_string());
    auto msg = j.at("msg").get<std::string>();
    if (msg.find("call finished") != std::string::npos) {
      CHECK(j["level"] == "debug");
      if (msg.find("agent=echo-json") != std::string::npos) {
        CHECK_THAT(msg, Contains("class=EchoAgent") && Contains("kind=reply") && Contains("outcome=ok") &&
                            Contains("run_ms="));
        ++ok_calls;
      }
      if (msg.find("agent=flaky-json") != std::string::npos) {
        CHECK_THAT(msg, Contains("outcome=error(agent_failed)"));
        ++failed_calls;
      }
    }
  }
  CHECK(lines >= 3);
  CHECK(ok_calls == 1);
  CHECK(failed_calls == 1);
}

TEST_CASE("at the default level there are no per-call lines", "[logs]") {
  auto server = ServerProcess::start(args_at_level("info"));
  auto client = server->connect();
  client.create_agent("EchoAgent", "", Value::object(), "quiet").reply(Msg("user", "x")).get();
  auto result = server->signal_and_wait(SIGTERM);
  CHECK_THAT(result.err, !Contains("call finished"));
  CHECK_THAT(result.err, Contains("stopped"));
}
