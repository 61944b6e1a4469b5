// A call's model usage travels with its outcome to the caller (Placeholder::usage(), the wire's
// Outcome.usage), and a caller's trace id reaches the server's span of the call
// (AgentRef::with_trace_id, CallSpec.traceId / Agent.reply's traceId), on real as_servers.
// AskAgent (examples/async_agents) asks the built-in echo model, which counts words as tokens:
// the prompt's words in, the same words out.
#include "error_of.h"
#include "raw_login.h"
#include "server_process.h"
#include "test_names.h"

#include "agentd.capnp.h"

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

using namespace agentd::test;
using agentd::CallUsage;
using agentd::TraceSpan;
namespace wire = agentd::wire;

namespace {

std::vector<std::string> usage_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"--plugin", async_plugin()};
  a.insert(a.end(), extra.begin(), extra.end());
  return standard_args(a);
}

std::optional<TraceSpan> span_of(Client& c, const std::string& call_id) {
  for (const auto& s : c.traces())
    if (s.call_id == call_id) return s;
  return std::nullopt;
}

}  // namespace

TEST_CASE("a placeholder reports the model tokens its call used, as the call's span counts them", "[usage]") {
  auto s = ServerProcess::start(usage_args());
  Client c = s->connect();
  AgentRef ask = c.create_agent("AskAgent", "ask");
  AgentRef echo = c.create_agent("EchoAgent", "echo");

  Placeholder p = ask.reply(Msg("user", "one two three four", "user"));
  CHECK(p.get().content == "one two three four");
  const CallUsage u = p.usage();
  CHECK(u.model_calls == 1);
  CHECK(u.prompt_tokens == 4);
  CHECK(u.completion_tokens == 4);
  // The same figures as the server's trace span of the call.
  auto span = span_of(c, p.call_id());
  REQUIRE(span);
  CHECK(span->model_calls == u.model_calls);
  CHECK(span->prompt_tokens == u.prompt_tokens);
  CHECK(span->completion_tokens == u.completion_tokens);

  // Streamed, and the next call on the same agent: each call counts its own use only.
  Placeholder q = ask.reply_stream(Msg("user", "five six", "user"));
  std::string joined;
  for (const std::string& chunk : q.chunks()) joined += chunk;
  CHECK(joined == "five six");
  q.get();
  CHECK(q.usage() == CallUsage{1, 2, 2});

  // An agent that uses no model reports zeros; so does a placeholder passed on and read.
  Placeholder e = echo.reply(Msg("user", "no model here", "user"));
  e.get();
  CHECK(e.usage().empty());
  Placeholder chained = echo.reply(ask.reply(Msg("user", "seven", "user")));
  chained.get();
  CHECK(chained.usage().empty());
}

TEST_CASE("usage comes with a result too large to inline, read when get() wants it", "[usage]") {
  auto s = ServerProcess::start(usage_args());
  Client c = s->connect();
  AgentRef ask = c.create_agent("AskAgent", "ask-big");
  // 40,000 words, 80,000 bytes: more than the client's inline limit (64 KiB), so the reply comes
  // as "too large" first and is read with Session.read.
  std::string text;
  for (int i = 0; i < 40000; ++i) text += "w ";
  Placeholder p = ask.reply(Msg("user", text, "user"));
  CHECK(p.get().text().size() >= 79999);
  CHECK(p.usage() == CallUsage{1, 40000, 40000});
}

