// Tracing of a real as_server: one span per finished agent call, kept in a bounded buffer
// (Client::traces / AgentServer.traces), with the call ids of the placeholders a call consumed,
// and --trace-file writing one OpenTelemetry-style JSON line per span.
#include "server_process.h"
#include "test_names.h"

#include <agentd/client.h>

#include <catch2/catch.hpp>
#include <error_of.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

using namespace agentd::test;
using agentd::TraceSpan;

namespace {

const TraceSpan* find_span(const std::vector<TraceSpan>& spans, const std::string& call_id) {
  for (const auto& s : spans)
    if (s.call_id == call_id) return &s;
  return nullptr;
}

std::vector<std::string> file_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// attributes [{key, value: {stringValue|intValue|arrayValue}}] -> key -> value object.
std::map<std::string, nlohmann::json> attributes_of(const nlohmann::json& span) {
  std::map<std::string, nlohmann::json> out;
  for (const auto& a : span.at("attributes")) out[a.at("key").get<std::string>()] = a.at("value");
  return out;
}

}  // namespace

TEST_CASE("traces show a chain's consumer span naming the producer's call id", "[trace]") {
  auto server = ServerProcess::start(standard_args());
  auto client = server->connect();
  auto a = client.create_agent("EchoAgent", "", Value::object(), "trace-a");
  auto b = client.create_agent("EchoAgent", "", Value::object(), "trace-b");
  auto flaky = client.create_agent("FlakyAgent", "", Value::object(), "trace-flaky");

  auto pa = a.reply(Msg("user", "hello"));
  auto pb = b.reply(pa);  // B consumes A's placeholder
  CHECK(pb.get().content == "hello");
  auto e = error_of([&] { flaky.reply(Msg("user", "fail")).get(); });
  CHECK(e.code() == agentd::ErrorCode::agent_failed);

  auto spans = client.traces();
  REQUIRE(spans.size() == 3);
  // Oldest first, numbered in finishing order.
  for (std::size_t i = 1; i < spans.size(); ++i) CHECK(spans[i].seq == spans[i - 1].seq + 1);

  const TraceSpan* sa = find_span(spans, pa.call_id());
  const TraceSpan* sb = find_span(spans, pb.call_id());
  REQUIRE(sa != nullptr);
  REQUIRE(sb != nullptr);
  CHECK(sa->agent_id == "trace-a");
  CHECK(sa->agent_class == "EchoAgent");
  CHECK(sa->kind == "reply");
  CHECK(sa->consumed.empty());
  CHECK(sa->outcome == "ok");
  CHECK(sb->agent_id == "trace-b");
  CHECK(sb->consumed == std::vector<std::string>{pa.call_id()});
  CHECK(sb->outcome == "ok");
  CHECK(sb->seq > sa->seq);
  for (const auto& s : spans) {
    CHECK(s.queue_wait_ns >= 0);
    CHECK(s.run_ns >= 0);
    CHECK(s.enqueued_unix_ns > 0);
  }
  // B was queued no later than A finished; it waited for A's result.
  CHECK(sb->enqueued_unix_ns + sb->queue_wait_ns >= sa->enqueued_unix_ns + sa->queue_wait_ns);

  const auto& sf = spans.back();
  CHECK(sf.agent_id == "trace-flaky");
  CHECK(sf.outcome == "agent_failed");
  CHECK_FALSE(sf.error_message.empty());

  // limit: the newest ones.
  auto last = client.traces(1);
  REQUIRE(last.size() == 1);
  CHECK(last[0].seq == spans.back().seq);

  // Other kinds get spans too (without a call id).
  try {
    a.call("no_such_method", Value::object());
  } catch (const agentd::Error&) {
    // EchoAgent has no methods: the span then reports the error.
  }
  spans = client.traces();
  REQUIRE(spans.size() == 4);
  CHECK(spans.back().kind == "method");
  CHECK(spans.back().method == "no_such_method");
  CHECK(spans.back().call_id.empty());
}

TEST_CASE("the trace buffer is bounded", "[trace]") {
  auto server = ServerProcess::start(standard_args());
  auto client = server->connect();
  auto a = client.create_agent("EchoAgent", "", Value::object(), "trace-many");
  std::vector<agentd::Placeholder> ps;
  for (int i = 0; i < 4100; ++i) ps.push_back(a.reply(Msg("user", "x")));
  ps.back().get();
  auto spans = client.traces();
  CHECK(spans.size() == 4096);
  CHECK(spans.back().seq == 4100);
  CHECK(spans.front().seq == 5);
}

