// What a console reads of a server, on real as_servers: a page of agents filtered and sorted by
// the server (Client::query_agents), each agent's last call and model tokens, the server's
// per-model stats and latency histograms (ServerInfo), the input and output previews of call
// spans, and those spans as a Chrome trace-event file (agentd::to_chrome_trace).
#include "server_process.h"
#include "test_names.h"

#include <agentd/trace_export.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace agentd::test;
using agentd::AgentPage;
using agentd::AgentQuery;
using agentd::Histogram;
using agentd::TraceSpan;
using Sort = agentd::AgentQuery::Sort;

namespace {

std::vector<std::string> console_args() { return standard_args({"--plugin", async_plugin()}); }

std::vector<std::string> ids(const AgentPage& page) {
  std::vector<std::string> out;
  for (const auto& a : page.agents) out.push_back(a.id);
  return out;
}

}  // namespace

TEST_CASE("query_agents pages, filters and sorts a server's agents on the server", "[console]") {
  auto s = ServerProcess::start(console_args());
  Client c = s->connect();
  // Named worker-0 .. worker-249, with ids the server picks.
  std::vector<AgentRef> workers = c.create_agents("EchoAgent", 250, agentd::Value::object(), "worker-");
  AgentRef ask = c.create_agent("AskAgent", "Planner-Main", agentd::Value::object(), "planner");
  // Three workers get 3, 2 and 1 calls; the asking agent uses the echo model.
  for (int i = 0; i < 3; ++i) workers[7].reply(Msg("user", "x", "user")).get();
  for (int i = 0; i < 2; ++i) workers[42].reply(Msg("user", "x", "user")).get();
  workers[199].reply(Msg("user", "x", "user")).get();
  // The asking agent's call is the last one in a millisecond of its own (last calls are kept to
  // the millisecond, and ties go by id).
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  ask.reply(Msg("user", "one two three", "user")).get();

  AgentPage all = c.query_agents({});
  CHECK(all.total == 251);
  CHECK(all.matched == 251);
  REQUIRE(all.agents.size() == 100);  // the default page
  CHECK(std::is_sorted(all.agents.begin(), all.agents.end(),
                       [](const auto& a, const auto& b) { return a.id < b.id; }));

  // Pages of 60 by id cover every agent once, in order.
  std::vector<std::string> paged;
  for (std::uint64_t off = 0; off < 251; off += 60) {
    AgentPage p = c.query_agents({.offset = off, .limit = 60});
    for (auto& id : ids(p)) paged.push_back(id);
  }
  CHECK(paged.size() == 251);
  CHECK(std::is_sorted(paged.begin(), paged.end()));
  CHECK(std::set<std::string>(paged.begin(), paged.end()).size() == 251);
  CHECK(c.query_agents({.offset = 251}).agents.empty());

  // Busiest first; ties (every agent without calls) in id order.
  AgentPage busy = c.query_agents({.sort = Sort::calls, .descending = true, .limit = 5});
  REQUIRE(busy.agents.size() == 5);
  CHECK(busy.agents[0].name == "worker-7");
  CHECK(busy.agents[0].completed_calls == 3);
  CHECK(busy.agents[1].name == "worker-42");
  CHECK(ids(busy)[2] < ids(busy)[3]);  // worker-199 and planner have one call each: by id

  // Search is a case-insensitive substring of id, name or class; class is exact.
  AgentPage planner = c.query_agents({.search = "PLANNER-m"});
  CHECK(planner.matched == 1);
  REQUIRE(planner.agents.size() == 1);
  CHECK(planner.agents[0].id == "planner");
  CHECK(c.query_agents({.search = "askag"}).matched == 1);            // by class
  CHECK(c.query_agents({.search = "worker-19"}).matched == 11);       // by name: 19, 190..199
  CHECK(c.query_agents({.class_name = "EchoAgent"}).matched == 250);  // exact class
  CHECK(c.query_agents({.class_name = "echoagent"}).matched == 0);
  AgentPage by_name = c.query_agents({.sort = Sort::name, .descending = true, .limit = 1});
  CHECK(by_name.agents.at(0).name == "worker-99");

  // Each agent's last call and its model use.
  AgentPage tokens = c.query_agents({.sort = Sort::tokens, .descending = true, .limit = 1});
  REQUIRE(tokens.agents.size() == 1);
  const auto& p = tokens.agents[0];
  CHECK(p.id == "planner");
  CHECK(p.model_calls == 1);
  CHECK(p.prompt_tokens == 3);
  CHECK(p.completion_tokens == 3);
  CHECK(p.last_call_unix_ms > 0);
  // Reading an agent's memory (as a console does) is not one of its calls.
  REQUIRE_FALSE(ask.memory().empty());
  CHECK(ask.info().completed_calls == 1);
  AgentPage recent = c.query_agents({.sort = Sort::last_call, .descending = true, .limit = 1});
  CHECK(recent.agents.at(0).id == "planner");  // the last call made
  CHECK(c.query_agents({.search = "worker-3", .limit = 1}).agents.at(0).last_call_unix_ms == 0);

  // The server answers at most 1000 per page.
  c.create_agents("EchoAgent", 1000, agentd::Value::object(), "more-");
  AgentPage big = c.query_agents({.limit = 5000});
  CHECK(big.agents.size() == 1000);
  CHECK(big.total == 1251);
}

