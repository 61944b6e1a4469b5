#include "call_stats.h"

#include "mailbox.h"

#include <agentd/client.h>

#include <algorithm>
#include <string_view>
#include <variant>

namespace agentd::detail {

void LatencyHistogram::observe(double seconds) {
  for (std::size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) {
      ++buckets[i];
      break;
    }
  }
  ++count;
  sum += seconds;
}

namespace {

// At most max bytes of text, cut at a UTF-8 character boundary, "…" marking a cut.
void append_cut(std::string& out, std::string_view text, std::size_t max) {
  if (out.size() + text.size() <= max) {
    out.append(text);
    return;
  }
  std::size_t n = max > out.size() ? max - out.size() : 0;
  while (n > 0 && n < text.size() && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  out.append(text.substr(0, n));
  out.append("\u2026");
}

// A preview of v's JSON text in at most about max bytes, without writing out a big value first.
void append_preview(std::string& out, const Value& v, std::size_t max) {
  if (out.size() >= max) return;
  if (v.is_string()) {
    append_cut(out, Value(v.get_ref<const std::string&>().substr(0, max + 4)).dump(), max);
  } else if (v.is_array() || v.is_object()) {
    out.push_back(v.is_array() ? '[' : '{');
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() < max; ++it) {
      if (!first) out.push_back(',');
      first = false;
      if (v.is_object()) {
        append_cut(out, Value(it.key()).dump(), max);
        out.push_back(':');
      }
      append_preview(out, it.value(), max);
    }
    if (out.size() >= max) return;
    out.push_back(v.is_array() ? ']' : '}');
  } else {
    append_cut(out, v.dump(), max);
  }
}

std::string preview(const Msg& m) {
  std::string out;
  if (m.content.is_string())
    append_cut(out, m.content.get_ref<const std::string&>(), TraceSpan::kSpanPreviewBytes);
  else if (!m.content.is_null())
    append_preview(out, m.content, TraceSpan::kSpanPreviewBytes);
  return out;
}

}  // namespace

void CallStats::finished(const AgentSlot& slot, const Call& call,
                         std::chrono::steady_clock::time_point finished, SpanRecord* span_out) {
  using std::chrono::duration_cast;
  using std::chrono::nanoseconds;
  SpanRecord s;
  s.call_id = call.call_id;
  s.agent_id = slot.id;
  s.agent_class = slot.class_name;
  s.kind = kind_name(call.kind);
  s.method = call.method;
  s.consumed = call.consumed;
  s.enqueued_unix_ns = duration_cast<nanoseconds>(call.enqueued_wall.time_since_epoch()).count();
  s.queue_wait_ns =
      std::max<std::int64_t>(0, duration_cast<nanoseconds>(call.started - call.enqueued).count());
  s.run_ns = duration_cast<nanoseconds>(finished - call.started).count();
  s.model_calls = call.model_calls;
  s.prompt_tokens = call.prompt_tokens;
  s.completion_tokens = call.completion_tokens;
  s.trace_id = call.trace_id;
  if (call.input)
    if (const Msg* in = std::get_if<Msg>(call.input.get())) s.input = preview(*in);
  if (call.out_msg) s.output = preview(*call.out_msg);
  if (call.out_error) {
    s.outcome = std::string(to_string(call.out_error->code()));
    s.error_message = call.out_error->message();
  } else {
    s.outcome = "ok";
  }
  const std::chrono::duration<double> run_time = finished - call.started;
  const SpanRecord& kept = record(slot.class_name, !call.out_error, run_time.count(), std::move(s));
  if (span_out != nullptr) *span_out = kept;
}

void CallStats::failed_without_running(const std::string& class_name) {
  ++failed_;
  ++by_class_[class_name.empty() ? "(none)" : class_name].second;
}

const SpanRecord& CallStats::record(const std::string& class_name, bool ok, double run_seconds,
                                    SpanRecord span) {
  auto& counts = by_class_[class_name];
  if (ok) {
    ++completed_;
    ++counts.first;
  } else {
    ++failed_;
    ++counts.second;
  }
  latency_.observe(run_seconds);
  span.seq = ++span_seq_;
  if (spans_.size() < max_spans_) {
    spans_.push_back(std::move(span));
    return spans_.back();
  }
  SpanRecord& slot = spans_[(span_seq_ - 1) % max_spans_];
  slot = std::move(span);
  return slot;
}

std::vector<SpanRecord> CallStats::recent_spans(std::size_t limit) const {
  std::size_t n = spans_.size();
  if (limit != 0 && limit < n) n = limit;
  std::vector<SpanRecord> out;
  out.reserve(n);
  // The ring holds seqs span_seq_ - spans_.size() + 1 .. span_seq_ at index (seq - 1) % size.
  for (std::uint64_t seq = span_seq_ - n + 1; seq <= span_seq_; ++seq)
    out.push_back(spans_[(seq - 1) % max_spans_]);
  return out;
}

}  // namespace agentd::detail
