// Histogram::quantile and to_chrome_trace: what programs do with a server's stats and spans.
#include <agentd/trace_export.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace agentd {

std::optional<double> Histogram::quantile(double q) const {
  if (count == 0 || bounds.empty()) return std::nullopt;
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * static_cast<double>(count);
  double seen = 0;
  for (std::size_t i = 0; i < bounds.size() && i < counts.size(); ++i) {
    const auto in_bucket = static_cast<double>(counts[i]);
    if (in_bucket > 0 && seen + in_bucket >= rank) {
      const double lower = i == 0 ? 0.0 : bounds[i - 1];
      return lower + (bounds[i] - lower) * std::clamp((rank - seen) / in_bucket, 0.0, 1.0);
    }
    seen += in_bucket;
  }
  return bounds.back();  // in the part past the last bound
}

namespace {

// Chrome's trace format counts time in microseconds (fractions allowed).
double us(std::int64_t ns) { return static_cast<double>(ns) / 1000.0; }

}  // namespace

std::string to_chrome_trace(const std::vector<ServerSpans>& servers) {
  Value events = Value::array();
  struct Where {
    int pid;
    int tid;
    double ts;  // inside the call's run slice: where an arrow binds to it
  };
  std::map<std::string, Where> producer;  // call id -> its call
  std::vector<std::pair<const TraceSpan*, Where>> consumers;
  int pid = 0;
  for (const ServerSpans& server : servers) {
    ++pid;
    events.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", server.server}}}});
    std::map<std::string, int> tids;  // agent id -> its row
    for (const TraceSpan& s : server.spans) {
      auto [it, added] = tids.emplace(s.agent_id, static_cast<int>(tids.size()) + 1);
      const int tid = it->second;
      if (added) {
        events.push_back({{"ph", "M"},
                          {"name", "thread_name"},
                          {"pid", pid},
                          {"tid", tid},
                          {"args", {{"name", s.agent_id + " (" + s.agent_class + ")"}}}});
      }
      const double queued = us(s.enqueued_unix_ns);
      const double started = queued + us(s.queue_wait_ns);
      // Arrows bind to the slice that encloses their timestamp: the middle of the run, never a
      // boundary it shares with the queue wait before it.
      const double middle = started + us(s.run_ns) / 2;
      if (s.queue_wait_ns > 0) {
        events.push_back({{"ph", "X"},
                          {"name", "queued"},
                          {"cat", "queue"},
                          {"pid", pid},
                          {"tid", tid},
                          {"ts", queued},
                          {"dur", us(s.queue_wait_ns)},
                          {"args", {{"call_id", s.call_id}}}});
      }
      Value args = {{"call_id", s.call_id},
                    {"agent_id", s.agent_id},
                    {"agent_class", s.agent_class},
                    {"kind", s.kind},
                    {"outcome", s.outcome},
                    {"seq", s.seq},
                    {"consumed", s.consumed},
                    {"model_calls", s.model_calls},
                    {"prompt_tokens", s.prompt_tokens},
                    {"completion_tokens", s.completion_tokens}};
      if (!s.method.empty()) args["method"] = s.method;
      if (!s.error_message.empty()) args["error"] = s.error_message;
      if (!s.trace_id.empty()) args["trace_id"] = s.trace_id;
      if (!s.input.empty()) args["input"] = s.input;
      if (!s.output.empty()) args["output"] = s.output;
      events.push_back({{"ph", "X"},
                        {"name", s.method.empty() ? s.kind : s.kind + " " + s.method},
                        {"cat", s.outcome == "ok" ? "call" : "call,error"},
                        {"pid", pid},
                        {"tid", tid},
                        {"ts", started},
                        {"dur", us(s.run_ns)},
                        {"args", std::move(args)}});
      if (!s.call_id.empty()) producer[s.call_id] = Where{pid, tid, middle};
      if (!s.consumed.empty()) consumers.emplace_back(&s, Where{pid, tid, middle});
    }
  }
  // A flow arrow per consumed placeholder whose producing call is in the file, from the
  // producer's run to the consumer's.
  std::uint64_t flow = 0;
  for (const auto& [s, at] : consumers) {
    for (const std::string& id : s->consumed) {
      auto p = producer.find(id);
      if (p == producer.end()) continue;
      ++flow;
      events.push_back({{"ph", "s"},
                        {"name", "placeholder"},
                        {"cat", "dataflow"},
                        {"id", flow},
                        {"pid", p->second.pid},
                        {"tid", p->second.tid},
                        {"ts", p->second.ts}});
      events.push_back({{"ph", "f"},
                        {"bp", "e"},
                        {"name", "placeholder"},
                        {"cat", "dataflow"},
                        {"id", flow},
                        {"pid", at.pid},
                        {"tid", at.tid},
                        {"ts", at.ts}});
    }
  }
  Value out = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return out.dump(-1, ' ', false, Value::error_handler_t::replace);
}

}  // namespace agentd
