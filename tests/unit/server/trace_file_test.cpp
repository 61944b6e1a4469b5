// TraceFile (--trace-file) and span_json_line: one OpenTelemetry-style JSON line per finished
// call, with the fields the README promises and tests/observability/trace_test.cpp reads from a
// real server (name, traceId/spanId derived from the call id, start/end in Unix nanoseconds as
// strings, agentd.* attributes, links to the consumed placeholders' spans, status); a path that
// cannot be opened fails with Error(config_error) naming it.
#include "trace_file.h"

#include "server_process.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>
#include <error_of.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace agentd::test;
using agentd::ErrorCode;
using agentd::detail::span_json_line;
using agentd::detail::SpanRecord;
using agentd::detail::TraceFile;
using Catch::Matchers::Contains;
using Catch::Matchers::Matches;

namespace {

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
  for (const auto& a : span.at("attributes")) {
    auto key = a.at("key").get<std::string>();
    CHECK(out.count(key) == 0);  // each attribute once
    out[key] = a.at("value");
  }
  return out;
}

std::int64_t int_attr(const std::map<std::string, nlohmann::json>& attrs, const std::string& k) {
  // OTLP JSON writes 64-bit integers as strings.
  return std::stoll(attrs.at(k).at("intValue").get<std::string>());
}
std::string string_attr(const std::map<std::string, nlohmann::json>& attrs, const std::string& k) {
  return attrs.at(k).at("stringValue").get<std::string>();
}

SpanRecord reply_span(const std::string& call_id, const std::string& agent_id) {
  SpanRecord s;
  s.seq = 1;
  s.call_id = call_id;
  s.agent_id = agent_id;
  s.agent_class = "EchoAgent";
  s.kind = "reply";
  s.enqueued_unix_ns = 1714979289'000000000;
  s.queue_wait_ns = 1500;
  s.run_ns = 250000;
  s.outcome = "ok";
  return s;
}

nlohmann::json parse(const std::string& line) {
  INFO("line: " << line);
  CHECK(line.find('\n') == std::string::npos);
  auto j = nlohmann::json::parse(line);  // throws, failing the test, on anything else
  REQUIRE(j.is_object());
  return j;
}

}  // namespace

TEST_CASE("a span line carries the OpenTelemetry fields and agentd attributes", "[trace_file]") {
  SpanRecord s = reply_span("call-1", "a1");
  s.consumed = {"call-0"};
  s.model_calls = 2;
  s.prompt_tokens = 30;
  s.completion_tokens = 7;
  auto j = parse(span_json_line(s, "srv-1"));

  CHECK(j.at("name") == "agentd.call");
  CHECK(j.at("kind") == "SPAN_KIND_INTERNAL");
  CHECK_THAT(j.at("traceId").get<std::string>(), Matches("[0-9a-f]{32}"));
  CHECK_THAT(j.at("spanId").get<std::string>(), Matches("[0-9a-f]{16}"));
  // The span starts when the call started running (queued + waited) and lasts its run time.
  CHECK(j.at("startTimeUnixNano") == "1714979289000001500");
  CHECK(j.at("endTimeUnixNano") == "1714979289000251500");
  CHECK(j.at("status").at("code") == "STATUS_CODE_OK");
  CHECK_FALSE(j.at("status").contains("message"));

  auto attrs = attributes_of(j);
  CHECK(string_attr(attrs, "agentd.call_id") == "call-1");
  CHECK(string_attr(attrs, "agentd.agent_id") == "a1");
  CHECK(string_attr(attrs, "agentd.agent_class") == "EchoAgent");
  CHECK(string_attr(attrs, "agentd.kind") == "reply");
  CHECK(string_attr(attrs, "agentd.outcome") == "ok");
  CHECK(string_attr(attrs, "agentd.server_id") == "srv-1");
  CHECK(int_attr(attrs, "agentd.queue_wait_ns") == 1500);
  CHECK(int_attr(attrs, "agentd.run_ns") == 250000);
  CHECK(int_attr(attrs, "agentd.model_calls") == 2);
  CHECK(int_attr(attrs, "agentd.model_prompt_tokens") == 30);
  CHECK(int_attr(attrs, "agentd.model_completion_tokens") == 7);
  auto consumed = attrs.at("agentd.consumed").at("arrayValue").at("values");
  REQUIRE(consumed.size() == 1);
  CHECK(consumed[0].at("stringValue") == "call-0");
  CHECK(attrs.count("agentd.method") == 0);  // only for method calls
}

TEST_CASE("a consumer's span links to the span of the producer it consumed", "[trace_file]") {
  SpanRecord producer = reply_span("call-producer", "a");
  SpanRecord other = reply_span("call-other", "c");
  SpanRecord consumer = reply_span("call-consumer", "b");
  consumer.consumed = {"call-producer", "call-other"};
  auto jp = parse(span_json_line(producer, "srv-1"));
  auto jo = parse(span_json_line(other, "srv-1"));
  auto jc = parse(span_json_line(consumer, "srv-2"));  // the producer may be on another server
  REQUIRE(jc.at("links").size() == 2);
  CHECK(jc.at("links")[0].at("traceId") == jp.at("traceId"));
  CHECK(jc.at("links")[0].at("spanId") == jp.at("spanId"));
  CHECK(jc.at("links")[1].at("spanId") == jo.at("spanId"));
  CHECK(jp.at("links").empty());
  // Distinct calls, distinct ids; the same call, the same ids (ids are derived, not random).
  CHECK(jp.at("spanId") != jc.at("spanId"));
  CHECK(jp.at("traceId") != jc.at("traceId"));
  CHECK(jp.at("spanId") != jo.at("spanId"));
  CHECK(parse(span_json_line(producer, "srv-1")).at("spanId") == jp.at("spanId"));
}

