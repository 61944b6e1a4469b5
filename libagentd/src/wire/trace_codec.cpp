#include "trace_codec.h"

#include "value_codec.h"

namespace agentd::detail {

void write_trace_span(const TraceSpan& s, wire::Span::Builder out) {
  out.setCallId(to_kj(s.call_id));
  out.setAgentId(to_kj(s.agent_id));
  out.setAgentClass(to_kj(s.agent_class));
  out.setKind(to_kj(s.kind));
  out.setMethod(to_kj(s.method));
  write_texts(s.consumed, out.initConsumed(static_cast<unsigned>(s.consumed.size())));
  out.setEnqueuedUnixNs(s.enqueued_unix_ns);
  out.setQueueWaitNs(s.queue_wait_ns);
  out.setRunNs(s.run_ns);
  out.setModelCalls(s.model_calls);
  out.setPromptTokens(s.prompt_tokens);
  out.setCompletionTokens(s.completion_tokens);
  out.setOutcome(to_kj(s.outcome));
  out.setErrorMessage(to_kj(s.error_message));
  out.setSeq(s.seq);
  if (!s.trace_id.empty()) out.setTraceId(to_kj(s.trace_id));
  if (!s.input.empty()) out.setInput(to_kj(s.input));
  if (!s.output.empty()) out.setOutput(to_kj(s.output));
  if (!s.tool_calls.empty()) {
    auto list = out.initToolCalls(static_cast<unsigned>(s.tool_calls.size()));
    for (unsigned i = 0; i < list.size(); ++i) {
      const ToolCallSpan& c = s.tool_calls[i];
      list[i].setTool(to_kj(c.tool));
      list[i].setStartUnixNs(c.start_unix_ns);
      list[i].setDurationNs(c.duration_ns);
      list[i].setOutcome(to_kj(c.outcome));
      if (!c.error_message.empty()) list[i].setErrorMessage(to_kj(c.error_message));
    }
  }
}

TraceSpan read_trace_span(wire::Span::Reader in) {
  TraceSpan t;
  t.seq = in.getSeq();
  t.call_id = to_std(in.getCallId());
  t.agent_id = to_std(in.getAgentId());
  t.agent_class = to_std(in.getAgentClass());
  t.kind = to_std(in.getKind());
  t.method = to_std(in.getMethod());
  t.consumed = read_texts(in.getConsumed());
  t.enqueued_unix_ns = in.getEnqueuedUnixNs();
  t.queue_wait_ns = in.getQueueWaitNs();
  t.run_ns = in.getRunNs();
  t.model_calls = in.getModelCalls();
  t.prompt_tokens = in.getPromptTokens();
  t.completion_tokens = in.getCompletionTokens();
  t.outcome = to_std(in.getOutcome());
  t.error_message = to_std(in.getErrorMessage());
  t.trace_id = to_std(in.getTraceId());
  t.input = to_std(in.getInput());
  t.output = to_std(in.getOutput());
  for (auto c : in.getToolCalls()) {
    t.tool_calls.push_back(ToolCallSpan{.tool = to_std(c.getTool()),
                                        .start_unix_ns = c.getStartUnixNs(),
                                        .duration_ns = c.getDurationNs(),
                                        .outcome = to_std(c.getOutcome()),
                                        .error_message = to_std(c.getErrorMessage())});
  }
  return t;
}

}  // namespace agentd::detail