TEST_CASE("server info carries per-model stats, latency histograms and its security", "[console]") {
  auto s = ServerProcess::start(console_args());
  Client c = s->connect();
  AgentRef ask = c.create_agent("AskAgent", "ask");
  for (int i = 0; i < 4; ++i) ask.reply(Msg("user", "a b", "user")).get();

  const agentd::ServerInfo info = c.info();
  CHECK_FALSE(info.auth_required);
  CHECK_FALSE(info.tls);
  CHECK(info.call_latency.count >= 4);
  CHECK(info.call_latency.bounds.size() == info.call_latency.counts.size());
  auto echo = std::find_if(info.models.begin(), info.models.end(),
                           [](const auto& m) { return m.config_name == "echo"; });
  REQUIRE(echo != info.models.end());
  CHECK(echo->model_type == "echo");
  CHECK(echo->calls == 4);
  CHECK(echo->prompt_tokens == 8);
  CHECK(echo->completion_tokens == 8);
  CHECK(echo->latency.count == 4);
  std::uint64_t bucketed = 0;
  for (auto n : echo->latency.counts) bucketed += n;
  CHECK(bucketed == 4);  // the echo model answers well within the first bound
  REQUIRE(echo->latency.quantile(0.5));
  CHECK(*echo->latency.quantile(0.5) <= echo->latency.bounds.front());
}

TEST_CASE("Histogram::quantile interpolates within buckets", "[console]") {
  Histogram h{.bounds = {0.1, 1, 10}, .counts = {0, 10, 0}, .count = 10, .sum = 5};
  CHECK(*h.quantile(0.5) == Approx(0.55));
  CHECK(*h.quantile(1.0) == Approx(1.0));
  Histogram over{.bounds = {0.1, 1}, .counts = {1, 0}, .count = 4, .sum = 100};
  CHECK(*over.quantile(0.95) == Approx(1.0));  // past the last bound: the last bound
  CHECK_FALSE(Histogram{}.quantile(0.5));
}

TEST_CASE("spans preview a call's input and output, and export as a Chrome trace with dataflow",
          "[console]") {
  auto s = ServerProcess::start(console_args());
  Client c = s->connect();
  AgentRef first = c.create_agent("EchoAgent", "first");
  AgentRef second = c.create_agent("EchoAgent", "second");
  Placeholder p1 = first.reply(Msg("user", "<b>hello</b> \"there\"", "user"));
  Placeholder p2 = second.reply(p1);  // consumes first's placeholder
  p2.get();
  const std::string long_text(5000, 'z');
  Placeholder big = first.reply(Msg("user", long_text + "\xc3\xa9", "user"));
  big.get();

  std::vector<TraceSpan> spans = c.traces();
  auto find = [&spans, &c](const std::string& id) {
    spans = c.traces();
    auto it = std::find_if(spans.begin(), spans.end(), [&](const TraceSpan& t) { return t.call_id == id; });
    REQUIRE(it != spans.end());
    return *it;
  };
  const TraceSpan s1 = find(p1.call_id());
  CHECK(s1.input == "<b>hello</b> \"there\"");
  CHECK(s1.output.find("hello") != std::string::npos);
  const TraceSpan s2 = find(p2.call_id());
  CHECK(s2.consumed == std::vector<std::string>{p1.call_id()});
  const TraceSpan sb = find(big.call_id());
  CHECK(sb.input.size() <= TraceSpan::kSpanPreviewBytes);
  CHECK(sb.input.rfind("zzz", 0) == 0);
  CHECK(sb.input.ends_with("\u2026"));  // the mark of a cut

  // Content that is not text previews as JSON, cut inside a string of multi-byte characters
  // at a character boundary (the server once threw there, ending the process).
  std::string cjk;
  for (int i = 0; i < 200; ++i) cjk += "\u5b57";  // 3 bytes each
  Placeholder parts =
      first.reply(Msg("user", agentd::Value::array({{{"type", "text"}, {"text", cjk}}}), "user"));
  parts.get();
  const TraceSpan sp = find(parts.call_id());
  CHECK(sp.input.size() <= TraceSpan::kSpanPreviewBytes);
  CHECK(sp.input.rfind("[{\"text\":\"\u5b57", 0) == 0);
  CHECK(sp.input.ends_with("\u2026"));
  CHECK_NOTHROW(agentd::Value(sp.input).dump());  // valid UTF-8
  CHECK(first.info().completed_calls == 3);       // and the server lives on

  const std::string json = agentd::to_chrome_trace({{"server-a", spans}});
  const agentd::Value trace = agentd::Value::parse(json);
  const auto& events = trace.at("traceEvents");
  int complete = 0, flow_start = 0, flow_end = 0;
  bool named = false;
  for (const auto& e : events) {
    const std::string ph = e.at("ph");
    if (ph == "X" && e.at("cat") != "queue") ++complete;
    if (ph == "s") ++flow_start;
    if (ph == "f") ++flow_end;
    if (ph == "M" && e.at("name") == "process_name") named = e.at("args").at("name") == "server-a";
  }
  CHECK(complete == static_cast<int>(spans.size()));
  CHECK(flow_start == 1);
  CHECK(flow_end == 1);
  CHECK(named);
}