TEST_CASE("a failed call's span has an error status with its message", "[trace_file]") {
  SpanRecord s = reply_span("call-f", "flaky");
  s.outcome = "agent_failed";
  s.error_message = "FlakyAgent threw: \"boom\"\nat line 2 \x01\xff";
  auto j = parse(span_json_line(s, "srv"));
  CHECK(j.at("status").at("code") == "STATUS_CODE_ERROR");
  CHECK_THAT(j.at("status").at("message").get<std::string>(),
             Contains("FlakyAgent threw: \"boom\"\nat line 2 \x01"));
  CHECK(string_attr(attributes_of(j), "agentd.outcome") == "agent_failed");
}

TEST_CASE("spans of calls without a call id get distinct ids and name their method", "[trace_file]") {
  SpanRecord a = reply_span("", "a1");
  a.kind = "method";
  a.method = "summarize";
  SpanRecord b = a;
  b.seq = 2;
  auto ja = parse(span_json_line(a, "srv"));
  auto jb = parse(span_json_line(b, "srv"));
  CHECK(ja.at("spanId") != jb.at("spanId"));
  auto attrs = attributes_of(ja);
  CHECK(string_attr(attrs, "agentd.call_id").empty());
  CHECK(string_attr(attrs, "agentd.kind") == "method");
  CHECK(string_attr(attrs, "agentd.method") == "summarize");
  // Another server's call with the same agent and number is another span.
  CHECK(parse(span_json_line(a, "srv-other")).at("spanId") != ja.at("spanId"));
}

TEST_CASE("TraceFile appends one flushed line per span", "[trace_file]") {
  TempDir dir;
  const std::string path = dir.path() + "/spans.jsonl";
  {
    TraceFile f(path, "srv-1");
    f.write(reply_span("c1", "a"));
    // Flushed: readable while the file is still open.
    auto lines = file_lines(path);
    REQUIRE(lines.size() == 1);
    CHECK(string_attr(attributes_of(parse(lines[0])), "agentd.call_id") == "c1");
    SpanRecord odd = reply_span("c2", "agent \"with\"\nnewline");
    f.write(odd);
    REQUIRE(file_lines(path).size() == 2);
  }
  // A restart appends to what is there.
  {
    TraceFile f(path, "srv-2");
    f.write(reply_span("c3", "a"));
  }
  auto lines = file_lines(path);
  REQUIRE(lines.size() == 3);
  std::vector<std::string> ids, servers;
  for (const auto& l : lines) {
    auto attrs = attributes_of(parse(l));
    ids.push_back(string_attr(attrs, "agentd.call_id"));
    servers.push_back(string_attr(attrs, "agentd.server_id"));
  }
  CHECK(ids == std::vector<std::string>{"c1", "c2", "c3"});
  CHECK(servers == std::vector<std::string>{"srv-1", "srv-1", "srv-2"});
  CHECK(string_attr(attributes_of(parse(lines[1])), "agentd.agent_id") == "agent \"with\"\nnewline");
}

TEST_CASE("TraceFile lines written from many threads at once never interleave", "[trace_file]") {
  // Workers write their spans as they finish calls.
  TempDir dir;
  const std::string path = dir.path() + "/spans.jsonl";
  constexpr int kThreads = 4;
  constexpr int kEach = 250;
  {
    TraceFile f(path, "srv");
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&f, t] {
        for (int i = 0; i < kEach; ++i) {
          SpanRecord s = reply_span(fmt::format("t{}-{}", t, i), "a");
          s.error_message = std::string(512, 'e');  // long enough for a torn write to show
          f.write(s);
        }
      });
    for (auto& th : threads) th.join();
  }
  auto lines = file_lines(path);
  REQUIRE(lines.size() == kThreads * kEach);
  std::map<std::string, int> seen;
  for (const auto& l : lines) {
    nlohmann::json j;
    REQUIRE_NOTHROW(j = nlohmann::json::parse(l));
    ++seen[string_attr(attributes_of(j), "agentd.call_id")];
  }
  CHECK(seen.size() == static_cast<std::size_t>(kThreads * kEach));
}

TEST_CASE("a trace file that cannot be opened fails with config_error naming the path and why",
          "[trace_file]") {
  SECTION("its directory does not exist") {
    auto e = error_of([] { TraceFile f("/nonexistent-dir/x/spans.jsonl", "srv"); });
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_FALSE(e.retryable());
    CHECK_THAT(e.message(), Contains("--trace-file") && Contains("/nonexistent-dir/x/spans.jsonl") &&
                                Contains("No such file or directory"));
  }
  SECTION("it is a directory") {
    TempDir dir;
    auto e = error_of([&] { TraceFile f(dir.path(), "srv"); });
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains(dir.path()) && Contains("Is a directory"));
  }
}