TEST_CASE("a call's trace id reaches its span, and a bad one is refused before it is sent", "[trace]") {
  TempDir dir;
  const std::string trace_file = dir.path() + "/spans.jsonl";
  auto s = ServerProcess::start(usage_args({"--trace-file", trace_file}));
  Client c = s->connect();
  AgentRef ask = c.create_agent("AskAgent", "ask-traced");
  const std::string trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  AgentRef traced = ask.with_trace_id(trace_id);
  CHECK(traced.trace_id() == trace_id);
  CHECK(ask.trace_id().empty());  // the original reference is unchanged

  Placeholder p = traced.reply(Msg("user", "traced call", "user"));
  p.get();
  traced.observe(Msg("user", "seen", "user"));
  CHECK(traced.memory().size() >= 2);
  Placeholder untraced = ask.reply(Msg("user", "plain call", "user"));
  untraced.get();

  auto span = span_of(c, p.call_id());
  REQUIRE(span);
  CHECK(span->trace_id == trace_id);
  CHECK(span->prompt_tokens == 2);
  auto plain = span_of(c, untraced.call_id());
  REQUIRE(plain);
  CHECK(plain->trace_id.empty());
  // The observe and the memory read were made in the trace too.
  auto spans = c.traces();
  CHECK(std::count_if(spans.begin(), spans.end(), [&](const TraceSpan& t) {
          return t.trace_id == trace_id && (t.kind == "observe" || t.kind == "memory");
        }) == 2);

  // --trace-file has it as the attribute agentd.trace_id of the call's line.
  const std::string attribute = R"({"key":"agentd.trace_id","value":{"stringValue":")" + trace_id + "\"}}";
  CHECK(wait_until(
      [&] {
        std::ifstream in(trace_file);
        std::string line;
        while (std::getline(in, line))
          if (line.find(p.call_id()) != std::string::npos) return line.find(attribute) != std::string::npos;
        return false;
      },
      10s));

  Error too_long = error_of([&] { ask.with_trace_id(std::string(129, 'a')); });
  CHECK(too_long.code() == ErrorCode::bad_args);
  CHECK_THAT(too_long.message(), Contains("129 bytes") && Contains("128"));
  Error spaced = error_of([&] { ask.with_trace_id("has space"); });
  CHECK(spaced.code() == ErrorCode::bad_args);
  CHECK_THAT(spaced.message(), Contains("0x20"));
}

TEST_CASE("the per-capability Agent.reply carries a trace id and answers the usage on the wire",
          "[trace][wire]") {
  auto s = ServerProcess::start(usage_args());
  kj::AsyncIoContext io = kj::setupAsyncIo();
  auto stream = io.provider->getNetwork()
                    .parseAddress("127.0.0.1", s->port())
                    .wait(io.waitScope)
                    ->connect()
                    .wait(io.waitScope);
  capnp::TwoPartyClient rpc(*stream);
  wire::AgentServer::Client server = raw_login(rpc);

  auto create = server.createAgentRequest();
  create.setClassName("AskAgent");
  auto agent = create.send().getAgent();

  auto reply = agent.replyRequest();
  auto msg = reply.initInput().initMsg();
  msg.setName("user");
  msg.setRole("user");
  msg.initContent().setText("alpha beta gamma");
  reply.setCallId("raw-traced-1");
  reply.setInlineLimit(1 << 20);
  reply.setTraceId("0af7651916cd43dd8448eb211c80319c");
  auto answered = reply.send().wait(io.waitScope);
  auto outcome = answered.getOutcome();
  REQUIRE(outcome.isMsg());
  REQUIRE(outcome.hasUsage());
  CHECK(outcome.getUsage().getModelCalls() == 1);
  CHECK(outcome.getUsage().getPromptTokens() == 3);
  CHECK(outcome.getUsage().getCompletionTokens() == 3);
  // Result.get answers the same usage (a reader that arrives later).
  auto read = answered.getResult().getRequest().send().wait(io.waitScope);
  auto again = read.getOutcome();
  REQUIRE(again.hasUsage());
  CHECK(again.getUsage().getPromptTokens() == 3);

  // A trace id over 128 bytes fails the call alone, saying why.
  auto bad = agent.replyRequest();
  bad.initInput().initMsg().initContent().setText("x");
  bad.setCallId("raw-traced-2");
  bad.setInlineLimit(1 << 20);
  bad.setTraceId(std::string(200, 'a'));
  auto bad_answer = bad.send().wait(io.waitScope);
  auto bad_read = bad_answer.getResult().getRequest().send().wait(io.waitScope);
  auto refused = bad_read.getOutcome();
  REQUIRE(refused.isError());
  CHECK(refused.getError().getCode() == wire::ErrorCode::BAD_REQUEST);
  CHECK(std::string(refused.getError().getMessage().cStr()).find("trace id") != std::string::npos);

  Client c = s->connect();
  auto span = span_of(c, "raw-traced-1");
  REQUIRE(span);
  CHECK(span->trace_id == "0af7651916cd43dd8448eb211c80319c");
  CHECK_FALSE(span_of(c, "raw-traced-2"));
}
