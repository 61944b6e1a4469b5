// CallStats: counters in all and by class, the span ring (wrap-around, newest kept, oldest
// first), spans built from finished calls.
#include "call_stats.h"

#include "mailbox.h"
#include "test_names.h"

#include <catch2/catch.hpp>

#include <string>

using namespace agentd::test;
using namespace agentd::detail;

namespace {

SpanRecord span_of(const std::string& call_id) {
  SpanRecord s;
  s.call_id = call_id;
  return s;
}

// The agent whose calls the spans below describe.
void name_agent(AgentSlot& slot) {
  slot.id = "a1";
  slot.class_name = "Cls";
}

}  // namespace

TEST_CASE("the span ring keeps the newest spans, oldest first, across wrap-around", "[call_stats]") {
  CallStats stats(3);
  CHECK(stats.recent_spans(0).empty());
  for (int i = 1; i <= 7; ++i) stats.record("A", true, 0.001, span_of("c" + std::to_string(i)));
  auto all = stats.recent_spans(0);
  REQUIRE(all.size() == 3);
  CHECK(all[0].call_id == "c5");
  CHECK(all[0].seq == 5);
  CHECK(all[1].call_id == "c6");
  CHECK(all[2].call_id == "c7");
  CHECK(all[2].seq == 7);
  auto two = stats.recent_spans(2);
  REQUIRE(two.size() == 2);
  CHECK(two[0].call_id == "c6");
  CHECK(two[1].call_id == "c7");
  CHECK(stats.recent_spans(10).size() == 3);
}

TEST_CASE("before the ring fills, every span is kept in order", "[call_stats]") {
  CallStats stats(4);
  stats.record("A", true, 0.001, span_of("x"));
  stats.record("A", true, 0.001, span_of("y"));
  auto spans = stats.recent_spans(0);
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].call_id == "x");
  CHECK(spans[1].call_id == "y");
  CHECK(stats.recent_spans(1).at(0).call_id == "y");
}

TEST_CASE("finished calls are counted in all and by class", "[call_stats]") {
  CallStats stats;
  stats.record("A", true, 0.002, span_of("1"));
  stats.record("A", false, 0.002, span_of("2"));
  stats.record("B", true, 20, span_of("3"));
  stats.failed_without_running("");
  stats.failed_without_running("B");
  CHECK(stats.completed() == 2);
  CHECK(stats.failed() == 3);
  const auto& by = stats.by_class();
  CHECK(by.at("A") == std::make_pair<std::uint64_t, std::uint64_t>(1, 1));
  CHECK(by.at("B") == std::make_pair<std::uint64_t, std::uint64_t>(1, 1));
  CHECK(by.at("(none)") == std::make_pair<std::uint64_t, std::uint64_t>(0, 1));
  // Only calls that ran have a run time; 20 s is past the last bound (+Inf only).
  CHECK(stats.latency().count == 3);
  CHECK(stats.latency().buckets[3] == 2);  // <= 5 ms
  std::uint64_t in_buckets = 0;
  for (auto b : stats.latency().buckets) in_buckets += b;
  CHECK(in_buckets == 2);
}

TEST_CASE("a finished call's span names its agent, kind, times and outcome", "[call_stats]") {
  CallStats stats;
  AgentSlot slot;
  name_agent(slot);
  Call c;
  c.kind = Call::Kind::method;
  c.method = "m";
  c.call_id = "call-1";
  c.consumed = {"p1"};
  c.enqueued = std::chrono::steady_clock::now();
  c.enqueued_wall = std::chrono::system_clock::now();
  c.started = c.enqueued + std::chrono::milliseconds(2);
  c.model_calls = 3;
  c.out_error = Error(ErrorCode::timeout, "too slow", "a1", "Cls");
  SpanRecord out;
  stats.finished(slot, c, c.started + std::chrono::milliseconds(5), &out);
  CHECK(out.seq == 1);
  CHECK(out.agent_id == "a1");
  CHECK(out.agent_class == "Cls");
  CHECK(std::string(out.kind) == "method");
  CHECK(out.method == "m");
  CHECK(out.consumed == std::vector<std::string>{"p1"});
  CHECK(out.queue_wait_ns == 2'000'000);
  CHECK(out.run_ns == 5'000'000);
  CHECK(out.model_calls == 3);
  CHECK(out.outcome == "timeout");
  CHECK(out.error_message == "too slow");
  CHECK(stats.failed() == 1);
  CHECK(stats.by_class().at("Cls").second == 1);
  CHECK(stats.recent_spans(0).at(0).call_id == "call-1");
}

TEST_CASE("a span written over an older one in the ring keeps nothing of it", "[call_stats]") {
  // The ring's slots are filled in place (their strings' memory reused): every field of the
  // older span must be replaced, or a trace would show one call's error beside another's id.
  CallStats stats(1);
  AgentSlot slot;
  name_agent(slot);
  Call failed;
  failed.kind = Call::Kind::reply;
  failed.call_id = "call-1";
  failed.consumed = {"p1", "p2"};
  failed.trace_id = "trace-1";
  failed.model_calls = 2;
  failed.prompt_tokens = 10;
  failed.tool_calls.push_back(agentd::ToolCallSpan{});
  failed.input = std::make_shared<const Outcome>(Outcome(Msg("user", Value("the question"), "user")));
  failed.started = failed.enqueued = std::chrono::steady_clock::now();
  failed.out_error = Error(ErrorCode::agent_failed, "it broke", "a1", "Cls");
  stats.finished(slot, failed, failed.started, nullptr);
  REQUIRE(stats.recent_spans(0).at(0).error_message == "it broke");
  REQUIRE(stats.recent_spans(0).at(0).input == "the question");

  Call ok;
  ok.kind = Call::Kind::method;
  ok.method = "m";
  ok.call_id = "call-2";
  ok.started = ok.enqueued = std::chrono::steady_clock::now();
  ok.out_msg = Msg("a1", Value("the answer"));
  SpanRecord out;
  stats.finished(slot, ok, ok.started, &out);
  auto spans = stats.recent_spans(0);
  REQUIRE(spans.size() == 1);
  for (const SpanRecord& s : {spans[0], out}) {
    CHECK(s.seq == 2);
    CHECK(s.call_id == "call-2");
    CHECK(std::string(s.kind) == "method");
    CHECK(s.method == "m");
    CHECK(s.outcome == "ok");
    CHECK(s.error_message.empty());
    CHECK(s.consumed.empty());
    CHECK(s.trace_id.empty());
    CHECK(s.model_calls == 0);
    CHECK(s.prompt_tokens == 0);
    CHECK(s.tool_calls.empty());
    CHECK(s.input.empty());
    CHECK(s.output == "the answer");
  }
  CHECK(stats.completed() == 1);
  CHECK(stats.failed() == 1);
}