TEST_CASE("the trace file gets one OpenTelemetry JSON line per call (--trace-file)", "[trace]") {
  TempDir dir;
  std::string path = dir.path() + "/spans.jsonl";
  auto server = ServerProcess::start(standard_args({"--trace-file", path}));
  auto client = server->connect();
  auto a = client.create_agent("EchoAgent", "", Value::object(), "file-a");
  auto b = client.create_agent("EchoAgent", "", Value::object(), "file-b");
  auto flaky = client.create_agent("FlakyAgent", "", Value::object(), "file-flaky");
  auto pa = a.reply(Msg("user", "hello"));
  auto pb = b.reply(pa);
  pb.get();
  error_of([&] { flaky.reply(Msg("user", "fail")).get(); });
  // Lines are written by the workers after publishing the result.
  REQUIRE(wait_until([&] { return file_lines(path).size() >= 3; }, 10s));

  std::map<std::string, nlohmann::json> by_call;
  for (const auto& line : file_lines(path)) {
    INFO(line);
    auto j = nlohmann::json::parse(line);  // throws (failing the test) on anything else
    REQUIRE(j.is_object());
    CHECK(j.at("name") == "agentd.call");
    CHECK(j.at("traceId").get<std::string>().size() == 32);
    CHECK(j.at("spanId").get<std::string>().size() == 16);
    auto start = std::stoll(j.at("startTimeUnixNano").get<std::string>());
    auto end = std::stoll(j.at("endTimeUnixNano").get<std::string>());
    CHECK(start > 0);
    CHECK(end >= start);
    auto attrs = attributes_of(j);
    for (const char* k : {"agentd.call_id", "agentd.agent_id", "agentd.agent_class", "agentd.consumed",
                          "agentd.queue_wait_ns", "agentd.outcome"})
      CHECK(attrs.count(k) == 1);
    CHECK(std::stoll(attrs["agentd.queue_wait_ns"].at("intValue").get<std::string>()) >= 0);
    by_call[attrs["agentd.call_id"].at("stringValue").get<std::string>()] = j;
  }
  REQUIRE(by_call.count(pa.call_id()) == 1);
  REQUIRE(by_call.count(pb.call_id()) == 1);
  auto ja = by_call[pa.call_id()];
  auto jb = by_call[pb.call_id()];
  auto ab = attributes_of(jb);
  CHECK(ab["agentd.agent_id"].at("stringValue") == "file-b");
  CHECK(ab["agentd.agent_class"].at("stringValue") == "EchoAgent");
  CHECK(ab["agentd.outcome"].at("stringValue") == "ok");
  auto consumed = ab["agentd.consumed"].at("arrayValue").at("values");
  REQUIRE(consumed.size() == 1);
  CHECK(consumed[0].at("stringValue") == pa.call_id());
  // B links to A's span.
  REQUIRE(jb.at("links").size() == 1);
  CHECK(jb.at("links")[0].at("spanId") == ja.at("spanId"));
  CHECK(jb.at("links")[0].at("traceId") == ja.at("traceId"));
  bool saw_error = false;
  for (const auto& [id, j] : by_call) {
    auto at = attributes_of(j);
    if (at["agentd.agent_id"].at("stringValue") == "file-flaky") {
      saw_error = true;
      CHECK(at["agentd.outcome"].at("stringValue") == "agent_failed");
      CHECK(j.at("status").at("code") == "STATUS_CODE_ERROR");
    }
  }
  CHECK(saw_error);
  CHECK(server->signal_and_wait(SIGTERM).exit_code == 0);
}

TEST_CASE("a --trace-file that cannot be opened fails start-up with exit 2", "[trace]") {
  auto r = run_as_server(standard_args({"--trace-file", "/nonexistent-dir/x/spans.jsonl"}));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--trace-file") && Contains("/nonexistent-dir/x/spans.jsonl"));
  CHECK_THAT(r.out, !Contains("ready"));
}

#ifdef AGENTD_DIALOG_PLUGIN
TEST_CASE("a span counts the model calls and tokens of its call", "[trace]") {
  auto server = ServerProcess::start(standard_args({"--plugin", AGENTD_DIALOG_PLUGIN}));
  auto client = server->connect();
  auto dialog = client.create_agent("DialogAgent", "d", agentd::Value{{"sys_prompt", "be brief"}});
  auto echo = client.create_agent("EchoAgent", "e");
  auto p = dialog.reply(agentd::Msg("user", "one two three", "user"));
  p.get();
  echo.reply(agentd::Msg("user", "x")).get();
  auto spans = client.traces();
  auto find = [&](const std::string& call_id) {
    auto it = std::find_if(spans.begin(), spans.end(),
                           [&](const agentd::TraceSpan& s) { return s.call_id == call_id; });
    REQUIRE(it != spans.end());
    return *it;
  };
  auto d = find(p.call_id());
  CHECK(d.model_calls == 1);
  CHECK(d.completion_tokens == 3);  // the echo model counts words
  CHECK(d.prompt_tokens > 0);
  auto last = spans.back();
  CHECK(last.agent_class == "EchoAgent");
  CHECK(last.model_calls == 0);
}
#endif
