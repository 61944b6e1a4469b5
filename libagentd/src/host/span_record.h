// SpanRecord: the trace span of one agent call that ran (AgentServer.traces, --trace-file).
// A header of its own so the span's readers (the trace file, the RPC layer) need not include
// the whole host.
#pragma once

#include <agentd/tool.h>

#include <cstdint>
#include <string>
#include <vector>

namespace agentd::detail {

struct SpanRecord {
  std::uint64_t seq = 0;  // 1, 2, ... in finishing order
  std::string call_id;
  std::string agent_id;
  std::string agent_class;
  const char* kind = "";
  std::string method;
  std::vector<std::string> consumed;
  std::int64_t enqueued_unix_ns = 0;
  std::int64_t queue_wait_ns = 0;  // enqueue -> start
  std::int64_t run_ns = 0;
  std::string outcome;  // "ok" or the error code's name
  std::string error_message;
  std::uint64_t model_calls = 0;  // model calls made while this call ran, with their tokens
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::string trace_id;                  // the caller's (CallSpec.traceId); empty: none
  std::string input;                     // the input's content, cut (span_preview)
  std::string output;                    // the reply's content, cut
  std::vector<ToolCallSpan> tool_calls;  // its MCP tool calls
};

}  // namespace agentd::detail
