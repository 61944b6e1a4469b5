// trace_codec: a trace span comes back from its wire form field for field, and a field added to
// the schema fails here until the codec writes and reads it.
#include "trace_codec.h"

#include <capnp/message.h>
#include <capnp/schema.h>
#include <catch2/catch.hpp>

namespace detail = agentd::detail;
namespace wire = agentd::wire;
using agentd::TraceSpan;

TEST_CASE("a trace span survives the trip through its wire form", "[trace_codec]") {
  TraceSpan s;
  s.seq = 41;
  s.call_id = "c-1";
  s.agent_id = "a-1";
  s.agent_class = "Planner";
  s.kind = "method_async";
  s.method = "plan";
  s.consumed = {"c-0", "c-00"};
  s.enqueued_unix_ns = 1'700'000'000'000'000'000;
  s.queue_wait_ns = 12;
  s.run_ns = 34;
  s.model_calls = 2;
  s.prompt_tokens = 100;
  s.completion_tokens = 200;
  s.outcome = "agent_failed";
  s.error_message = "it broke";
  s.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  s.input = "what is <b>2+2</b>?";
  s.output = "4";
  s.tool_calls = {agentd::ToolCallSpan{.tool = "fs/read_text_file",
                                       .start_unix_ns = 1'700'000'000'000'000'100,
                                       .duration_ns = 5'000,
                                       .outcome = "ok",
                                       .error_message = ""},
                  agentd::ToolCallSpan{.tool = "web/search",
                                       .start_unix_ns = 1'700'000'000'000'000'200,
                                       .duration_ns = 7,
                                       .outcome = "timeout",
                                       .error_message = "no answer within 60 s"}};
  capnp::MallocMessageBuilder mb;
  auto root = mb.initRoot<wire::Span>();
  detail::write_trace_span(s, root);
  const TraceSpan back = detail::read_trace_span(root.asReader());
  CHECK(back.seq == s.seq);
  CHECK(back.call_id == s.call_id);
  CHECK(back.agent_id == s.agent_id);
  CHECK(back.agent_class == s.agent_class);
  CHECK(back.kind == s.kind);
  CHECK(back.method == s.method);
  CHECK(back.consumed == s.consumed);
  CHECK(back.enqueued_unix_ns == s.enqueued_unix_ns);
  CHECK(back.queue_wait_ns == s.queue_wait_ns);
  CHECK(back.run_ns == s.run_ns);
  CHECK(back.model_calls == s.model_calls);
  CHECK(back.prompt_tokens == s.prompt_tokens);
  CHECK(back.completion_tokens == s.completion_tokens);
  CHECK(back.outcome == s.outcome);
  CHECK(back.error_message == s.error_message);
  CHECK(back.trace_id == s.trace_id);
  CHECK(back.input == s.input);
  CHECK(back.output == s.output);
  CHECK(back.tool_calls == s.tool_calls);
  CHECK(capnp::Schema::from<wire::Span>().getFields().size() == 19);
}

TEST_CASE("a span without consumed inputs reads back without them", "[trace_codec]") {
  TraceSpan s;
  s.kind = "observe";
  s.outcome = "ok";
  capnp::MallocMessageBuilder mb;
  detail::write_trace_span(s, mb.initRoot<wire::Span>());
  const TraceSpan back = detail::read_trace_span(mb.getRoot<wire::Span>().asReader());
  CHECK(back.consumed.empty());
  CHECK(back.call_id.empty());
  CHECK(back.trace_id.empty());
  CHECK(back.kind == "observe");
}
